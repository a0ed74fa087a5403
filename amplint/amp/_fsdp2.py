"""O2 and O3 on FSDP2 (``fully_shard``): built on FSDP2's own mixed precision.

FSDP2 keeps each parameter as an fp32 shard (a DTensor) and all-gathers it for compute, so
the model cannot be cast the way O2 casts a plain model (the shards and all-gather buffers
would stay fp32 behind a half ``p.data``). Instead ``initialize`` gives every
``fully_shard`` group the policy O2 means:

* O2: ``MixedPrecisionPolicy(param_dtype=half, reduce_dtype=float32)``: half compute copies
  are all-gathered, gradients are reduce-scattered in fp32 into fp32 shards; the fp32 shards
  are the master weights, so the optimizer steps them directly (no separate masters).
* O3: ``param_dtype=half, reduce_dtype=half`` (the gradients are reduced in half).

Forward inputs are cast to half by FSDP2's root (``cast_forward_inputs``), outputs to fp32 by
the engine's output hook, and the loss scaler unscales the local gradient shards and
all-reduces its found-inf flag (``_scaler.py``), so every rank skips the same steps. A group
sharded with a ``MixedPrecisionPolicy`` of its own keeps it when it agrees; a conflicting one
is refused. The policy must be in place before the first forward (FSDP2 reads it at its lazy
initialisation), so ``initialize`` refuses a sharded model that already ran a forward.

FSDP2 has no public setter for a group's policy; the attributes set here are those of
``torch.distributed.fsdp._fully_shard`` (``FSDPState._mp_policy``,
``FSDPParamGroup.mp_policy``, ``FSDPParam.mp_policy``), checked to exist first.
"""
from __future__ import annotations

import torch


def fsdp_states(models):
    """``(module, FSDP2 state)`` for every ``fully_shard``-ed module of ``models``."""
    found = []
    for model in models:
        for module in model.modules():
            get = getattr(module, "_get_fsdp_state", None)
            if callable(get):
                found.append((module, get()))
    return found


def apply_policy(models, opt_level: str, half: torch.dtype):
    """Give every FSDP2 group of ``models`` the mixed precision of ``opt_level``."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    reduce_dtype = torch.float32 if opt_level == "O2" else half
    states = fsdp_states(models)
    if not states:
        raise RuntimeError("amp.initialize: the model has DTensor parameters but no fully_shard "
                           "module; only FSDP2 sharding is supported at O2/O3.")
    name = str(half).replace("torch.", "")
    for module, state in states:
        if not hasattr(state, "_mp_policy") or not hasattr(state, "_fsdp_param_group"):
            raise RuntimeError(
                "amp.initialize: this torch's FSDP2 does not expose the mixed-precision policy "
                "amplint sets. Fix: fully_shard(module, mp_policy=MixedPrecisionPolicy("
                f"param_dtype=torch.{name}, reduce_dtype=torch.float32)) and use O1.")
        if getattr(state, "_is_root", None) is not None:
            raise RuntimeError(
                f"amp.initialize: opt_level {opt_level} on an FSDP2 model must come before its "
                "first forward (FSDP2 fixes its mixed precision then). Fix: fully_shard, build "
                "the optimizer, amp.initialize, then run the model.")
        current = state._mp_policy
        if current.param_dtype not in (None, half) or current.reduce_dtype not in (
                None, reduce_dtype) or current.output_dtype not in (None, torch.float32):
            raise RuntimeError(
                f"amp.initialize: {type(module).__name__} was sharded with {current}, which "
                f"disagrees with opt_level {opt_level} (param_dtype=torch.{name}, reduce_dtype="
                f"{reduce_dtype}). Fix: shard without mp_policy (amp sets it) or with that one.")
        policy = MixedPrecisionPolicy(param_dtype=half, reduce_dtype=reduce_dtype,
                                      output_dtype=current.output_dtype,
                                      cast_forward_inputs=current.cast_forward_inputs)
        state._mp_policy = policy
        group = state._fsdp_param_group
        if group is not None:
            group.mp_policy = policy
            for fsdp_param in group.fsdp_params:
                fsdp_param.mp_policy = policy


def local(t):
    """The local shard of a DTensor (in-place ops on it change the DTensor), else ``t``."""
    to_local = getattr(t, "to_local", None)
    return to_local() if to_local is not None and type(t).__name__ == "DTensor" else t
