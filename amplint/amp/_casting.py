"""O1: function-level casting by patching torch attributes, reversibly.

Invariants
----------
* ``CASTS.installed`` maps ``(owner, name)`` to the original attribute (or ``_INHERITED`` when
  the owner only inherited it); :meth:`Casts.uninstall` puts exactly that back, so torch is
  pristine after ``amp.reset()``.
* Wrappers look at ``CASTS.active`` on every call; ``disable_casts()`` flips it (exception-safe).
* The weight-cast cache maps an fp32 leaf tensor to ``(version, cast)``; an entry is used only
  while the tensor's ``_version`` is unchanged (so an optimizer step or ``load_state_dict``
  invalidates it) and, under grad mode, only if the cast was recorded with grad.
  It is emptied at every ``scale_loss`` exit, as apex did. Code traced by ``torch.compile``
  bypasses it: a cast stored in a Python dict would become an extra output of the graph
  (every half weight materialised and kept alive until the exit), while the compiler already
  shares repeated casts inside one graph.
* User registrations live in ``CASTS.registry`` for the whole process and override the lists.
"""
from __future__ import annotations

import contextlib
import functools
import importlib

import torch

from . import _rnn, policy
from ._cross_entropy import cross_entropy as _half_ce

_F32 = torch.float32
_F16 = torch.float16
_BF16 = torch.bfloat16
_Tensor = torch.Tensor
_INHERITED = object()
RELAXED_CHECK = "relaxed-check"  # a module's dtype check that O1's casts would trip
_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)


def resolve(qualname: str):
    """``"torch.nn.functional.softmax"`` -> ``(torch.nn.functional, "softmax")``."""
    owner_path, _, attr = qualname.rpartition(".")
    parts = owner_path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            owner = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for part in parts[i:]:
            owner = getattr(owner, part)
        return owner, attr
    raise ImportError(qualname)


