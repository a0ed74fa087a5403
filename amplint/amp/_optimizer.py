"""Per-optimizer gradient handling: plain (O0/O1/O3) and fp32 master weights (O2).

Every optimizer passed to ``initialize`` gets ``optimizer._amplint_amp``, an
:class:`OptimizerState`, and instance-level ``step``/``zero_grad`` patches that
:meth:`OptimizerState.detach` removes again.

Each :class:`OptimizerState` is in one :class:`Stage` (as GradScaler keeps one per optimizer),
changed only by its own methods, which ``scale_loss`` and the patched ``step``/``zero_grad``
call: READY -> (block entry) SCALED -> (exit) UNSCALED -> (step) STEPPED -> (zero_grad, or
the next block) ...; a ``delay_unscale`` exit stays SCALED, so the next block adds to the
scaled gradients. An overflow found at an exit is kept beside the stage until the step it
skips. ``step`` reads the stage and refuses, with GradScaler-style messages:

* SCALED: the gradients are still multiplied by the loss scale (``step`` inside the block,
  or after ``delay_unscale=True`` blocks with no final block without it);
* STEPPED: a second ``step`` with no ``scale_loss`` exit or ``zero_grad`` in between would
  apply the same gradients twice;
* READY with gradients that changed since the last ``zero_grad`` (or ``initialize``): a
  backward outside ``scale_loss``, never unscaled nor checked for overflow.

Gradient invariant (apex): between ``scale_loss`` blocks the gradients the optimizer will use
are *unscaled*. At block entry (:meth:`prepare`) existing gradients are stashed and set to
None so backward writes fresh, scaled ones; at exit (:meth:`post`) the fresh ones are
unscaled with one fused kernel per (device, dtype) and the stash is added back.

Master weights (O2), for each model parameter cast to half ``p`` with master ``m`` (fp32):

* ``m`` replaces ``p`` in ``param_groups`` (so the optimizer, its state and
  ``amp.master_params`` see fp32); ``m`` is cloned from the fp32 weight *before* the model is
  cast, so no bits are lost at initialize.
* ``m.grad`` is a persistent fp32 buffer holding the unscaled gradient; ``p.grad`` is
  overwritten with the same values in half (a view for user code). A change the user makes to
  ``p.grad`` after the block (``zero_grad(set_to_none=False)``, ``clip_grad_norm_(model.
  parameters())``) is noticed through the tensor's version counter and wins.
* Before each step, masters whose model parameter was written from outside (for example
  ``model.load_state_dict``) are refreshed from it; after each step the masters are copied
  into the model with one fused copy.
* ``optimizer.state_dict()`` carries the masters, so a restore continues bit-identically.
"""
from __future__ import annotations

import enum
import types
import warnings

import torch

from ._casting import disable_casts

def _copy_(dsts, srcs):
    """Fused dtype-converting copy (``torch._foreach_copy_``, torch>=2.1), loop as a fallback."""
    if hasattr(torch, "_foreach_copy_"):
        torch._foreach_copy_(dsts, srcs)
    else:
        for d, s in zip(dsts, srcs):
            d.copy_(s)


def is_optimizer(obj) -> bool:
    """A ``torch.optim.Optimizer``, or a wrapper that behaves as one to amp (apex accepted
    its LARC): ``param_groups`` (a list of dicts with ``"params"``), ``state`` and a
    callable ``step``. Lookahead-style wrappers qualify too."""
    if isinstance(obj, torch.optim.Optimizer):
        return True
    groups = getattr(obj, "param_groups", None)
    return (isinstance(groups, list) and all(isinstance(g, dict) and "params" in g for g in groups)
            and hasattr(obj, "state") and callable(getattr(obj, "step", None))
            and not isinstance(obj, type))


def _hook_owner(opt):
    """Where the state-dict hooks go: the optimizer, or the torch optimizer a wrapper holds
    (LARC's ``optim``, a lookahead's ``optimizer``/``base_optimizer``), whose ``state_dict``
    the wrapper's returns."""
    if hasattr(opt, "register_state_dict_post_hook"):
        return opt
    for name in ("optim", "optimizer", "base_optimizer", "inner_optimizer"):
        inner = getattr(opt, name, None)
        if isinstance(inner, torch.optim.Optimizer):
            return inner
    return None


_MASTERS_KEY = "amplint_master_params"
_AMP_KEY = "amplint_amp"


