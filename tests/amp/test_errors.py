"""Misuse gets a clear error that names the fix."""
import pytest
import torch
import torch.nn as nn

from amplint import amp


def _pair():
    model = nn.Linear(3, 3)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def test_scale_loss_before_initialize():
    model, opt = _pair()
    with pytest.raises(RuntimeError, match="must be called before `with amp.scale_loss`"):
        with amp.scale_loss(model(torch.randn(1, 3)).sum(), opt):
            pass


def test_initialize_twice_with_the_same_optimizer():
    model, opt = _pair()
    model, opt = amp.initialize(model, opt, verbosity=0)
    with pytest.raises(RuntimeError, match="only be passed through amp.initialize once"):
        amp.initialize(model, opt, verbosity=0)
    amp.reset()
    with pytest.raises(RuntimeError, match="fresh optimizer"):
        amp.initialize(model, opt, verbosity=0)


def test_unknown_opt_level():
    model, opt = _pair()
    with pytest.raises(RuntimeError, match="the prefix O is the letter O, not the number zero"):
        amp.initialize(model, opt, opt_level="02", verbosity=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_model_already_in_half(dtype):
    model, opt = _pair()
    model.to(dtype)
    with pytest.raises(RuntimeError, match=r"do not need to call \.half\(\)"):
        amp.initialize(model, opt, opt_level="O2", verbosity=0)


def test_optimizer_over_other_parameters():
    model, _ = _pair()
    other = nn.Linear(3, 3)
    opt = torch.optim.SGD(other.parameters(), lr=0.1)
    with pytest.raises(RuntimeError, match="not parameters of the model"):
        amp.initialize(model, opt, verbosity=0)


def test_parallel_wrapper_before_initialize():
    model, opt = _pair()
    with pytest.raises(RuntimeError, match="AFTER"):
        amp.initialize(nn.DataParallel(model), opt, verbosity=0)


def test_bad_types_and_stale_optimizers():
    model, opt = _pair()
    with pytest.raises(TypeError, match="models must be"):
        amp.initialize("model", opt, verbosity=0)
    with pytest.raises(TypeError, match="optimizers must be"):
        amp.initialize(model, (opt,), verbosity=0)
    model, opt = amp.initialize(model, opt, verbosity=0)
    m2, o2 = _pair()
    amp.initialize(m2, o2, verbosity=0)      # a new session
    with pytest.raises(RuntimeError, match="earlier amp.initialize"):
        with amp.scale_loss(model(torch.randn(1, 3)).float().sum(), opt):
            pass
    m3, o3 = _pair()
    with pytest.raises(RuntimeError, match="not passed through amp.initialize"):
        with amp.scale_loss(m3(torch.randn(1, 3)).sum(), o3):
            pass


def test_o2_closure():
    model, opt = _pair()
    model, opt = amp.initialize(model, opt, opt_level="O2", verbosity=0)
    with pytest.raises(RuntimeError, match="closure"):
        opt.step(lambda: 0.0)


@pytest.mark.parametrize("kw,error,message", [
    ({"loss_scale": 0}, ValueError, r"loss_scale=0 is out of range.*Fix: pass loss_scale='dynamic'"),
    ({"loss_scale": float("inf")}, ValueError, r"loss_scale=inf is out of range"),
    ({"loss_scale": float("nan")}, ValueError, r"loss_scale=nan is out of range"),
    ({"loss_scale": 1e-45}, ValueError, r"loss_scale=1e-45 is out of range.*2\*\*-24"),
    ({"loss_scale": -128.0}, ValueError, r"loss_scale=-128.0 is out of range"),
    ({"loss_scale": "Dynamic"}, TypeError, r"loss_scale='Dynamic' is not a number.*or 'dynamic'"),
    ({"loss_scale": True}, TypeError, r"loss_scale=True is not a number"),
    ({"max_loss_scale": 0}, ValueError, r"max_loss_scale=0 is out of range"),
    ({"max_loss_scale": float("nan")}, ValueError, r"max_loss_scale=nan is out of range"),
    ({"min_loss_scale": 0}, ValueError, r"min_loss_scale=0 is out of range"),
    ({"min_loss_scale": "x"}, TypeError, r"min_loss_scale='x' is not a number"),
    ({"min_loss_scale": 2.0 ** 20, "max_loss_scale": 2.0 ** 10}, ValueError,
     r"min_loss_scale=1048576.0 is larger than max_loss_scale=1024.0"),
    ({"num_losses": 0}, ValueError, r"num_losses=0 must be at least 1"),
    ({"num_losses": -1}, ValueError, r"num_losses=-1 must be at least 1"),
    ({"num_losses": 2.0}, TypeError, r"num_losses=2.0 is not an integer"),
    ({"opt_level": "O2", "cast_model_type": torch.float64}, ValueError,
     r"cast_model_type=torch.float64 is not supported: .*needs no amp.*Fix: pass torch.float16"),
    ({"opt_level": "O2", "cast_model_type": torch.int8}, ValueError,
     r"cast_model_type=torch.int8 is not supported: integer weights cannot be trained"),
    ({"opt_level": "O3", "cast_model_type": "half"}, TypeError, r"cast_model_type='half' is not a torch dtype"),
])
def test_initialize_refuses_bad_scaling_and_casting_arguments(kw, error, message):
    model, opt = _pair()
    kw.setdefault("opt_level", "O1")
    with pytest.raises(error, match=message):
        amp.initialize(model, opt, verbosity=0, **kw)
    assert model.weight.dtype == torch.float32       # nothing was cast
    with pytest.raises(RuntimeError, match="amp.initialize"):
        with amp.scale_loss(model(torch.randn(1, 3)).sum(), opt):
            pass


def test_initialize_accepts_legal_scaling_arguments():
    for kw in ({"loss_scale": "128"}, {"loss_scale": 2.0 ** -24}, {"loss_scale": 2 ** 20},
               {"min_loss_scale": 1, "max_loss_scale": 1}, {"num_losses": 3},
               {"opt_level": "O2", "cast_model_type": torch.float32}):
        amp.reset()
        model, opt = _pair()
        kw = dict(kw)
        amp.initialize(model, opt, opt_level=kw.pop("opt_level", "O1"), verbosity=0, **kw)
    assert amp.properties()["cast_model_type"] is torch.float32
    amp.reset()
    amp.initialize(*_pair(), opt_level="O1", loss_scale="128", verbosity=0)
    assert amp.loss_scale() == 128.0                  # apex scripts pass argparse strings


def _o3_warnings(optimizer_factory, **kw):
    import warnings
    model = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3))
    opt = optimizer_factory(model.parameters())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        amp.initialize(model, opt, verbosity=0, **kw)
    return [w for w in caught if "smallest normal" in str(w.message)]