class Casts:
    def __init__(self):
        self.active = False
        self.half = _F16
        self.installed: dict[tuple, object] = {}
        self.registry: dict[tuple, str] = {}  # (owner, name) -> kind, from register_*_function
        self.cache: dict = {}
        self.rnn_cache: dict = {}    # flat half weights of full RNN layers (see _rnn.py)
        self.rnn_layouts: dict = {}  # cuDNN's flat-buffer offsets per weight-shape set
        self.fp32_log_probs = True  # cross_entropy's log-probabilities (see _cross_entropy_wrapper)
        self.caching = True  # the weight-cast cache (apex's amp.init(enable_caching=...))

    # -- casting helpers ---------------------------------------------------------------
    def to_half(self, x):
        if isinstance(x, _Tensor):
            dt = x.dtype
            half = self.half
            if dt is half or not (dt is _F32 or dt is _F16 or dt is _BF16):
                return x
            if dt is _F32 and x.is_leaf and x.requires_grad and self.caching and not _compiling():
                cache = self.cache
                hit = cache.get(x)
                grad = torch.is_grad_enabled()
                if hit is not None and hit[0] == x._version and (hit[1].requires_grad or not grad):
                    return hit[1]
                cast = x.to(half)
                cache[x] = (x._version, cast)
                return cast
            return x.to(half)
        if isinstance(x, (list, tuple)) and x and not isinstance(x, torch.Size):
            return type(x)([self.to_half(v) for v in x]) if type(x) in (list, tuple) else x
        return x

    def to_float(self, x):
        if isinstance(x, _Tensor):
            dt = x.dtype
            return x.float() if (dt is _F16 or dt is _BF16) else x
        if isinstance(x, (list, tuple)) and x and type(x) in (list, tuple):
            return type(x)([self.to_float(v) for v in x])
        return x

    def clear_cache(self):
        self.cache.clear()
        self.rnn_cache.clear()

    # -- wrappers --------------------------------------------------------------------------
    def wrap(self, orig, kind: str, name: str, qualname: str = ""):
        state = self
        if kind == policy.FLOAT and qualname in policy.O1_FLOAT_DTYPE_ARGUMENT:
            limit = policy.O1_FLOAT_DTYPE_ARGUMENT[qualname]

            def wrapper(*args, **kwargs):
                if state.active and "dtype" not in kwargs and len(args) <= limit:
                    x = args[0] if args else kwargs.get("input")
                    if isinstance(x, _Tensor) and (x.dtype is _F16 or x.dtype is _BF16):
                        kwargs["dtype"] = _F32
                return orig(*args, **kwargs)
        elif kind == policy.FLOAT and qualname == "torch.nn.functional.cross_entropy":
            wrapper = _cross_entropy_wrapper(state, orig)
        elif kind == policy.HALF and qualname.startswith("torch._VF.") and (
                qualname[len("torch._VF."):] in _rnn.FULL_LAYERS):
            wrapper = _rnn.layer_wrapper(state, orig, qualname[len("torch._VF."):])
        elif kind == RELAXED_CHECK:
            wrapper = _rnn.check_input_wrapper(state, orig)
        elif kind == policy.HALF or kind == policy.FLOAT:
            caster = state.to_half if kind == policy.HALF else state.to_float

            def wrapper(*args, **kwargs):
                if not state.active:
                    return orig(*args, **kwargs)
                args = [caster(a) for a in args]
                if kwargs:
                    kwargs = {k: caster(v) for k, v in kwargs.items()}
                return orig(*args, **kwargs)
        elif kind == policy.PROMOTE:
            def wrapper(*args, **kwargs):
                if state.active and _mixed(args, kwargs):
                    args = [state.to_float(a) for a in args]
                    kwargs = {k: state.to_float(v) for k, v in kwargs.items()}
                return orig(*args, **kwargs)
        elif kind == policy.BANNED:
            def wrapper(*args, **kwargs):
                if state.active:
                    low = _first_low(args, kwargs)
                    if low is not None:
                        raise NotImplementedError(policy.BANNED_MESSAGE.format(dtype=low))
                return orig(*args, **kwargs)
        elif kind == "inplace":
            owner_is_tensor = name.startswith("Tensor.")
            op = name.split(".")[-1].strip("_").replace("ipow", "pow")

            def wrapper(*args, **kwargs):
                if state.active:
                    low = _first_low(args[:1], {}) if owner_is_tensor else _first_low(args, kwargs)
                    if low is not None:
                        raise NotImplementedError(
                            f"amplint.amp O1: cannot run in-place {name} on a {low} tensor: {op} "
                            f"is an fp32 op under O1 and an in-place result cannot change dtype. "
                            f"Fix: use the out-of-place form (y = x.{op}(...) or torch.{op}(x)).")
                return orig(*args, **kwargs)
        else:
            raise ValueError(kind)
        functools.update_wrapper(wrapper, orig, assigned=("__name__", "__qualname__", "__doc__"))
        wrapper.__wrapped__ = orig
        wrapper._amplint_kind = kind
        return wrapper

    # -- install / uninstall -------------------------------------------------------------
    def _install_one(self, owner, name: str, kind: str):
        key = (owner, name)
        if key in self.installed:
            self._uninstall_one(key)
        try:
            current = getattr(owner, name)
        except AttributeError:
            return False
        had_own = name in vars(owner)
        label = ("Tensor." if owner is torch.Tensor else "") + name
        qualname = ("torch.Tensor" if owner is torch.Tensor else getattr(owner, "__name__", "")) + "." + name
        setattr(owner, name, self.wrap(current, kind, label, qualname))
        self.installed[key] = current if had_own else _INHERITED
        return True

    def _uninstall_one(self, key):
        owner, name = key
        orig = self.installed.pop(key)
        if orig is _INHERITED:
            with contextlib.suppress(AttributeError):
                delattr(owner, name)
        else:
            setattr(owner, name, orig)

    def install(self, half_dtype, allow_banned=False):
        """Patch the O1 lists plus the user registry (which wins). ``allow_banned`` runs the
        banned functions in fp32 instead of raising (apex's ``amp.init(allow_banned=True)``)."""
        self.uninstall()
        self.half = half_dtype
        plan: dict[tuple, str] = {}
        banned = policy.FLOAT if allow_banned else policy.BANNED
        for kind, names in ((policy.FLOAT, policy.O1_FLOAT), (policy.HALF, policy.O1_HALF),
                            (policy.PROMOTE, policy.O1_PROMOTE), (banned, policy.O1_BANNED),
                            ("inplace", policy.O1_INPLACE_GUARDED),
                            (RELAXED_CHECK, policy.O1_RELAXED_CHECKS)):
            for qualname in names:
                try:
                    owner, attr = resolve(qualname)
                except (ImportError, AttributeError):
                    continue  # not in this torch build (documented in policy tests)
                plan[(owner, attr)] = kind
        plan.update(self.registry)
        for (owner, attr), kind in plan.items():
            self._install_one(owner, attr, kind)
        self.active = True

    def uninstall(self):
        for key in list(self.installed)[::-1]:
            self._uninstall_one(key)
        self.active = False
        self.fp32_log_probs = True
        self.caching = True
        self.clear_cache()

    @property
    def is_installed(self) -> bool:
        return bool(self.installed)

    def register(self, owner, name: str, kind: str):
        if not hasattr(owner, name):
            raise ValueError(f"No function named {name} in module {owner}.")
        self.registry[(owner, name)] = kind
        if self.is_installed:  # registration after initialize takes effect now (apex ignored it)
            self._install_one(owner, name, kind)