class Stage(enum.Enum):
    READY = "ready"        # .grad is unscaled or None; the next block stashes it and adds it back
    SCALED = "scaled"      # .grad holds scaled gradients: inside a block, or after delay_unscale
    UNSCALED = "unscaled"  # a block exit unscaled the new gradients; the step applies or skips them
    STEPPED = "stepped"    # step ran (or was skipped); .grad is unscaled until zero_grad


class OptimizerState:
    def __init__(self, optimizer, engine, session):
        self.optimizer = optimizer
        self.engine = engine
        self.session = session
        self.stage = Stage.READY
        self.overflow: tuple | None = None  # (loss_id, new scale): the next step is skipped
        self._stage_at_entry = Stage.READY
        self._stash: list | None = None
        self._hooks: list = []
        self._orig = {}
        self.has_masters = False
        self.bindings: list = []  # (qualified name, module, attribute, parameter), see bind()

    # -- stage transitions (called by scale_loss) ------------------------------------------------
    def enter_block(self, delay_unscale: bool):
        """A ``scale_loss`` block starts: stash the unscaled gradients so backward writes fresh,
        scaled ones, unless scaled ones are still accumulating (apex's delay_unscale)."""
        self._stage_at_entry = self.stage
        if self.stage is not Stage.SCALED and not delay_unscale:
            self.prepare()
        self.stage = Stage.SCALED

    def abort_block(self):
        """The block raised: put the stashed gradients back, as if it never started."""
        self.abort()
        self.stage = self._stage_at_entry

    def unscale_block(self, scaler):
        """The block exited without delay_unscale: unscale the new gradients into ``.grad``."""
        self.post(scaler)
        self.stage = Stage.UNSCALED

    def pass_through_block(self):
        """A block that scales nothing (static scale 1.0, no masters) exited."""
        self.stage = Stage.UNSCALED

    def ready(self):
        """``zero_grad`` (or ``initialize``): the gradients now are the baseline against which
        a backward outside ``scale_loss`` is recognised."""
        self.stage = Stage.READY
        self._baseline = [(g, g._version) if g is not None else None
                          for g in (p.grad for p in self.model_side_params())]

    def _grads_written_outside(self) -> bool:
        baseline = getattr(self, "_baseline", None)
        params = self.model_side_params()
        if baseline is None or len(baseline) != len(params):
            return False
        for p, seen in zip(params, baseline):
            g = p.grad
            if g is None:
                continue
            if seen is None or seen[0] is not g or seen[1] != g._version:
                return True
        return False

    def check_can_step(self):
        name = type(self.optimizer).__name__
        if self.stage is Stage.SCALED:
            raise RuntimeError(
                f"{name}.step() was called while the gradients are still scaled by the loss "
                "scale: inside the `with amp.scale_loss(...)` block, or after blocks with "
                "delay_unscale=True and no last block without it. Fix: call optimizer.step() "
                "after the block, and leave delay_unscale=False on the last backward before "
                "the step.")
        if self.stage is Stage.STEPPED:
            raise RuntimeError(
                f"{name}.step() has already been called since the last scale_loss block (or "
                "zero_grad): a second step would apply the same gradients again. Fix: one "
                "optimizer.step() per `with amp.scale_loss(...)` backward (call "
                "optimizer.zero_grad() first to step without new gradients).")
        if self.stage is Stage.READY and self._grads_written_outside():
            raise RuntimeError(
                f"{name}.step() found gradients written outside `with amp.scale_loss(...)` "
                "(loss.backward() called directly?): they were neither scaled nor checked for "
                "overflow. Fix: with amp.scale_loss(loss, optimizer) as scaled_loss: "
                "scaled_loss.backward()")

    def skip_next_step(self, loss_id: int, new_scale: float):
        """The gradients of the block that just exited overflowed: the next step is skipped."""
        self.overflow = (loss_id, new_scale)

    # -- plain gradients ------------------------------------------------------------------
    def _params(self):
        return [p for g in self.optimizer.param_groups for p in g["params"]]

    def _plain_params(self):
        return self._params()

    def prepare(self):
        params = self._plain_params()
        grads = [p.grad for p in params]
        if any(g is not None for g in grads):
            self._stash = grads
            for p in params:
                p.grad = None
        else:
            self._stash = None
        self._stash_params = params

    def abort(self):
        """Undo :meth:`prepare` after an exception inside the block."""
        if self._stash is not None:
            for p, g in zip(self._stash_params, self._stash):
                p.grad = g
            self._stash = None

    def post(self, scaler):
        stash, self._stash = self._stash, None
        if stash is None:
            scaler.unscale_([p.grad for p in self._plain_params() if p.grad is not None])
            return
        fresh, fresh_with_old, olds = [], [], []
        for p, old in zip(self._stash_params, stash):
            g = p.grad
            if g is None:
                p.grad = old  # no new gradient: keep the accumulated one
            else:
                fresh.append(g)
                if old is not None:
                    fresh_with_old.append(g)
                    olds.append(old)
        scaler.unscale_(fresh)  # only the incoming gradients are checked, as in apex
        if olds:
            from ._fsdp2 import local
            torch._foreach_add_([local(g) for g in fresh_with_old], [local(g) for g in olds])

    # -- the model must still hold the parameters this optimizer updates ----------------------
    def model_side_params(self):
        """The tensors the model holds that this optimizer's step writes."""
        return self._params()

    def bind(self, models):
        """Record where each of :meth:`model_side_params` lives in ``models``."""
        owners: dict = {}
        for model in models:
            for prefix, module in model.named_modules():
                for attr, p in module._parameters.items():
                    if p is not None:
                        name = f"{prefix}.{attr}" if prefix else attr
                        owners.setdefault(id(p), []).append((name, module, attr, p))
        self.bindings = [b for p in self.model_side_params() for b in owners.get(id(p), ())]

    def check_bindings(self):
        """Refuse to step when the model no longer holds a parameter this optimizer updates
        (FSDP2's fully_shard, ``load_state_dict(assign=True)`` or a re-assigned attribute after
        ``initialize``): the step would update tensors the model no longer uses, silently."""
        for name, module, attr, p in self.bindings:
            if module._parameters.get(attr) is not p:
                now = module._parameters.get(attr)
                what = (f"a {type(now).__name__}" if now is not None else "gone")
                raise RuntimeError(
                    f"amplint.amp: model parameter {name!r} is no longer the tensor this "
                    f"{type(self.optimizer).__name__} updates (it is now {what}: replaced after "
                    "amp.initialize, e.g. by FSDP2's fully_shard or load_state_dict(assign=True)), "
                    "so optimizer.step() would train nothing. Fix: shard or replace the "
                    "parameters first, then build the optimizer from model.parameters(), then "
                    "call amp.initialize.")

    # -- step hooks (overridden for masters) -------------------------------------------------
    def before_step(self):
        pass

    def after_step(self):
        pass

    def on_skip(self):
        pass

    def extra_state(self) -> dict:
        return {}

    def load_extra_state(self, extra: dict):
        pass

    def after_model_cast(self):
        """``initialize`` has cast the model (no-op without master weights)."""

    def zero_grad(self, orig, set_to_none=True):
        return orig(set_to_none=set_to_none)

    def add_param_group(self, orig, group):
        return orig(group)

    # -- patching ------------------------------------------------------------------------------
    def attach(self):
        opt = self.optimizer
        opt._amplint_amp = self
        for name in ("step", "zero_grad", "add_param_group"):
            self._orig[name] = vars(opt).get(name)
        orig_step = opt.step
        orig_zero_grad = getattr(opt, "zero_grad", None)
        orig_add_group = getattr(opt, "add_param_group", None)
        state = self

        def step(self_, closure=None):
            return state._step(orig_step, closure)

        def zero_grad(self_, set_to_none=True):
            ret = state.zero_grad(orig_zero_grad, set_to_none)
            state.ready()
            return ret

        def add_param_group(self_, group):
            return state.add_param_group(orig_add_group, group)

        opt.step = types.MethodType(step, opt)
        if orig_zero_grad is not None:
            opt.zero_grad = types.MethodType(zero_grad, opt)
        if orig_add_group is not None:
            opt.add_param_group = types.MethodType(add_param_group, opt)
        owner = _hook_owner(opt)
        if owner is not None:
            self._hooks.append(owner.register_state_dict_post_hook(self._state_dict_hook))
            self._hooks.append(owner.register_load_state_dict_pre_hook(self._load_pre_hook))
            self._hooks.append(owner.register_load_state_dict_post_hook(self._load_post_hook))

    def detach(self):
        opt = self.optimizer
        for name, orig in self._orig.items():
            if orig is None:
                vars(opt).pop(name, None)
            else:
                setattr(opt, name, orig)
        for h in self._hooks:
            h.remove()
        self._hooks.clear()
        self.session = None

    def _step(self, orig_step, closure):
        self.check_bindings()
        self.check_can_step()
        if self.overflow is not None:
            loss_id, new_scale = self.overflow
            self.overflow = None
            if closure is not None:
                raise RuntimeError("amplint.amp does not support optimizer.step(closure).")
            self.engine.log(f"Gradient overflow.  Skipping step, loss scaler {loss_id} "
                            f"reducing loss scale to {new_scale}")
            self.on_skip()
            self.stage = Stage.STEPPED
            return None
        if closure is not None and self.has_masters:
            raise RuntimeError("amplint.amp does not support optimizer.step(closure) with fp32 "
                               "master weights (O2).")
        self.before_step()
        if self.engine.o1_active:
            with disable_casts():
                ret = orig_step() if closure is None else orig_step(closure)
        else:
            ret = orig_step() if closure is None else orig_step(closure)
        self.after_step()
        self.stage = Stage.STEPPED
        return ret

    # -- checkpoint hooks -------------------------------------------------------------------
    def _state_dict_hook(self, optimizer, state_dict):
        state_dict[_AMP_KEY] = self.engine.state_dict() if self.session is self.engine.session else {}
        state_dict.update(self.extra_state())
        return state_dict

    def _load_pre_hook(self, optimizer, state_dict):
        state_dict = dict(state_dict)
        self._pending_extra = {k: state_dict.pop(k) for k in (_MASTERS_KEY,) if k in state_dict}
        amp_state = state_dict.pop(_AMP_KEY, None)
        if amp_state and self.session is self.engine.session:
            self.engine.expect_amp_restore(amp_state)
        return state_dict

    def _load_post_hook(self, optimizer):
        extra = getattr(self, "_pending_extra", {})
        self._pending_extra = {}
        self.load_extra_state(extra)


