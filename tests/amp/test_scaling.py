"""Loss scaling with apex semantics: dynamic growth/backoff/skip, static scales, several losses,
delay_unscale, and gradients that are unscaled when scale_loss exits; the default floor."""
import copy
import warnings

import pytest
import torch
import torch.nn as nn
from torch.nn.utils import clip_grad_norm_

from amplint import amp
from amplint.amp._frontend import ENGINE


def _setup(opt_level="O1", **kw):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    ref = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt = amp.initialize(model, opt, opt_level=opt_level, verbosity=kw.pop("verbosity", 0), **kw)
    return model, opt, ref


def _loss(model, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(3, 4, generator=g)
    return model(x).float().pow(2).mean()


def _inject_inf(model):
    p = next(model.parameters())
    p.grad.view(-1)[0] = float("inf")


def test_grads_are_unscaled_at_exit_and_match_fp32():
    model, opt, ref = _setup("O0", loss_scale="dynamic")
    with amp.scale_loss(_loss(model), opt) as scaled:
        assert scaled.dtype == torch.float32
        assert scaled.item() == pytest.approx(_loss(ref).item() * 65536.0, rel=1e-6)
        scaled.backward()
    _loss(ref).backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad)
    assert amp.state_dict()["loss_scaler0"] == {"loss_scale": 65536.0, "unskipped": 1, "dynamic": True}


def test_overflow_halves_scale_skips_one_step_and_logs(capsys):
    model, opt, _ = _setup("O1", verbosity=1)
    capsys.readouterr()
    before = [p.detach().clone() for p in model.parameters()]
    with amp.scale_loss(_loss(model), opt) as scaled:
        scaled.backward()
        _inject_inf(model)
    assert amp.loss_scale() == 32768.0 and amp.skipped_steps() == 1
    opt.step()
    out = capsys.readouterr().out
    assert out.count("Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 32768.0") == 1
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    opt.zero_grad()
    with amp.scale_loss(_loss(model), opt) as scaled:   # the skip was one-shot
        scaled.backward()
    opt.step()
    assert not all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert amp.state_dict()["loss_scaler0"] == {"loss_scale": 32768.0, "unskipped": 1, "dynamic": True}


def test_growth_after_2000_clean_exits_capped_by_max_and_floored_by_min():
    model, opt, _ = _setup("O1", max_loss_scale=2.0 ** 17, min_loss_scale=16384.0)
    scaler = ENGINE.scalers[0]
    scaler.unskipped = 1998
    for _ in range(2):
        opt.zero_grad()
        with amp.scale_loss(_loss(model), opt) as s:
            s.backward()
    assert amp.loss_scale() == 2.0 ** 17 and scaler.unskipped == 0
    scaler.unskipped = 1999
    with amp.scale_loss(_loss(model), opt) as s:
        s.backward()
    assert amp.loss_scale() == 2.0 ** 17                    # capped at max_loss_scale
    with pytest.warns(RuntimeWarning, match="minimum loss scale 16384.0"):
        for expected in (65536.0, 32768.0, 16384.0, 16384.0):    # floored at min_loss_scale
            with amp.scale_loss(_loss(model), opt) as s:
                s.backward()
                _inject_inf(model)
            assert amp.loss_scale() == expected
            opt.step()


def test_initial_scale_respects_max_loss_scale():
    _setup("O1", max_loss_scale=1024.0)
    assert amp.loss_scale() == 1024.0


def test_static_scale_unscales_but_never_checks_or_skips():
    model, opt, ref = _setup("O1", loss_scale=128.0)
    with amp.scale_loss(_loss(model), opt) as scaled:
        assert scaled.item() == pytest.approx(_loss(model).item() * 128.0, rel=1e-3)
        scaled.backward()
        _inject_inf(model)
    assert amp.loss_scale() == 128.0 and amp.skipped_steps() == 0
    opt.step()
    assert not torch.isfinite(next(model.parameters())).all()  # no skip: apex semantics


