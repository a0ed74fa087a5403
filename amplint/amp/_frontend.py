"""``initialize``, opt-level properties and their validation, checkpoints and reset.

Engine state (one per process, :data:`ENGINE`):

* ``session``  a fresh object per ``initialize``; optimizers remember the session they were
  initialised in, and ``scale_loss`` refuses optimizers from an earlier one.
* ``props``    the :class:`Properties` of the current session (``None`` before ``initialize``).
* ``scalers``  one :class:`LossScaler` per ``loss_id``.
* ``optimizer_states`` / ``model_patches``  everything ``initialize`` changed, so that
  :func:`reset` can undo it (forward hooks, state-dict hooks, optimizer patches, O1 patching).
* ``pending_amp_restore``  set when ``optimizer.load_state_dict`` restored a checkpoint that
  carries loss-scaler state; ``scale_loss`` refuses to run until ``amp.load_state_dict`` is
  called, so a scaler is never silently reset.
"""
from __future__ import annotations

import collections.abc
import dataclasses
import sys
import warnings
import weakref

import torch
from torch import nn

from ._casting import CASTS
from ._optimizer import MasterState, OptimizerState, is_optimizer
from ._scaler import (DEFAULT_MAX_LOSS_SCALE, LossScaler, _distributed, check_hysteresis,
                      check_scale)
from .policy import OPT_LEVELS
_FIELDS = ("enabled", "opt_level", "cast_model_type", "patch_torch_functions",
           "keep_batchnorm_fp32", "master_weights", "loss_scale")
_PRESETS = {
    "O0": dict(cast_model_type=torch.float32, patch_torch_functions=False,
               keep_batchnorm_fp32=None, master_weights=False, loss_scale=1.0),
    "O1": dict(cast_model_type=None, patch_torch_functions=True,
               keep_batchnorm_fp32=None, master_weights=None, loss_scale="dynamic"),
    "O2": dict(cast_model_type=torch.float16, patch_torch_functions=False,
               keep_batchnorm_fp32=True, master_weights=True, loss_scale="dynamic"),
    "O3": dict(cast_model_type=torch.float16, patch_torch_functions=False,
               keep_batchnorm_fp32=False, master_weights=False, loss_scale=1.0),
}
_DESCRIPTIONS = {
    "O0": "O0:  Pure FP32 training.",
    "O1": "O1:  Insert automatic casts around Pytorch functions and Tensor methods.",
    "O2": "O2:  FP16 training with FP32 batchnorm and FP32 master weights.",
    "O3": "O3:  Pure FP16 training.",
}
_LOW = (torch.float16, torch.bfloat16)


class Properties:
    """apex's option set; assignments are validated exactly as apex validated them."""

    def __init__(self):
        object.__setattr__(self, "_options", {
            "enabled": False, "opt_level": None, "cast_model_type": None,
            "patch_torch_functions": False, "keep_batchnorm_fp32": None,
            "master_weights": None, "loss_scale": 1.0})

    def __getattr__(self, name):
        try:
            return self.__dict__["_options"][name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name, value):
        opts = self._options
        if name not in opts:
            raise AttributeError(name)
        o1 = opts["opt_level"] == "O1"
        if name == "cast_model_type" and o1 and value not in (None, False, torch.float32):
            raise RuntimeError(
                "O1 inserts casts around Torch functions rather than model weights, so with O1, "
                "the model weights themselves should remain FP32. If you wish to cast the model "
                "to a different type, use opt_level='O2' or 'O3'. cast_model_type was "
                f"{value}. (For bf16 under O1 pass half_dtype=torch.bfloat16.)")
        if name == "patch_torch_functions" and value and opts["opt_level"] != "O1":
            raise RuntimeError("Currently, patch_torch_functions=True should only be set by "
                               "selecting opt_level='O1'.")
        if name == "keep_batchnorm_fp32":
            if o1 and value is not None:
                raise RuntimeError(
                    "With opt_level O1, batchnorm functions are automatically patched to run in "
                    "FP32, so keep_batchnorm_fp32 should be None. keep_batchnorm_fp32 was "
                    f"{value}")
            if value in ("True", "False"):
                value = value == "True"
            if not (value is None or isinstance(value, bool)):
                raise AssertionError("keep_batchnorm_fp32 must be a boolean, the string 'True' or "
                                     f"'False', or None, found keep_batchnorm_fp32={value}")
        if name == "master_weights" and o1 and value is not None:
            raise RuntimeError("It doesn't make sense to use master_weights with O1. With O1, your "
                               "model weights themselves should be FP32.")
        if name == "cast_model_type":
            _check_cast_model_type(value)
        if name == "loss_scale" and value != "dynamic":
            value = check_scale("loss_scale", value)
        opts[name] = value

    def as_dict(self):
        return dict(self._options)