class MasterState(OptimizerState):
    """O2: fp32 master weights inside the optimizer (see module docstring)."""

    def __init__(self, optimizer, engine, session, to_cast: set):
        super().__init__(optimizer, engine, session)
        self.has_masters = True
        self.model_params: list = []
        self.masters: list = []
        for group in optimizer.param_groups:
            params = group["params"]
            for i, p in enumerate(params):
                if id(p) in to_cast and p.requires_grad:
                    master = p.detach().clone().float().requires_grad_(True)
                    if p in optimizer.state:
                        optimizer.state[master] = optimizer.state.pop(p)
                    params[i] = master
                    self.model_params.append(p)
                    self.masters.append(master)
        master_ids = {id(m) for m in self.masters}
        self.fp32_params = [p for g in optimizer.param_groups for p in g["params"]
                            if id(p) not in master_ids]
        self.master_grads = [torch.zeros_like(m) for m in self.masters]
        self.valid = [False] * len(self.masters)
        self.synced = [0] * len(self.masters)  # model-param versions after our last write
        self.view_versions = [None] * len(self.masters)  # p.grad versions after our last write
        # prepare() drops the half views before each backward; a master gradient whose view we
        # dropped (a parameter the next loss does not reach) is still the gradient, not a
        # gradient the user cleared
        self.view_dropped = [False] * len(self.masters)
        self._warned_lossy = False

    def model_side_params(self):
        return self.model_params + self.fp32_params

    def _add_master(self, p):
        master = p.detach().clone().float().requires_grad_(True)
        self.model_params.append(p)
        self.masters.append(master)
        self.master_grads.append(torch.zeros_like(master))
        self.valid.append(False)
        self.synced.append(p._version)
        self.view_versions.append(None)
        self.view_dropped.append(False)
        return master

    def add_param_group(self, orig, group):
        """apex's O2 ``add_param_group``: half parameters of the new group get fp32 masters
        (the optimizer sees only those), fp32 ones are stepped directly."""
        params = group["params"]
        params = [params] if isinstance(params, torch.Tensor) else list(params)
        known = {id(p) for p in self.model_params}
        new = []
        for p in params:
            if id(p) in known:
                raise ValueError("some parameters appear in more than one parameter group")
            if p.dtype in (torch.float16, torch.bfloat16) and p.requires_grad:
                new.append(self._add_master(p))
            else:
                self.fp32_params.append(p)
                new.append(p)
        return orig(dict(group, params=new))

    def mark_synced(self):
        self.synced = [p._version for p in self.model_params]

    def after_model_cast(self):
        self.mark_synced()  # casting bumped the model parameters' versions

    def _plain_params(self):
        return self.fp32_params

    def _reconcile_user_grads(self, at_step: bool):
        """Let a change the user made to the half gradients win over the master gradients."""
        lossy = []
        for i, p in enumerate(self.model_params):
            g = p.grad
            if g is None:
                if self.valid[i] and not self.view_dropped[i]:
                    self.valid[i] = False
                    self.masters[i].grad = None
            elif g._version != self.view_versions[i]:
                with torch.no_grad():
                    self.master_grads[i].copy_(g)
                self.masters[i].grad = self.master_grads[i]
                self.valid[i] = True
                self.view_versions[i] = g._version
                lossy.append(i)
        if at_step and lossy and self.model_params[lossy[0]].dtype == torch.float16 and not self._warned_lossy:
            self._warned_lossy = True
            warnings.warn(
                "amplint.amp O2: the fp16 gradients of the model were changed between scale_loss "
                "and optimizer.step() (for example clip_grad_norm_(model.parameters(), ...)); the "
                "change was applied to the fp32 master gradients from the fp16 values, which loses "
                "the small ones. Fix: clip amp.master_params(optimizer) instead.", stacklevel=4)

    def prepare(self):
        super().prepare()
        self._reconcile_user_grads(at_step=False)
        for i, p in enumerate(self.model_params):
            self.view_dropped[i] = self.valid[i]
            p.grad = None

    def post(self, scaler):
        super().post(scaler)  # fp32 parameters the model kept (BatchNorm, keep_fp32_modules)
        fresh_idx, accum_idx = [], []
        for i, p in enumerate(self.model_params):
            if p.grad is not None:
                (accum_idx if self.valid[i] else fresh_idx).append(i)
        if not fresh_idx and not accum_idx:
            return
        mg = self.master_grads
        fresh = [mg[i] for i in fresh_idx]
        tmp = [torch.empty_like(mg[i]) for i in accum_idx]
        _copy_(fresh + tmp, [self.model_params[i].grad for i in fresh_idx + accum_idx])
        scaler.unscale_(fresh + tmp)
        if tmp:
            torch._foreach_add_([mg[i] for i in accum_idx], tmp)
        touched = fresh_idx + accum_idx
        views = [self.model_params[i].grad for i in touched]
        _copy_(views, [mg[i] for i in touched])
        for i, v in zip(touched, views):
            self.masters[i].grad = mg[i]
            self.valid[i] = True
            self.view_versions[i] = v._version
            self.view_dropped[i] = False

    def before_step(self):
        self._reconcile_user_grads(at_step=True)
        stale = [i for i, p in enumerate(self.model_params) if p._version != self.synced[i]]
        if stale:
            with torch.no_grad():
                _copy_([self.masters[i] for i in stale],
                                     [self.model_params[i] for i in stale])

    def after_step(self):
        with torch.no_grad():
            _copy_(self.model_params, self.masters)
        self.mark_synced()
        self._invalidate()

    def _invalidate(self):
        for i, m in enumerate(self.masters):
            m.grad = None
            self.valid[i] = False
            self.view_dropped[i] = False

    def on_skip(self):
        self._invalidate()

    def zero_grad(self, orig, set_to_none=True):
        ret = orig(set_to_none=set_to_none)
        self._invalidate()
        for i, p in enumerate(self.model_params):
            if set_to_none or p.grad is None:
                p.grad = None
            else:
                p.grad.detach_()
                p.grad.zero_()
                self.view_versions[i] = p.grad._version
        return ret

    def extra_state(self) -> dict:
        return {_MASTERS_KEY: [m.detach() for m in self.masters]}

    def load_extra_state(self, extra: dict):
        saved = extra.get(_MASTERS_KEY)
        if saved is None:
            return  # e.g. a checkpoint from O1: masters are refreshed from the model before the step
        if len(saved) != len(self.masters):
            raise RuntimeError(
                f"amplint.amp: the optimizer checkpoint holds {len(saved)} fp32 master weights but "
                f"this optimizer has {len(self.masters)}; restore with the same model and opt_level.")
        with torch.no_grad():
            _copy_(self.masters, [s.to(m.device) for s, m in zip(saved, self.masters)])
            _copy_(self.model_params, self.masters)
        self.mark_synced()