def test_static_one_short_circuits_o3():
    model, opt, _ = _setup("O3")
    loss = _loss(model)
    with amp.scale_loss(loss, opt) as scaled:
        assert scaled is loss.float() or torch.equal(scaled, loss.float())
        scaled.backward()
    assert amp.state_dict()["loss_scaler0"] == {"loss_scale": 1.0, "unskipped": 0, "dynamic": False}


def test_num_losses_have_independent_scalers():
    model, opt, _ = _setup("O1", num_losses=2)
    with amp.scale_loss(_loss(model, 1), opt, loss_id=0) as s:
        s.backward()
    with amp.scale_loss(_loss(model, 2), opt, loss_id=1) as s:
        s.backward()
        _inject_inf(model)
    assert amp.loss_scale(0) == 65536.0 and amp.loss_scale(1) == 32768.0
    assert amp.skipped_steps(0) == 0 and amp.skipped_steps(1) == 1
    assert set(amp.state_dict()) == {"loss_scaler0", "loss_scaler1"}
    with pytest.raises(IndexError, match="num_losses=2"):
        with amp.scale_loss(_loss(model), opt, loss_id=2):
            pass


@pytest.mark.parametrize("opt_level", ["O0", "O1", "O2"])
def test_accumulation_and_delay_unscale_give_the_summed_true_gradient(opt_level):
    # apex: gradients stay unscaled between blocks, so accumulation is exact across blocks,
    # and delay_unscale keeps them scaled until the last micro-batch.
    for delay in (False, True):
        amp.reset()
        model, opt, ref = _setup(opt_level, loss_scale="dynamic")
        opt.zero_grad()
        for i in range(3):
            with amp.scale_loss(_loss(model, i), opt, delay_unscale=delay and i < 2) as s:
                s.backward()
            _loss(ref, i).backward()
        grads = list(amp.master_params(opt))
        tol = dict(atol=1e-2, rtol=1e-2) if opt_level == "O2" else {}
        for p, q in zip(grads, ref.parameters()):
            torch.testing.assert_close(p.grad.float(), q.grad, **tol)


def test_clip_grad_norm_between_backward_and_step_sees_true_gradients():
    model, opt, ref = _setup("O1")
    with amp.scale_loss(_loss(model), opt) as s:
        s.backward()
    _loss(ref).backward()
    n1 = clip_grad_norm_(model.parameters(), 50)
    n2 = clip_grad_norm_(ref.parameters(), 50)
    torch.testing.assert_close(n1, n2, atol=1e-3, rtol=1e-3)


def test_bf16_defaults_to_static_scale_and_trains():
    model, opt, _ = _setup("O1", half_dtype=torch.bfloat16)
    assert amp.properties()["loss_scale"] == 1.0
    assert model(torch.randn(2, 4)).dtype == torch.bfloat16
    for i in range(3):
        opt.zero_grad()
        with amp.scale_loss(_loss(model, i), opt) as s:
            s.backward()
        opt.step()
    amp.reset()
    _, _, _ = _setup("O2", cast_model_type=torch.bfloat16, loss_scale="dynamic")
    assert amp.loss_scale() == 65536.0


def test_exception_inside_block_restores_stashed_grads():
    model, opt, _ = _setup("O1")
    with amp.scale_loss(_loss(model), opt) as s:
        s.backward()
    saved = [p.grad.clone() for p in model.parameters()]
    with pytest.raises(ValueError):
        with amp.scale_loss(_loss(model), opt):
            raise ValueError("boom")
    assert all(torch.equal(a, p.grad) for a, p in zip(saved, model.parameters()))


