"""amplint.amp: apex-compatible mixed precision (apex.amp's API) on modern PyTorch.

Code written for apex runs after changing one line, ``from apex import amp`` ->
``from amplint import amp``::

    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    with amp.scale_loss(loss, optimizer) as scaled_loss:
        scaled_loss.backward()
    clip_grad_norm_(model.parameters(), 50)   # gradients are already unscaled here
    optimizer.step()                           # skipped (one log line) after an overflow

Importing this package does not import torch: the implementation is loaded on first use of
any attribute below, so ``import amplint.amp.policy`` (pure data, used by the linter) stays
cheap.

API (apex)
    ``initialize(models, optimizers=None, enabled=True, opt_level="O1", cast_model_type=None,
    patch_torch_functions=None, keep_batchnorm_fp32=None, master_weights=None, loss_scale=None,
    cast_model_outputs=None, num_losses=1, verbosity=1, min_loss_scale=None,
    max_loss_scale=2.**24)``, ``scale_loss(loss, optimizers, loss_id=0, model=None,
    delay_unscale=False, delay_overflow_check=False)``, ``state_dict()``,
    ``load_state_dict(sd)``, ``master_params(optimizer)``, ``register_half_function``,
    ``register_float_function``, ``register_promote_function``, ``half_function``,
    ``float_function``, ``promote_function``, ``disable_casts()``.

Opt levels
    O0 fp32. O1 casts inputs of listed functions (``amplint.amp.policy``), weights stay fp32.
    O2 half model (affine BatchNorm kept fp32), fp32 master weights in the optimizer, inputs
    cast to half and outputs to fp32, ``model.state_dict()`` in fp32. O3 pure half.

Extensions beyond apex (keyword-only)
    ``half_dtype=torch.bfloat16`` picks bf16 for O1 (for O2/O3, ``cast_model_type=
    torch.bfloat16`` does the same); with bf16 the default loss scale is a static 1.0.
    ``keep_fp32_modules=(nn.LayerNorm, nn.Softmax, nn.LogSoftmax)`` keeps more module classes
    in fp32 under O2/O3 (they run in fp32 and hand back the input's dtype). CPU models work.
    ``fp32_log_probs=True`` (O1): ``cross_entropy`` keeps its log-probabilities in fp32; with
    bf16 logits that costs an fp32 copy of the logits (no fused bf16->fp32 log_softmax kernel
    exists). ``"lse"`` skips the copy (an fp32-accumulated log-sum-exp over bf16
    exponentials: the loss within 3e-3 of fp32); ``False`` keeps the log-probabilities in the
    half dtype and sums only the picked values in fp32 (``bench/RESULTS.md`` measures them).
    ``hysteresis=N`` cuts the dynamic scale only after N overflows in a row.
    ``allow_incoming_model_not_fp32=True`` and ``allow_banned=True`` are apex's switches as
    real options (half parameters accepted, with fp32 masters under O2; O1 runs
    ``binary_cross_entropy`` in fp32 instead of raising).

apex internals (``_compat.py``)
    ``amp._amp_state`` is a view over the engine's state (``loss_scalers[i].loss_scale()`` /
    ``._loss_scale``, ``opt_properties``, ``allow_incoming_model_not_fp32``, ``handle``), and
    ``amp.init(...)`` is apex's legacy O1 entry point. Optimizer wrappers exposing
    ``param_groups``/``state``/``step`` (LARC, lookahead) are accepted. ``step()`` refuses
    scaled gradients, a second step without new gradients, and gradients from a backward
    outside ``scale_loss`` (``_optimizer.py``).

torch.compile
    ``torch.compile(model)`` after ``initialize`` traces O1 and O2 models without graph
    breaks (``tests/amp/test_compile.py``); ``scale_loss`` and the optimizer step stay eager.

Limits apex lacks (``_scaler.py`` says why)
    The dynamic scale has a floor, ``min_loss_scale=None`` meaning 2**-14, with a warning the
    first time an overflow happens there; every scale is a finite number in [2**-24, 2**126];
    ``initialize`` and ``load_state_dict`` validate their arguments (``load_state_dict`` also
    refuses a state of the other scaler kind). At O3 an optimizer ``eps`` that underflows the
    half type is warned about once.

For tools that drive the engine (the runtime verifier)
    ``reset()`` (alias ``deinitialize()``) undoes everything initialize did: restores the
    patched torch functions, removes model hooks and optimizer patches, drops the scalers; user
    registrations are kept. ``initialize`` itself also undoes a previous session's O1
    patching, so O0..O3 can run one after another in one process on fresh models and
    optimizers (an optimizer may go through initialize only once). ``loss_scale(loss_id=0)``
    and ``skipped_steps(loss_id=0)`` report each scaler; ``properties()`` the current options.

Registration after ``initialize`` takes effect immediately (apex silently ignored it).

Where O1 differs from ``torch.autocast``
    One op list for every device (``policy.py``), so CPU and CUDA give the same dtypes (CPU
    autocast keeps softmax and sum in half). Casting comes from patched Python attributes, as
    in apex: names bound before ``initialize`` and C++-internal calls are not cast, and casting
    is on process-wide until ``reset()`` rather than inside a ``with`` block. ``einsum`` is
    unlisted; ``std``/``var``/``interpolate``/losses run in fp32; ``cross_entropy`` keeps its
    log-probabilities in fp32; BCE with a half input raises on every device; in-place fp32-list
    ops on half tensors raise. Gradients are unscaled at ``scale_loss`` exit (apex), not by
    ``GradScaler.unscale_``.
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "initialize": "_frontend", "state_dict": "_frontend", "load_state_dict": "_frontend",
    "master_params": "_frontend", "reset": "_frontend", "deinitialize": "_frontend",
    "loss_scale": "_frontend", "skipped_steps": "_frontend", "properties": "_frontend",
    "scale_loss": "_handle", "_amp_state": "_compat", "init": "_compat",
    "disable_casts": "_casting", "half_function": "_casting", "float_function": "_casting",
    "promote_function": "_casting", "register_half_function": "_casting",
    "register_float_function": "_casting", "register_promote_function": "_casting",
}

__all__ = sorted(n for n in _EXPORTS if not n.startswith("_")) + ["policy"]


def __getattr__(name):
    if name == "policy":  # pure data, no torch
        return importlib.import_module(f"{__name__}.policy")
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'amplint.amp' has no attribute {name!r}")
    try:
        implementation = importlib.import_module(f"{__name__}.{module}")
    except ModuleNotFoundError as exc:
        from ..optional import is_missing_torch, missing_torch

        if not is_missing_torch(exc):
            raise
        raise ModuleNotFoundError(missing_torch("amplint.amp"), name="torch") from None
    value = getattr(implementation, name)
    globals()[name] = value
    return value


def __dir__():
    return __all__