def _check_cast_model_type(value):
    if value is None or value is False or value in (torch.float16, torch.bfloat16, torch.float32):
        return
    if not isinstance(value, torch.dtype):
        raise TypeError(f"amp.initialize: cast_model_type={value!r} is not a torch dtype. Fix: pass "
                        "torch.float16, torch.bfloat16 or torch.float32 (or leave it None).")
    why = ("integer weights cannot be trained by gradients" if not value.is_floating_point else
           "amp casts models down to a half type; a float64 model needs no amp (run it without "
           "amp.initialize, or at O0)" if value is torch.float64 else
           "amp's scaling and master weights are built for float16/bfloat16 only")
    raise ValueError(f"amp.initialize: cast_model_type={value} is not supported: {why}. Fix: pass "
                     "torch.float16, torch.bfloat16 or torch.float32.")


def _check_num_losses(value):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"amp.initialize: num_losses={value!r} is not an integer. Fix: pass the "
                        "number of losses you scale separately (an int >= 1).")
    if value < 1:
        raise ValueError(f"amp.initialize: num_losses={value!r} must be at least 1 (one loss "
                         "scaler per loss_id).")


class _ModelPatch:
    def __init__(self, model):
        self.model = weakref.ref(model)
        self.handles: list = []

    def remove(self):
        for h in self.handles:
            h.remove()
        self.handles.clear()


class Engine:
    def __init__(self):
        self.session = None
        self.props: Properties | None = None
        self.half_dtype = torch.float16
        self.scalers: list[LossScaler] = []
        self.optimizer_states: list[OptimizerState] = []
        self.model_patches: list[_ModelPatch] = []
        self.verbosity = 1
        self.pending_amp_restore = None
        self.amp_restored = False  # amp.load_state_dict was called in this session
        self.reduce_device = None
        # apex's ``_amp_state.allow_incoming_model_not_fp32`` (the initialize keyword wins)
        self.allow_incoming_model_not_fp32 = False

    @property
    def o1_active(self) -> bool:
        return CASTS.is_installed

    def log(self, msg):
        if self.verbosity >= 1 and _rank0():
            print(msg)

    def expect_amp_restore(self, amp_state):
        """``optimizer.load_state_dict`` met the loss-scaler state saved with it. If it differs
        from the live scalers, ``scale_loss`` refuses to run until ``amp.load_state_dict``
        restores it (before or after the optimizer), so a scaler is never silently reset."""
        if not self.amp_restored and dict(amp_state) != dict(self.state_dict()):
            self.pending_amp_restore = amp_state

    def state_dict(self, destination=None):
        if destination is None:
            destination = collections.OrderedDict()
        for i, s in enumerate(self.scalers):
            destination[f"loss_scaler{i}"] = s.state_dict()
        return destination


ENGINE = Engine()


def _rank0() -> bool:
    return not _distributed() or torch.distributed.get_rank() == 0


# ------------------------------------------------------------------------------------------------
# casting helpers for model inputs / outputs (apex's `applier`)
# ------------------------------------------------------------------------------------------------