def _inf_then_finite(inf_steps, finite_steps=50):
    """The adversarial report's t_scale.py: O1 nn.Linear, ``inf_steps`` losses times inf, then
    finite ones; returns the model, the optimizer, the scale after the overflows, the floor
    warnings and how many finite steps moved the weights."""
    torch.manual_seed(0)
    model = nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt = amp.initialize(model, opt, opt_level="O1", verbosity=0)
    x = torch.randn(2, 4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(inf_steps):
            opt.zero_grad()
            with amp.scale_loss(model(x).float().sum() * float("inf"), opt) as s:
                s.backward()
            opt.step()
            assert torch.isfinite(model.weight).all()
        scale_after_overflows = amp.loss_scale()
        moved = 0
        for _ in range(finite_steps):
            before = model.weight.detach().clone()
            opt.zero_grad()
            with amp.scale_loss(model(x).float().sum(), opt) as s:
                s.backward()
            opt.step()
            moved += not torch.equal(before, model.weight)
    floor_warnings = [w for w in caught if "minimum loss scale" in str(w.message)]
    return model, opt, scale_after_overflows, floor_warnings, moved


@pytest.mark.parametrize("inf_steps", [100, 150])
def test_overflow_storm_stops_at_the_default_floor_and_training_resumes(inf_steps):
    # Without a floor: 5.2e-26 after 100 (finite steps then moved nothing) and, from the 144th,
    # 1/scale overflowed fp32 and every scale_loss raised, even once the losses were finite.
    _, _, scale, floor_warnings, moved = _inf_then_finite(inf_steps)
    assert scale == 2.0 ** -14
    assert moved == 50
    assert len(floor_warnings) == 1                       # once, however long the storm
    assert floor_warnings[0].category is RuntimeWarning
    assert floor_warnings[0].filename == __file__         # points at the user's scale_loss
    assert amp.skipped_steps() == inf_steps
    assert amp.state_dict()["loss_scaler0"]["loss_scale"] == 2.0 ** -14


def test_scale_grows_back_from_the_floor():
    model, opt, scale, _, _ = _inf_then_finite(40, finite_steps=0)
    assert scale == 2.0 ** -14
    scaler = ENGINE.scalers[0]
    scaler.unskipped = 1999
    with amp.scale_loss(model(torch.randn(2, 4)).float().sum(), opt) as s:
        s.backward()
    assert amp.loss_scale() == 2.0 ** -13 and scaler.unskipped == 0


def test_no_floor_warning_for_ordinary_backoff_or_with_a_lower_min():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model, opt, _ = _setup("O1")
        for _ in range(5):                                  # an ordinary burst: 2**16 -> 2**11
            with amp.scale_loss(_loss(model), opt) as s:
                s.backward()
                _inject_inf(model)
            opt.step()
    assert amp.loss_scale() == 2.0 ** 11
    amp.reset()
    model, opt, _ = _setup("O1", min_loss_scale=2.0 ** -24)
    ENGINE.scalers[0].scale = 2.0 ** -20
    with amp.scale_loss(_loss(model), opt) as s:
        s.backward()
        _inject_inf(model)
    assert amp.loss_scale() == 2.0 ** -21


def test_initial_scale_respects_min_loss_scale():
    _setup("O1", min_loss_scale=2.0 ** 20)
    assert amp.loss_scale() == 2.0 ** 20


@pytest.mark.parametrize("opt_level", ["O1", "O2"])
def test_each_optimizer_moves_through_explicit_stages(opt_level):
    from amplint.amp._optimizer import Stage
    model, opt, _ = _setup(opt_level)
    state = opt._amplint_amp
    assert state.stage is Stage.READY and state.overflow is None
    with amp.scale_loss(_loss(model, 0), opt, delay_unscale=True) as s:
        assert state.stage is Stage.SCALED
        s.backward()
    assert state.stage is Stage.SCALED                     # still scaled: accumulating
    with pytest.raises(ValueError):
        with amp.scale_loss(_loss(model, 1), opt):
            raise ValueError("boom")
    assert state.stage is Stage.SCALED                     # an aborted block changes nothing
    with amp.scale_loss(_loss(model, 1), opt) as s:
        s.backward()
    assert state.stage is Stage.UNSCALED and state.overflow is None
    opt.step()
    assert state.stage is Stage.STEPPED
    opt.zero_grad()
    with amp.scale_loss(_loss(model, 2), opt) as s:
        s.backward()
        _inject_inf(model)
    assert state.stage is Stage.UNSCALED and state.overflow == (0, 32768.0)
    opt.step()                                             # skipped
    assert state.stage is Stage.STEPPED and state.overflow is None
