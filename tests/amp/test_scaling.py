"""Loss scaling with apex semantics: dynamic growth/backoff/skip, static scales, several losses,
delay_unscale, and gradients that are unscaled when scale_loss exits."""
import copy

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
    assert amp.state_dict()["loss_scaler0"] == {"loss_scale": 65536.0, "unskipped": 1}


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
    assert amp.state_dict()["loss_scaler0"] == {"loss_scale": 32768.0, "unskipped": 1}


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
    assert amp.state_dict()["loss_scaler0"] == {"loss_scale": 1.0, "unskipped": 0}


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
