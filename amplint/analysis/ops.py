"""Which calls the mixed-precision op policy leaves uncovered (used by AMP401).

The cast lists themselves live in :mod:`amplint.amp.policy` (one source of truth); this
module only adds what the lists cannot say:

* which ops are *GEMM-like* (worth running in half, Tensor Cores): the ops PyTorch's CUDA
  autocast runs in lower precision (``policy.names("half", "torch", "cuda")``, ATen names)
  plus a few GEMM-like functions no list names (``tensordot``, ``outer``/``ger``,
  ``opt_einsum.contract``);
* which ops have *no half kernel* (or one only for some sizes) and so must run in fp32:
  the linear-algebra decompositions and FFTs.  Measured on torch 2.13 CPU (every one of
  these raises on an fp16 input, e.g. ``linalg.inv: Low precision dtypes not supported.
  Got Half``, ``"lu_cpu" not implemented for 'Half'``, FFT ``Unsupported dtype Half``) and
  CUDA (``linalg.inv`` raises; ``fft.rfft`` of length 100 raises "cuFFT only supports
  dimensions whose sizes are powers of two when computing in half precision").
  ``tests/rules/test_ops.py`` re-checks the CPU half on the installed torch.

What ``amplint.amp.policy`` could gain so this module shrinks: a ``NO_HALF_KERNEL`` table
(the set below) and a ``GEMM_LIKE`` table (the extras below), both as data.

Nothing here imports torch.
"""
from __future__ import annotations

import re
from typing import Optional

from amplint.amp import policy

GEMM = "gemm"  # fast in half on Tensor Cores; slow (fp32) or crashing (mixed) when uncovered
FP32_ONLY = "fp32-only"  # no half kernel: raises on fp16/bf16 input
FFT = "fft"  # half only for power-of-two sizes on CUDA, none on CPU

#: GEMM-like functions on no cast list of either policy (ATen-style names after ``torch.``).
_GEMM_EXTRA = frozenset(("tensordot", "outer", "ger", "inner", "kron"))
#: GEMM-like functions outside torch (qualified names).
_GEMM_EXTERNAL = frozenset(("opt_einsum.contract",))

#: Linear-algebra functions with no fp16/bf16 kernel (Python names under ``torch.`` /
#: ``torch.linalg.``).  ``torch.linalg`` functions that *do* take half (``diagonal``,
#: ``matrix_power``, ``matrix_exp``, the norms, ``cross``, ``matmul``, ``multi_dot``,
#: ``vecdot``) are absent, and so are those a policy lists.
_NO_HALF_LINALG = frozenset((
    "cholesky cholesky_ex cond det eig eigh eigvals eigvalsh householder_product inv inv_ex "
    "ldl_factor ldl_factor_ex ldl_solve lstsq lu lu_factor lu_factor_ex lu_solve matrix_rank "
    "pinv qr slogdet solve solve_ex solve_triangular svd svdvals tensorinv tensorsolve vander"
).split())
_NO_HALF_TORCH = frozenset((
    "inverse det logdet slogdet svd svd_lowrank pca_lowrank cholesky cholesky_solve "
    "cholesky_inverse qr lu lu_solve lu_unpack pinverse triangular_solve geqrf orgqr ormqr "
    "lstsq eig symeig lobpcg cdist pdist"
).split())
_NO_HALF_TENSOR_METHODS = frozenset(("inverse", "det", "logdet", "slogdet", "svd", "cholesky",
                                     "cholesky_solve", "cholesky_inverse", "qr", "pinverse",
                                     "triangular_solve", "geqrf", "orgqr", "ormqr", "lu"))
#: FFT helpers that are not transforms (work in any dtype).
_FFT_HELPERS = frozenset(("fftfreq", "rfftfreq", "fftshift", "ifftshift"))
_SPECTRAL_TORCH = frozenset(("stft", "istft"))

_LOW_PRECISION_ATEN = policy.names(policy.HALF, "torch", "cuda")
_RNN_OR_CONV = re.compile(r"conv|cudnn|lstm|gru|rnn|_thnn|_scaled_dot_product_flash")


def family(qualname: str) -> Optional[str]:
    """``GEMM``, ``FP32_ONLY``, ``FFT`` or None (not an op this rule is about)."""
    if qualname in _GEMM_EXTERNAL:
        return GEMM
    if qualname.startswith("torch.linalg."):
        name = qualname[len("torch.linalg."):]
        return FP32_ONLY if name in _NO_HALF_LINALG else None
    if qualname.startswith("torch.fft."):
        name = qualname[len("torch.fft."):]
        return None if name in _FFT_HELPERS or "." in name else FFT
    if qualname.startswith("torch.") and qualname.count(".") == 1:
        name = qualname[len("torch."):]
        if name in _NO_HALF_TORCH:
            return FP32_ONLY
        if name in _SPECTRAL_TORCH:
            return FFT
        if name in _GEMM_EXTRA or (name in _LOW_PRECISION_ATEN and not _RNN_OR_CONV.search(name)):
            return GEMM
    return None


def method_family(attr: str) -> Optional[str]:
    """The family of a Tensor method call ``x.<attr>(...)`` (receiver type unknown)."""
    if attr in _NO_HALF_TENSOR_METHODS:
        return FP32_ONLY
    return None


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