def _apply(value, fn):
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, (str, bytes)):
        return value
    if type(value).__module__ == "numpy":
        return value
    if isinstance(value, collections.abc.Mapping):
        return {_apply(k, fn): _apply(v, fn) for k, v in value.items()}
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # namedtuple
        return type(value)(*(_apply(v, fn) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(_apply(v, fn) for v in value)
    if hasattr(value, "to") and callable(value.to) and not isinstance(value, nn.Module):
        try:
            return value.to(fn.dtype)
        except Exception:
            return value
    return value


def _caster(dtype):
    def cast(t):
        return t.to(dtype) if t.is_floating_point() and t.dtype is not dtype else t
    cast.dtype = dtype
    return cast


def _install_io_casts(patch: _ModelPatch, model, input_dtype, output_dtype):
    in_cast = _caster(input_dtype) if input_dtype is not None else None
    out_cast = _caster(output_dtype)

    if in_cast is not None:
        def pre(module, args, kwargs):
            return _apply(args, in_cast), _apply(kwargs, in_cast)
        patch.handles.append(model.register_forward_pre_hook(pre, with_kwargs=True))

    def post(module, args, output):
        return _apply(output, out_cast)
    patch.handles.append(model.register_forward_hook(post))


def _install_fp32_module_hooks(patch: _ModelPatch, module):
    """A kept-fp32 module inside a half model: run it in fp32, hand half back."""
    to_f32 = _caster(torch.float32)
    stack: list = []

    def pre(mod, args, kwargs):
        low = _first_low_dtype((args, kwargs))
        stack.append(low)
        if low is None:
            return None
        return _apply(args, to_f32), _apply(kwargs, to_f32)

    def post(mod, args, output):
        low = stack.pop() if stack else None
        return output if low is None else _apply(output, _caster(low))

    patch.handles.append(module.register_forward_pre_hook(pre, with_kwargs=True))
    patch.handles.append(module.register_forward_hook(post))


def _first_low_dtype(value):
    if isinstance(value, torch.Tensor):
        return value.dtype if value.dtype in _LOW else None
    if isinstance(value, collections.abc.Mapping):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        for v in value:
            d = _first_low_dtype(v)
            if d is not None:
                return d
    return None


def _fp32_state_dict_hook(module, state_dict, prefix, local_metadata):
    # O2/O3 export fp32 (apex's O2StateDictHook), looking only at this module's own entries.
    for name in list(module._parameters) + list(module._buffers):
        key = prefix + name
        t = state_dict.get(key)
        if isinstance(t, torch.Tensor) and t.dtype in _LOW:
            state_dict[key] = t.to(torch.float32)
    return state_dict


def _resolve_keep_classes(keep_fp32_modules):
    if keep_fp32_modules is None:
        return ()
    if isinstance(keep_fp32_modules, (type, str)):
        keep_fp32_modules = (keep_fp32_modules,)
    classes = []
    for item in keep_fp32_modules:
        if isinstance(item, str):
            from ._casting import resolve
            owner, attr = resolve(item if "." in item else "torch.nn." + item)
            item = getattr(owner, attr)
        if not (isinstance(item, type) and issubclass(item, nn.Module)):
            raise TypeError(f"keep_fp32_modules entries must be nn.Module classes, got {item!r}")
        classes.append(item)
    return tuple(classes)


def _cast_plan(model, keep_bn: bool, keep_classes: tuple):
    """Split the module tree into modules to cast and kept-fp32 subtrees (roots)."""
    to_cast, kept_roots = [], []

    def visit(m):
        bn = isinstance(m, nn.modules.batchnorm._BatchNorm) and m.affine
        if (keep_bn and bn) or (keep_classes and isinstance(m, keep_classes)):
            kept_roots.append(m)
            return
        to_cast.append(m)
        for child in m.children():
            visit(child)

    visit(model)
    return to_cast, kept_roots


def _cast_module_own(m, dtype):
    for p in m._parameters.values():
        if p is not None and p.is_floating_point():
            p.data = p.data.to(dtype)
            if p.grad is not None:
                p.grad.data = p.grad.data.to(dtype)
    for name, b in m._buffers.items():
        if b is not None and b.is_floating_point():
            m._buffers[name] = b.to(dtype)


# ------------------------------------------------------------------------------------------------
# initialize
# ------------------------------------------------------------------------------------------------

def _check_models(models, allow_half=False):
    for model in models:
        if isinstance(model, (nn.parallel.DistributedDataParallel, nn.DataParallel)):
            raise RuntimeError(
                f"Incoming model is an instance of {type(model).__name__}. Parallel wrappers should "
                "only be applied to the model(s) AFTER the model(s) have been returned from "
                "amp.initialize. Fix: model, optimizer = amp.initialize(model, optimizer, ...); "
                "model = DistributedDataParallel(model, ...).")
        if allow_half:
            continue  # allow_incoming_model_not_fp32: half parameters get fp32 masters (O2)
        for kind, named in (("param", model.named_parameters()), ("buffer", model.named_buffers())):
            for name, t in named:
                if t.is_floating_point() and t.dtype in _LOW:
                    raise RuntimeError(
                        f"Found {kind} {name} with dtype {t.dtype}, expected torch.float32.\n"
                        "When using amp.initialize, you do not need to call .half() (or "
                        ".bfloat16()) on your model before passing it, no matter what "
                        "optimization level you choose. Fix: pass the fp32 model; O2/O3 cast "
                        "it for you (or, for a model that must keep half parameters, "
                        "initialize(..., allow_incoming_model_not_fp32=True)).")


def _dtensor_type():
    # a DTensor parameter means torch.distributed.tensor is imported already; importing it
    # just to look costs seconds on every initialize
    if not torch.distributed.is_available() or "torch.distributed.tensor" not in sys.modules:
        return None
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:
        return None
    return DTensor


def _sharded(models, cast_model_type, opt_level) -> bool:
    """True when O2/O3 run on an FSDP2-sharded model (``_fsdp2.py``): every parameter a
    DTensor. A model cast on partly sharded parameters is refused (the plain-model cast would
    leave the shards out of step)."""
    dtensor = _dtensor_type()
    if cast_model_type not in _LOW or dtensor is None:
        return False
    params = [(name, p) for model in models for name, p in model.named_parameters()]
    sharded = [name for name, p in params if isinstance(p, dtensor)]
    if not sharded:
        return False
    plain = [name for name, p in params if not isinstance(p, dtensor)]
    if plain:
        dtype = str(cast_model_type).replace("torch.", "")
        raise RuntimeError(
            f"amp.initialize: opt_level {opt_level} on a partly sharded model: {sharded[0]!r} "
            f"is an FSDP2 DTensor but {plain[0]!r} is not. Fix: fully_shard the root module too "
            f"(every parameter sharded), or use opt_level='O1' (half_dtype=torch.{dtype}).")
    return True


def _check_optimizers(optimizers, models):
    model_params = {id(p) for m in models for p in m.parameters()}
    for opt in optimizers:
        if not is_optimizer(opt):
            raise TypeError(
                f"optimizers must be either a single optimizer or a list of optimizers; got a "
                f"{type(opt).__name__} in the list (a torch.optim.Optimizer, or a wrapper such "
                "as LARC exposing param_groups, state and step, is accepted).")
        if getattr(opt, "_amplint_amp", None) is not None:
            raise RuntimeError(
                "A given optimizer should only be passed through amp.initialize once. Fix: build "
                "a fresh optimizer over the fresh model's parameters for each initialize (and "
                "call amp.reset() in between if you run several opt levels in one process).")
        foreign = [p for g in opt.param_groups for p in g["params"] if id(p) not in model_params]
        if foreign:
            raise RuntimeError(
                f"The optimizer {type(opt).__name__} holds {len(foreign)} parameter(s) (shape "
                f"{tuple(foreign[0].shape)} first) that are not parameters of the model(s) passed "
                "to amp.initialize. Fix: build the optimizer from model.parameters() of the same "
                "model object you pass to initialize (not of a copy), and pass every model whose "
                "parameters the optimizer updates.")


@dataclasses.dataclass
class _Extensions:
    """``initialize``'s keyword-only options beyond apex's signature."""
    half_dtype: object = None
    keep_fp32_modules: object = None
    fp32_log_probs: object = True  # True, "lse" or False (see _casting._cross_entropy_wrapper)
    allow_incoming_model_not_fp32: object = None  # None: apex's _amp_state switch decides
    allow_banned: bool = False
    hysteresis: int = 1


def initialize(models, optimizers=None, enabled=True, opt_level="O1", cast_model_type=None,
               patch_torch_functions=None, keep_batchnorm_fp32=None, master_weights=None,
               loss_scale=None, cast_model_outputs=None, num_losses=1, verbosity=1,
               min_loss_scale=None, max_loss_scale=DEFAULT_MAX_LOSS_SCALE, *, half_dtype=None,
               keep_fp32_modules=None, fp32_log_probs=True,
               allow_incoming_model_not_fp32=None, allow_banned=False, hysteresis=1):
    """apex ``amp.initialize``; see :mod:`amplint.amp` for the extensions
    (``half_dtype``, ``keep_fp32_modules``, ``fp32_log_probs``, CPU models, bf16,
    ``allow_incoming_model_not_fp32``, ``allow_banned``, ``hysteresis``)."""
    ext = _Extensions(half_dtype, keep_fp32_modules, fp32_log_probs,
                      allow_incoming_model_not_fp32, allow_banned, hysteresis)
    overrides = dict(enabled=enabled, opt_level=opt_level, cast_model_type=cast_model_type,
                     patch_torch_functions=patch_torch_functions,
                     keep_batchnorm_fp32=keep_batchnorm_fp32, master_weights=master_weights,
                     loss_scale=loss_scale)
    try:
        return _initialize(models, optimizers, overrides, cast_model_outputs, num_losses,
                           verbosity, min_loss_scale, max_loss_scale, ext)
    except BaseException:
        _end_session(ENGINE)  # no half-initialised session: scale_loss then says "initialize first"
        raise


def _initialize(models, optimizers, overrides, cast_model_outputs, num_losses, verbosity,
                min_loss_scale, max_loss_scale, ext):
    eng = ENGINE
    _end_session(eng)
    eng.verbosity = verbosity
    eng.props = Properties()
    eng.session = object()
    if not overrides["enabled"]:
        return models if optimizers is None else (models, optimizers)
    min_loss_scale, max_loss_scale = _check_arguments(overrides["opt_level"], num_losses,
                                                      min_loss_scale, max_loss_scale, ext)
    props = _resolve_properties(eng, overrides, ext)
    cmt = props.cast_model_type
    model_list, opt_list = _normalize_inputs(models, optimizers)
    allow_half = (ext.allow_incoming_model_not_fp32 if ext.allow_incoming_model_not_fp32
                  is not None else eng.allow_incoming_model_not_fp32)
    _check_models(model_list, allow_half)
    sharded = _sharded(model_list, cmt, props.opt_level)
    _check_optimizers(opt_list, model_list)
    first = next((p for m in model_list for p in m.parameters()), None)
    eng.reduce_device = first.device if first is not None else None

    if sharded:  # FSDP2: its MixedPrecisionPolicy casts, the fp32 shards are the masters
        from ._fsdp2 import apply_policy
        apply_policy(model_list, props.opt_level, cmt)
    plans = _plan_model_casts(model_list, props, ext) if cmt and not sharded else []
    _attach_optimizers(eng, opt_list, props, plans if not sharded else [], sharded)
    _cast_models(eng, plans, cmt, cast_model_outputs)
    if sharded:
        for model in model_list:
            patch = _ModelPatch(model)
            _install_io_casts(patch, model, None, cast_model_outputs or torch.float32)
            eng.model_patches.append(patch)
    if not cmt and cast_model_outputs is not None:
        for model in model_list:
            patch = _ModelPatch(model)
            _install_io_casts(patch, model, None, cast_model_outputs)
            eng.model_patches.append(patch)
    for state in eng.optimizer_states:
        state.after_model_cast()
        state.bind(model_list)
        state.ready()
    eng.scalers = [LossScaler(props.loss_scale, min_loss_scale, max_loss_scale, loss_id=i,
                              hysteresis=ext.hysteresis) for i in range(num_losses)]
    if props.patch_torch_functions:
        CASTS.install(eng.half_dtype, allow_banned=ext.allow_banned)
        CASTS.fp32_log_probs = ext.fp32_log_probs
    _warn_half_divisors(opt_list, props.opt_level)
    return _returns(models, optimizers, model_list, opt_list)


def _check_arguments(opt_level, num_losses, min_loss_scale, max_loss_scale, ext):
    """Validate what the opt-level presets do not cover; return the checked loss-scale range."""
    if opt_level not in OPT_LEVELS:
        raise RuntimeError(
            f"Unexpected optimization level {opt_level}. Options are 'O0', 'O1', 'O2', 'O3'.  Note "
            "that in `O0`, `O1`, etc., the prefix O is the letter O, not the number zero.")
    if ext.half_dtype is not None and ext.half_dtype not in _LOW:
        raise ValueError(f"half_dtype must be torch.float16 or torch.bfloat16, got {ext.half_dtype}")
    _check_num_losses(num_losses)
    if not (isinstance(ext.fp32_log_probs, bool) or ext.fp32_log_probs == "lse"):
        raise TypeError(f"amp.initialize: fp32_log_probs={ext.fp32_log_probs!r} must be True, "
                        "False or 'lse'.")
    if not isinstance(ext.allow_banned, bool):
        raise TypeError(f"amp.initialize: allow_banned={ext.allow_banned!r} must be True or False.")
    if ext.allow_incoming_model_not_fp32 not in (None, True, False):
        raise TypeError("amp.initialize: allow_incoming_model_not_fp32="
                        f"{ext.allow_incoming_model_not_fp32!r} must be True or False.")
    ext.hysteresis = check_hysteresis(ext.hysteresis)
    min_loss_scale = check_scale("min_loss_scale", min_loss_scale, allow_none=True)
    max_loss_scale = check_scale("max_loss_scale", max_loss_scale, allow_none=True)
    if (min_loss_scale is not None and max_loss_scale is not None
            and min_loss_scale > max_loss_scale):
        raise ValueError(f"amp.initialize: min_loss_scale={min_loss_scale!r} is larger than "
                         f"max_loss_scale={max_loss_scale!r}. Fix: pass min_loss_scale <= "
                         "max_loss_scale.")
    return min_loss_scale, max_loss_scale


def _resolve_properties(eng, overrides, ext) -> Properties:
    """apex's preset-then-overrides, with its banners; then the low-precision dtype."""
    props = eng.props
    opt_level = overrides["opt_level"]
    props.enabled = True
    props.opt_level = opt_level
    for k, v in _PRESETS[opt_level].items():
        setattr(props, k, v)
    eng.log(f"Selected optimization level {_DESCRIPTIONS[opt_level]}")
    _print_props(eng, "Defaults for this optimization level are:", props)
    eng.log("Processing user overrides (additional kwargs that are not None)...")
    for k in _FIELDS:
        if overrides[k] is not None:
            setattr(props, k, overrides[k])

    # Low-precision dtype: cast_model_type for O2/O3, half_dtype for O1 (or to pick bf16 anywhere).
    cmt, half_dtype = props.cast_model_type, ext.half_dtype
    if cmt in _LOW and half_dtype is not None and cmt is not half_dtype:
        if overrides["cast_model_type"] is not None:
            raise ValueError(f"cast_model_type={cmt} and half_dtype={half_dtype} disagree; pass one.")
        props.cast_model_type = cmt = half_dtype
    eng.half_dtype = cmt if cmt in _LOW else (half_dtype or torch.float16)
    if (eng.half_dtype is torch.bfloat16 and overrides["loss_scale"] is None
            and props.loss_scale == "dynamic"):
        props.loss_scale = 1.0  # bf16 has fp32's range: no loss scaling needed
    ext.keep_fp32_modules = _resolve_keep_classes(ext.keep_fp32_modules)
    if ext.keep_fp32_modules and cmt not in _LOW:
        raise RuntimeError("keep_fp32_modules only applies when the model is cast (O2/O3, or "
                           "cast_model_type=torch.float16/bfloat16).")
    if not ext.fp32_log_probs and not props.patch_torch_functions:
        raise ValueError("amp.initialize: fp32_log_probs=False only applies under O1 (it picks "
                         "the dtype of F.cross_entropy's log-probabilities); O2/O3 models hand "
                         "fp32 outputs to the loss. Fix: drop the argument.")
    if ext.allow_banned and not props.patch_torch_functions:
        raise ValueError("amp.initialize: allow_banned=True only applies under O1 (it runs "
                         "F.binary_cross_entropy in fp32 instead of raising). Fix: drop it.")
    _print_props(eng, "After processing overrides, optimization options are:", props)
    if eng.half_dtype is torch.bfloat16:
        eng.log(f"{'half_dtype':22} : torch.bfloat16")
    return props


def _normalize_inputs(models, optimizers):
    """``(models, optimizers)`` as lists (apex accepts one of each or lists)."""
    if isinstance(models, nn.Module):
        model_list = [models]
    elif isinstance(models, list):
        model_list = models
    else:
        raise TypeError("models must be either a single model or a list of models.")
    if optimizers is None:
        opt_list = []
    elif is_optimizer(optimizers):
        opt_list = [optimizers]
    elif isinstance(optimizers, list):
        opt_list = optimizers
    else:
        raise TypeError("optimizers must be either a single optimizer or a list of optimizers "
                        "(a torch.optim.Optimizer, or a wrapper such as LARC exposing "
                        "param_groups, state and step).")
    return model_list, opt_list


def _plan_model_casts(model_list, props, ext):
    """Per model ``(model, modules to cast, kept-fp32 roots)``, planned before anything is
    cast so master weights are cloned from the fp32 values."""
    cmt = props.cast_model_type
    plans = []
    for model in model_list:
        if cmt in _LOW:
            keep_bn = bool(props.keep_batchnorm_fp32)
            to_cast, kept = _cast_plan(model, keep_bn, ext.keep_fp32_modules)
        else:
            to_cast, kept = list(model.modules()), []
        plans.append((model, to_cast, kept))
    return plans


def _attach_optimizers(eng, opt_list, props, plans, sharded=False):
    """One :class:`OptimizerState` per optimizer; fp32 masters (O2) for every parameter
    that is or becomes half (apex also made masters for parameters that came in half).
    FSDP2 (``sharded``): the fp32 shards are the masters already."""
    to_master: set = set()
    if props.master_weights and not sharded:
        for model, to_cast, _ in plans:
            for m in to_cast:
                to_master.update(id(p) for p in m._parameters.values() if p is not None)
        for opt in opt_list:
            to_master.update(id(p) for g in opt.param_groups for p in g["params"]
                             if p.dtype in _LOW)
    for opt in opt_list:
        if to_master and (props.cast_model_type in _LOW or any(
                id(p) in to_master for g in opt.param_groups for p in g["params"])):
            state = MasterState(opt, eng, eng.session, to_master)
        else:
            state = OptimizerState(opt, eng, eng.session)
        state.attach()
        eng.optimizer_states.append(state)


def _cast_models(eng, plans, cmt, cast_model_outputs):
    """Cast each planned module, keep fp32 subtrees in fp32, and install the I/O casts."""
    for model, to_cast, kept in plans:
        patch = _ModelPatch(model)
        for m in to_cast:
            _cast_module_own(m, cmt)
            if cmt in _LOW:
                patch.handles.append(m._register_state_dict_hook(_fp32_state_dict_hook))
            if isinstance(m, nn.RNNBase):
                m.flatten_parameters()
        for root in kept:
            if not isinstance(root, nn.modules.batchnorm._BatchNorm):
                _install_fp32_module_hooks(patch, root)
        _install_io_casts(patch, model, cmt, cast_model_outputs or torch.float32)
        eng.model_patches.append(patch)


def _returns(models, optimizers, model_list, opt_list):
    """apex's return convention: the shapes mirror the inputs."""
    model_ret = model_list if isinstance(models, list) else model_list[0]
    if optimizers is None:
        return model_ret
    if isinstance(optimizers, list):
        return model_ret, opt_list
    return model_ret, opt_list[0]


# Optimizer hyper-parameters that the update adds to a denominator (Adam's, RMSprop's,
# Adagrad's, Adadelta's ``eps``; Adafactor's is a tuple). torch names them all ``eps``.
_DIVISOR_KEYS = ("eps",)
_SAFE_DIVISOR = {torch.float16: "1e-4", torch.bfloat16: "1e-8"}


def _warn_half_divisors(optimizers, opt_level):
    """One warning when an optimizer steps half weights itself (O3, or O2 without master
    weights) with an ``eps`` below the half type's smallest normal: there it is subnormal or 0,
    so a zero second moment divides by (almost) zero and the weights turn inf/NaN. bf16 has
    fp32's exponent range, so only a value that underflows there too is reported."""
    found = []
    for opt in optimizers:
        for index, group in enumerate(opt.param_groups):
            half = next((p.dtype for p in group["params"] if p.dtype in _LOW), None)
            if half is None:
                continue
            tiny = torch.finfo(half).tiny
            for key in _DIVISOR_KEYS:
                values = group.get(key)
                for value in values if isinstance(values, (tuple, list)) else (values,):
                    if (isinstance(value, (int, float)) and not isinstance(value, bool)
                            and value < tiny):
                        found.append((opt, index, key, value, half, tiny))
    if not found:
        return
    opt, index, key, value, half, tiny = found[0]
    name = str(half).replace("torch.", "")
    more = f" ({len(found) - 1} more param group(s) likewise)" if len(found) > 1 else ""
    warnings.warn(
        f"amplint.amp {opt_level}: {type(opt).__name__} (param group {index}) updates {name} "
        f"weights directly with {key}={value!r}, below {name}'s smallest normal ({tiny:.2g}){more}: "
        f"in the {name} update it becomes subnormal or 0, so a zero second moment divides by "
        f"(almost) zero and the weights turn inf/NaN. Fix: pass {key}={_SAFE_DIVISOR[half]} "
        f"to the optimizer, or use O2, whose fp32 master weights keep the update in fp32.",
        RuntimeWarning, stacklevel=4)


def _print_props(eng, title, props):
    eng.log(title)
    for k, v in props.as_dict().items():
        eng.log(f"{k:22} : {v}")


def _end_session(eng):
    """A new initialize starts a new session: undo O1 patching, drop scalers."""
    CASTS.uninstall()
    eng.scalers = []
    eng.pending_amp_restore = None
    eng.amp_restored = False
    eng.props = None
    eng.session = None


def reset():
    """Undo everything ``initialize`` did to torch and to the models/optimizers it saw.

    Restores the patched torch functions (O1), removes the forward / state-dict hooks from the
    models and the ``step`` / ``zero_grad`` / state-dict patches from the optimizers, and drops
    the loss scalers. Model weights are not cast back (build fresh models for the next run).
    User registrations (``register_*_function``) are kept. Idempotent.
    """
    eng = ENGINE
    _end_session(eng)
    for patch in eng.model_patches:
        patch.remove()
    eng.model_patches.clear()
    for state in eng.optimizer_states:
        state.detach()
    eng.optimizer_states.clear()


deinitialize = reset


def state_dict(destination=None):
    """``{'loss_scaler0': {'loss_scale': float, 'unskipped': int, 'dynamic': bool}, ...}``
    (apex's format plus the scaler kind; apex's own states load too)."""
    if ENGINE.props is None:
        raise RuntimeError("amp.state_dict() called before amp.initialize(...).")
    return ENGINE.state_dict(destination)


def load_state_dict(state_dict):
    """Restore the loss scalers saved by :func:`state_dict`. Strict: a missing, extra or
    malformed entry, a value out of range, or a state of the other scaler kind (dynamic vs
    static) raises (apex warned and carried on with a fresh scaler, or loaded anything)."""
    eng = ENGINE
    if eng.props is None:
        raise RuntimeError("amp.load_state_dict() called before amp.initialize(...). Fix: call "
                           "amp.initialize first, then model/optimizer/amp load_state_dict.")
    if not isinstance(state_dict, collections.abc.Mapping) or not state_dict:
        raise RuntimeError(
            f"amp.load_state_dict expected the dict saved by amp.state_dict() "
            f"({{'loss_scaler0': {{'loss_scale': ..., 'unskipped': ...}}}}), got {state_dict!r}. "
            "Fix: save checkpoint['amp'] = amp.state_dict() and pass checkpoint['amp'].")
    n = len(eng.scalers)
    expected = [f"loss_scaler{i}" for i in range(n)]
    unexpected = [k for k in state_dict if k not in expected]
    missing = [k for k in expected if k not in state_dict]
    if unexpected or missing:
        raise RuntimeError(
            "Error(s) in loading amp state_dict: "
            + (f"unexpected key(s) {unexpected}; " if unexpected else "")
            + (f"missing key(s) {missing}; " if missing else "")
            + f"this run has num_losses={n}. Fix: initialize with the num_losses the checkpoint "
              f"was saved with ({len(state_dict)} entries).")
    run = f"opt_level {eng.props.opt_level}" + (
        ", bfloat16" if eng.half_dtype is torch.bfloat16 else "")
    parsed = [scaler.parse_state(key, state_dict[key], run)
              for key, scaler in zip(expected, eng.scalers)]   # all checked before any is set
    for scaler, values in zip(eng.scalers, parsed):
        scaler.load_parsed(*values)
    eng.pending_amp_restore = None
    eng.amp_restored = True


def master_params(optimizer):
    """The parameters the optimizer updates: the fp32 master weights under O2."""
    for group in optimizer.param_groups:
        yield from group["params"]


def _scaler(loss_id):
    eng = ENGINE
    if eng.props is None or not eng.scalers:
        raise RuntimeError("amp is not initialized (call amp.initialize first).")
    if not 0 <= loss_id < len(eng.scalers):
        raise IndexError(f"loss_id={loss_id} but amp.initialize was given num_losses="
                         f"{len(eng.scalers)}; valid ids are 0..{len(eng.scalers) - 1}.")
    return eng.scalers[loss_id]


def loss_scale(loss_id=0) -> float:
    """Current loss scale of scaler ``loss_id``."""
    return _scaler(loss_id).scale


def skipped_steps(loss_id=0) -> int:
    """How many overflows scaler ``loss_id`` has seen (each skips one optimizer step)."""
    return _scaler(loss_id).skipped


def properties() -> dict:
    """The current session's options (empty before initialize)."""
    eng = ENGINE
    if eng.props is None:
        return {}
    d = eng.props.as_dict()
    d["half_dtype"] = eng.half_dtype
    return d
