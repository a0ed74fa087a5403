"""How the mixed-precision op policy covers a call (used by AMP401).

Every op fact lives in :mod:`amplint.amp.policy` (the cast lists, which ops are GEMM-like,
which have no half kernel, :func:`~amplint.amp.policy.op_family`); this module only asks
it per engine and device setting.  Nothing here imports torch.
"""
from __future__ import annotations

from typing import Optional

from amplint.amp import policy
from amplint.amp.policy import FFT, FP32_ONLY, GEMM  # noqa: F401 (the families, re-exported)

family = policy.op_family


def devices(setting: str) -> tuple[str, ...]:
    """The autocast devices a ``device`` setting stands for."""
    return ("cuda", "cpu") if setting == "any" else (setting,)


def cast(qualname: str, engine: str, device: str) -> Optional[str]:
    """The selected policy's cast for ``qualname`` on ``device`` (None: not covered).
    The ``torch`` policy is dispatch-level, so ops outside ``torch`` are judged by what
    they call (unknown here): reported as covered ("external")."""
    if engine == "torch" and not qualname.startswith("torch."):
        return "external"
    return policy.cast_of(qualname, engine, device)


def uncovered_on(qualname: str, fam: str, engine: str, setting: str) -> tuple[str, ...]:
    """The devices on which ``qualname`` (of family ``fam``) is left uncovered by the policy.

    * GEMM-like: only the ``amplint`` policy matters (``torch.autocast`` runs einsum in
      half); uncovered unless the policy casts it to half.
    * fp32-only / FFT: uncovered when the policy does not cast it at all (it then runs in
      its input's dtype, which is half after a half-cast matmul feeds it).
    """
    if fam == GEMM:
        if engine != "amplint":
            return ()
        return () if cast(qualname, engine, "cuda") == policy.HALF else ("cuda",)
    out = []
    for device in devices(setting):
        if cast(qualname, engine, device) is None:
            out.append(device)
    return tuple(out)


def register_kind(fam: str) -> str:
    """Which ``amp.register_*_function`` the fix writes for an op of family ``fam``."""
    return "half" if fam == GEMM else "float"


#: ``amp.register_half_function`` and friends, and the kind each registers.
REGISTER_FUNCTIONS = {
    "register_half_function": policy.HALF,
    "register_float_function": policy.FLOAT,
    "register_promote_function": policy.PROMOTE,
}
#: ``@amp.half_function`` and friends.
DECORATORS = {"half_function": policy.HALF, "float_function": policy.FLOAT,
              "promote_function": policy.PROMOTE}
#: Module paths whose ``register_*`` / decorators are the O1 engine's.
AMP_MODULES = ("amplint.amp", "apex.amp", "apex")