@pytest.mark.parametrize("factory,name", [
    (lambda ps: torch.optim.AdamW(ps), "AdamW"),
    (lambda ps: torch.optim.Adam(ps, eps=1e-6), "Adam"),
    (lambda ps: torch.optim.RMSprop(ps), "RMSprop"),
    (lambda ps: torch.optim.Adagrad(ps), "Adagrad"),
])
def test_o3_warns_once_about_an_eps_that_underflows_fp16(factory, name):
    found = _o3_warnings(factory, opt_level="O3")
    assert len(found) == 1
    message = str(found[0].message)
    assert f"{name} (param group 0)" in message and "eps=1e-4" in message
    assert "float16's smallest normal (6.1e-05)" in message
    assert found[0].filename == __file__


def test_o3_eps_warning_only_where_the_update_runs_in_a_type_it_underflows():
    assert _o3_warnings(lambda ps: torch.optim.AdamW(ps, eps=1e-4), opt_level="O3") == []
    amp.reset()
    assert _o3_warnings(lambda ps: torch.optim.SGD(ps, lr=0.1), opt_level="O3") == []
    amp.reset()
    assert _o3_warnings(lambda ps: torch.optim.AdamW(ps), opt_level="O2") == []       # fp32 masters
    amp.reset()
    assert _o3_warnings(lambda ps: torch.optim.AdamW(ps), opt_level="O1") == []
    amp.reset()
    assert _o3_warnings(lambda ps: torch.optim.AdamW(ps), opt_level="O3",            # bf16: fp32's range
                        cast_model_type=torch.bfloat16) == []
    amp.reset()
    found = _o3_warnings(lambda ps: torch.optim.AdamW(ps, eps=1e-39), opt_level="O3",
                         cast_model_type=torch.bfloat16)
    assert len(found) == 1 and "eps=1e-8" in str(found[0].message)
    amp.reset()
    assert len(_o3_warnings(lambda ps: torch.optim.AdamW(ps), opt_level="O2", master_weights=False)) == 1


def test_the_o3_eps_warning_is_right_about_fp16():
    # What it warns about really happens: default eps gives non-finite weights, 1e-4 does not.
    for eps, finite in ((1e-8, False), (1e-4, True)):
        amp.reset()
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, eps=eps, foreach=True)
        model, opt = amp.initialize(model, opt, opt_level="O3", verbosity=0)
        for _ in range(3):
            opt.zero_grad()
            with amp.scale_loss(model(torch.randn(8, 16) * 1e-3).float().pow(2).mean(), opt) as s:
                s.backward()
            opt.step()
        assert all(torch.isfinite(p).all() for p in model.parameters()) is finite


@pytest.mark.parametrize("level", ["O0", "O1", "O2", "O3"])
def test_step_refused_when_the_model_no_longer_holds_the_optimizers_parameters(level):
    """Replacing a parameter after initialize (what fully_shard and load_state_dict(assign=True)
    do): the optimizer would keep updating the old tensor and train nothing, silently."""
    from amplint import amp

    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt = amp.initialize(model, opt, opt_level=level, verbosity=0)
    loss = model(torch.randn(3, 4)).float().sum()
    with amp.scale_loss(loss, opt) as scaled:
        scaled.backward()
    opt.step()                                          # bound: fine
    model[0].weight = nn.Parameter(model[0].weight.detach().clone())
    loss = model(torch.randn(3, 4)).float().sum()
    with amp.scale_loss(loss, opt) as scaled:
        scaled.backward()
    with pytest.raises(RuntimeError, match=r"model parameter '0\.weight' is no longer the tensor "
                                           r"this SGD updates .* Fix: shard or replace"):
        opt.step()
