"""``scale_loss``: the per-backward protocol (apex semantics, exception-safe)."""
from __future__ import annotations

import contextlib

import torch

from ._casting import CASTS
from ._frontend import ENGINE
from ._optimizer import is_optimizer


def _states(optimizers):
    if is_optimizer(optimizers):
        optimizers = [optimizers]
    elif optimizers is None:
        optimizers = []
    states = []
    for opt in optimizers:
        state = getattr(opt, "_amplint_amp", None)
        if state is None:
            raise RuntimeError(
                f"This {type(opt).__name__} was not passed through amp.initialize. Fix: pass it: "
                "model, optimizer = amp.initialize(model, optimizer, ...), and use the returned "
                "optimizer in scale_loss.")
        if state.session is not ENGINE.session:
            raise RuntimeError(
                "This optimizer belongs to an earlier amp.initialize (amp.initialize or amp.reset "
                "was called since). Fix: pass the optimizer returned by the latest initialize.")
        states.append(state)
    return states


@contextlib.contextmanager
def scale_loss(loss, optimizers, loss_id=0, model=None, delay_unscale=False,
               delay_overflow_check=False):
    """Yield ``loss.float() * scale``; on exit unscale the new gradients into ``.grad`` (or the
    fp32 master gradients), update the scale, and arrange for the next ``optimizer.step()`` to
    be skipped if they overflowed. ``model`` is unused (as in apex)."""
    eng = ENGINE
    props = eng.props
    if props is None:
        raise RuntimeError(
            "Invoked 'with amp.scale_loss', but internal Amp state has not been initialized. "
            "Fix: model, optimizer = amp.initialize(model, optimizer, opt_level=...) must be "
            "called before `with amp.scale_loss`.")
    if not props.enabled:
        yield loss
        return
    if eng.pending_amp_restore is not None:
        saved = eng.pending_amp_restore
        raise RuntimeError(
            "The optimizer was restored from a checkpoint that carries amp loss-scaler state "
            f"({saved}), but amp.load_state_dict was not called, so the loss scale would "
            "silently restart from its initial value. Fix: call amp.load_state_dict("
            "checkpoint['amp']) after optimizer.load_state_dict (to start with fresh scalers on "
            "purpose: amp.load_state_dict(amp.state_dict())).")
    states = _states(optimizers)
    if not 0 <= loss_id < len(eng.scalers):
        raise IndexError(f"loss_id={loss_id} but amp.initialize was given num_losses="
                         f"{len(eng.scalers)}; valid ids are 0..{len(eng.scalers) - 1}.")
    scaler = eng.scalers[loss_id]
    scale = scaler.scale
    o1 = CASTS.is_installed

    if not props.master_weights and not scaler.dynamic and scale == 1.0:
        # apex's short-circuit (the O0 / O3 default): nothing to unscale or check.
        try:
            yield loss.float()
        finally:
            if o1:
                CASTS.clear_cache()
        for s in states:
            s.pass_through_block()
        return

    for s in states:
        s.enter_block(delay_unscale)
    try:
        yield loss.float() * scale
    except BaseException:
        for s in states:
            s.abort_block()
        if o1:
            CASTS.clear_cache()
        raise

    if not delay_unscale:  # delayed: the gradients stay scaled (stage SCALED) for the next block
        scaler.clear_overflow_state()
        for s in states:
            s.unscale_block(scaler)
        should_skip = False if delay_overflow_check else scaler.update_scale(eng.reduce_device)
        if should_skip:
            for s in states:
                s.skip_next_step(loss_id, scaler.scale)
    if o1:
        CASTS.clear_cache()
