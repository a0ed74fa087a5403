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


def test_o2_add_param_group_and_closure():
    model, opt = _pair()
    model, opt = amp.initialize(model, opt, opt_level="O2", verbosity=0)
    with pytest.raises(RuntimeError, match="add every parameter group before"):
        opt.add_param_group({"params": [nn.Parameter(torch.zeros(2))]})
    with pytest.raises(RuntimeError, match="closure"):
        opt.step(lambda: 0.0)