def _cross_entropy_wrapper(state, orig):
    """F.cross_entropy in fp32 without an fp32 copy of the logits where the kernels allow it:
    log_softmax(dtype=fp32) then nll_loss, which is what cross_entropy computes for
    class-index targets. On CUDA fp16 logits take a fused half->float log_softmax; bf16 has no
    such kernel, so bf16 logits are copied to fp32 first (fp32 log-probabilities, as apex and
    torch.autocast compute them). ``fp32_log_probs="lse"`` opts into an fp32-accumulated
    log-sum-exp over bf16 exponentials instead (``_cross_entropy.py``: no fp32 copy, the loss
    within 3e-3 of fp32 rather than 1e-5, so never the default). With
    ``CASTS.fp32_log_probs`` off (``initialize(..., fp32_log_probs=False)``) the
    log-probabilities stay in the half dtype (as under torch.autocast) and only the picked
    values are summed in fp32. Other cases fall back to casting the input."""
    log_softmax = getattr(torch._C._VariableFunctions, "log_softmax", None)
    nll_loss_nd = getattr(torch._C._nn, "nll_loss_nd", None)
    from torch.nn import _reduction

    def wrapper(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                reduction="mean", label_smoothing=0.0):
        if state.active and isinstance(input, _Tensor) and (input.dtype is _F16 or input.dtype is _BF16):
            if (nll_loss_nd is not None and type(input) is _Tensor and label_smoothing == 0.0
                    and size_average is None and reduce is None and isinstance(target, _Tensor)
                    and not target.is_floating_point() and input.dim() >= 1):
                dim = 0 if input.dim() == 1 else 1
                if not state.fp32_log_probs:
                    if input.dim() == 2 and weight is None and reduction in ("mean", "sum"):
                        return _half_log_probs_nll(log_softmax(input, dim), target, ignore_index,
                                                   reduction)
                    logp = log_softmax(input, dim)
                    if weight is not None:
                        weight = weight.to(logp.dtype)
                    return nll_loss_nd(logp, target, weight, _reduction.get_enum(reduction),
                                       ignore_index).float()
                if (state.fp32_log_probs == "lse" and input.dtype is _BF16 and input.dim() == 2
                        and weight is None and reduction in ("mean", "sum", "none")):
                    # no fp32 copy of the logits (bf16 has no fused half->float log_softmax)
                    return _half_ce(input, target, ignore_index, reduction)
                logp = log_softmax(input, dim, dtype=_F32)
                if weight is not None:
                    weight = weight.float()
                return nll_loss_nd(logp, target, weight, _reduction.get_enum(reduction), ignore_index)
            input = input.float()
            target = state.to_float(target)
            weight = state.to_float(weight)
        return orig(input, target, weight, size_average, ignore_index, reduce, reduction,
                    label_smoothing)
    return wrapper


def _half_log_probs_nll(logp, target, ignore_index, reduction):
    """nll_loss of half log-probabilities (N, C) with the reduction in fp32: only the N picked
    values are converted, so the loss is not rounded to the half type."""
    keep = target != ignore_index
    picked = logp.gather(1, torch.where(keep, target, 0).unsqueeze(1)).squeeze(1).float()
    total = -(picked * keep).sum()
    return total / keep.sum() if reduction == "mean" else total


def _first_low(args, kwargs):
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, _Tensor):
            if a.dtype is _F16 or a.dtype is _BF16:
                return a.dtype
        elif isinstance(a, (list, tuple)):
            low = _first_low(a, {})
            if low is not None:
                return low
    return None


def _mixed(args, kwargs) -> bool:
    seen_low = seen_f32 = False
    stack = list(args) + list(kwargs.values())
    while stack:
        a = stack.pop()
        if isinstance(a, _Tensor):
            dt = a.dtype
            if dt is _F32:
                seen_f32 = True
            elif dt is _F16 or dt is _BF16:
                seen_low = True
        elif isinstance(a, (list, tuple)):
            stack.extend(a)
    return seen_low and seen_f32


CASTS = Casts()


@contextlib.contextmanager
def disable_casts():
    """Run the block without O1 casts (a no-op when O1 is not active)."""
    prev = CASTS.active
    CASTS.active = False
    try:
        yield
    finally:
        CASTS.active = prev


def _decorator(kind):
    def decorate(fn):
        wrapped = CASTS.wrap(fn, kind, getattr(fn, "__name__", "fn"))
        return wrapped
    return decorate


#: Decorators: cast a user function's tensor arguments under O1 (a no-op otherwise); may be
#: applied before or after ``initialize``.
half_function = _decorator(policy.HALF)
float_function = _decorator(policy.FLOAT)
promote_function = _decorator(policy.PROMOTE)


def register_half_function(module, name):
    """Run ``module.name`` in the low-precision dtype under O1 (works before or after initialize)."""
    CASTS.register(module, name, policy.HALF)


def register_float_function(module, name):
    """Run ``module.name`` in fp32 under O1 (works before or after initialize)."""
    CASTS.register(module, name, policy.FLOAT)


def register_promote_function(module, name):
    """Run ``module.name`` in fp32 when its inputs mix fp32 and fp16/bf16, under O1."""
    CASTS.register(module, name, policy.PROMOTE)
