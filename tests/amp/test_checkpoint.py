"""Checkpoints: the seed's save/restore recipe continues bit-identically at every opt level;
a missing or malformed amp state is a clear error, never a silently reset scaler."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from amplint import amp

LEVELS = [("O0", {}), ("O1", {}), ("O2", {}), ("O3", {}),
          ("O1", {"half_dtype": torch.bfloat16}), ("O2", {"cast_model_type": torch.bfloat16}),
          ("O2", {"keep_fp32_modules": (nn.LayerNorm,)})]


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _build(seed, device="cpu"):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.LayerNorm(16),
                          nn.Linear(16, 3)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2, eps=1e-4)
    return model, opt


def _batch(i):
    g = torch.Generator().manual_seed(100 + i)
    return torch.randn(8, 6, generator=g), torch.randint(0, 3, (8,), generator=g)


def _train(model, opt, steps):
    device = next(model.parameters()).device
    for i in steps:
        x, y = (t.to(device) for t in _batch(i))
        loss = F.cross_entropy(model(x).float(), y)
        if i == 3 and amp.properties()["loss_scale"] == "dynamic":
            loss = loss * float("inf")   # one overflow: the dynamic scaler skips this step
        opt.zero_grad()
        with amp.scale_loss(loss, opt) as scaled_loss:
            scaled_loss.backward()
        torch.nn.utils.clip_grad_norm_(amp.master_params(opt), 50)
        opt.step()


def _snapshot(model, opt):
    return ([t.clone() for t in model.state_dict().values()],
            [p.detach().clone() for p in amp.master_params(opt)], amp.state_dict())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("level,kw", LEVELS, ids=lambda v: str(v))
def test_resume_is_bit_identical(level, kw, device, tmp_path):
    model, opt = _build(0, device)
    model, opt = amp.initialize(model, opt, opt_level=level, verbosity=0, **kw)
    _train(model, opt, range(10))
    expected = _snapshot(model, opt)

    model, opt = _build(0, device)
    model, opt = amp.initialize(model, opt, opt_level=level, verbosity=0, **kw)
    _train(model, opt, range(5))
    checkpoint = {"model": model.state_dict(), "optimizer": opt.state_dict(), "amp": amp.state_dict()}
    torch.save(checkpoint, tmp_path / "amp_checkpoint.pt")
    del model, opt, checkpoint

    model, opt = _build(1, device)         # different init: the restore must overwrite it all
    checkpoint = torch.load(tmp_path / "amp_checkpoint.pt")
    model, opt = amp.initialize(model, opt, opt_level=level, verbosity=0, **kw)
    model.load_state_dict(checkpoint["model"])
    opt.load_state_dict(checkpoint["optimizer"])
    amp.load_state_dict(checkpoint["amp"])
    _train(model, opt, range(5, 10))
    got = _snapshot(model, opt)

    for a, b in zip(expected[0] + expected[1], got[0] + got[1]):
        assert a.dtype == b.dtype and torch.equal(a, b)
    assert expected[2] == got[2]
    if amp.properties()["loss_scale"] == "dynamic":
        assert got[2]["loss_scaler0"]["loss_scale"] == 32768.0   # the overflow was kept


def _initialized():
    model, opt = _build(0)
    return amp.initialize(model, opt, opt_level="O1", verbosity=0)


@pytest.mark.parametrize("bad", [None, {}, {"loss_scaler0": {"loss_scale": "x", "unskipped": 0}},
                                 {"loss_scaler0": {"unskipped": 0}},
                                 {"loss_scaler0": {"loss_scale": -1.0, "unskipped": 0}},
                                 {"scaler": {"loss_scale": 1.0, "unskipped": 0}},
                                 {"loss_scaler0": {"loss_scale": 1.0, "unskipped": 0},
                                  "loss_scaler1": {"loss_scale": 1.0, "unskipped": 0}}])
def test_malformed_amp_state_is_an_error(bad):
    _initialized()
    with pytest.raises(RuntimeError, match="amp"):
        amp.load_state_dict(bad)
    assert amp.loss_scale() == 65536.0


def test_forgetting_amp_load_state_dict_is_an_error():
    model, opt = _initialized()
    _train(model, opt, range(5))
    saved = {"model": model.state_dict(), "optimizer": opt.state_dict()}
    model, opt = _build(0)
    model, opt = amp.initialize(model, opt, opt_level="O1", verbosity=0)
    model.load_state_dict(saved["model"])
    opt.load_state_dict(saved["optimizer"])
    with pytest.raises(RuntimeError, match=r"amp.load_state_dict\(checkpoint\['amp'\]\)"):
        _train(model, opt, range(5, 6))
    amp.load_state_dict(amp.state_dict())      # the documented way to start fresh on purpose
    _train(model, opt, range(5, 6))


def test_amp_restored_before_the_optimizer_is_fine_and_unchanged_scalers_need_no_restore():
    model, opt = _initialized()
    _train(model, opt, range(5))
    saved = {"model": model.state_dict(), "optimizer": opt.state_dict(), "amp": amp.state_dict()}
    model, opt = _build(0)
    model, opt = amp.initialize(model, opt, opt_level="O1", verbosity=0)
    amp.load_state_dict(saved["amp"])            # amp first, then the optimizer
    opt.load_state_dict(saved["optimizer"])
    _train(model, opt, range(5, 6))
    model, opt = _build(0)
    model, opt = amp.initialize(model, opt, opt_level="O0", verbosity=0)
    fresh = opt.state_dict()                      # scalers still at their initial state
    opt.load_state_dict(fresh)
    _train(model, opt, range(1))                  # nothing would be lost: no error


def test_state_dict_and_load_before_initialize():
    with pytest.raises(RuntimeError, match="before amp.initialize"):
        amp.state_dict()
    with pytest.raises(RuntimeError, match="before amp.initialize"):
        amp.load_state_dict({"loss_scaler0": {"loss_scale": 1.0, "unskipped": 0}})


def _fresh(level, **kw):
    model, opt = _build(0)
    return amp.initialize(model, opt, opt_level=level, verbosity=0, **kw)


@pytest.mark.parametrize("saved_level,saved_kw,level,kw", [
    ("O1", {}, "O3", {}),                                        # dynamic into static
    ("O3", {}, "O1", {}),                                        # static into dynamic
    ("O2", {}, "O1", {"half_dtype": torch.bfloat16}),            # fp16 dynamic into bf16 static
])
def test_a_state_of_the_other_scaler_kind_is_refused(saved_level, saved_kw, level, kw):
    _fresh(saved_level, **saved_kw)
    saved = amp.state_dict()
    amp.reset()
    _fresh(level, **kw)
    before = amp.state_dict()
    with pytest.raises(RuntimeError, match=r"'loss_scaler0' was saved by a (dynamic|static) loss "
                                           r"scaler.*this run \(opt_level O[13].*Fix: initialize"):
        amp.load_state_dict(saved)
    assert amp.state_dict() == before


def test_apex_format_states_load_and_a_dynamic_one_is_refused_by_a_static_run():
    _fresh("O1")
    amp.load_state_dict({"loss_scaler0": {"loss_scale": 1024.0, "unskipped": 7}})   # apex's format
    assert amp.state_dict()["loss_scaler0"] == {"loss_scale": 1024.0, "unskipped": 7, "dynamic": True}
    amp.reset()
    model, opt = _fresh("O3")
    with pytest.raises(RuntimeError, match="static loss scale of 1.0"):
        amp.load_state_dict({"loss_scaler0": {"loss_scale": 65536.0, "unskipped": 0}})
    amp.load_state_dict({"loss_scaler0": {"loss_scale": 1.0, "unskipped": 12}})       # same kind
    _train(model, opt, range(1))
    assert all(torch.isfinite(p).all() for p in model.parameters())


@pytest.mark.parametrize("entry,reason", [
    ({"loss_scale": 1.0, "unskipped": 2000}, r"unskipped=2000 is outside \[0, 2000\)"),
    ({"loss_scale": 1.0, "unskipped": -1}, r"unskipped=-1 is outside"),
    ({"loss_scale": 1.0, "unskipped": 1.9}, r"unskipped=1.9 is not an integer"),
    ({"loss_scale": 1.0, "unskipped": True}, r"unskipped=True is not an integer"),
    ({"loss_scale": True, "unskipped": 0}, r"loss_scale=True is not a number"),
    ({"loss_scale": "1.0", "unskipped": 0}, r"loss_scale='1.0' is not a number"),
    ({"loss_scale": 1e300, "unskipped": 0}, r"loss_scale=1e\+300 is not a finite number"),
    ({"loss_scale": 5e-324, "unskipped": 0}, r"loss_scale=5e-324 is not a finite number"),
    ({"loss_scale": 2.9e-39, "unskipped": 0}, r"loss_scale=2.9e-39 is not a finite number"),
    ({"loss_scale": float("nan"), "unskipped": 0}, r"loss_scale=nan is not a finite number"),
    ({"loss_scale": float("inf"), "unskipped": 0}, r"loss_scale=inf is not a finite number"),
    ({"loss_scale": 0.0, "unskipped": 0}, r"loss_scale=0.0 is not a finite number"),
    ({"loss_scale": 2.0 ** -20, "unskipped": 0}, r"outside this run's \[min_loss_scale, max_loss_scale\]"),
    ({"loss_scale": 2.0 ** 25, "unskipped": 0}, r"outside this run's \[min_loss_scale, max_loss_scale\]"),
    ({"loss_scale": 1.0, "unskipped": 0, "dynamic": "yes"}, r"dynamic='yes' is not True or False"),
    ({"loss_scale": 1.0, "unskipped": 0, "growth": 2}, r"unexpected field\(s\) \['growth'\]"),
])
def test_out_of_range_or_mistyped_fields_are_refused(entry, reason):
    _fresh("O1")
    with pytest.raises(RuntimeError, match=reason):
        amp.load_state_dict({"loss_scaler0": entry})
    assert amp.loss_scale() == 65536.0


def test_a_bad_entry_among_several_loads_none():
    _fresh("O1", num_losses=2)
    with pytest.raises(RuntimeError, match="loss_scaler1"):
        amp.load_state_dict({"loss_scaler0": {"loss_scale": 8.0, "unskipped": 3},
                             "loss_scaler1": {"loss_scale": 8.0, "unskipped": 5000}})
    assert amp.loss_scale(0) == 65536.0 and amp.loss_scale(1) == 65536.0


def test_the_last_legal_unskipped_still_grows_and_a_larger_count_can_never_freeze_growth():
    # The adversarial report's state (unskipped=2000) left the scale at 1.0 forever because
    # growth tested `== 2000`; it is refused now, and growth tests `>=` besides.
    model, opt = _fresh("O1")
    amp.load_state_dict({"loss_scaler0": {"loss_scale": 1.0, "unskipped": 1999}})
    _train(model, opt, range(1))
    assert amp.state_dict()["loss_scaler0"]["loss_scale"] == 2.0
    from amplint.amp._frontend import ENGINE
    ENGINE.scalers[0].unskipped = 2500
    _train(model, opt, range(1, 2))
    assert amp.loss_scale() == 4.0
