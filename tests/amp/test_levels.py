"""O0-O3 properties, model casting, O2 master weights, bf16, keep_fp32_modules, overrides."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from amplint import amp


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.bn = nn.BatchNorm1d(8)
        self.ln = nn.LayerNorm(8)
        self.sm = nn.Softmax(dim=-1)
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x):
        h = self.ln(self.bn(self.fc1(x)))
        return self.fc2(h), self.sm(h)


def _init(level, **kw):
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    kw.setdefault("verbosity", 0)
    return amp.initialize(model, opt, opt_level=level, **kw)


EXPECTED = {  # apex's preset table
    "O0": dict(cast_model_type=torch.float32, patch_torch_functions=False,
               keep_batchnorm_fp32=None, master_weights=False, loss_scale=1.0),
    "O1": dict(cast_model_type=None, patch_torch_functions=True, keep_batchnorm_fp32=None,
               master_weights=None, loss_scale="dynamic"),
    "O2": dict(cast_model_type=torch.float16, patch_torch_functions=False,
               keep_batchnorm_fp32=True, master_weights=True, loss_scale="dynamic"),
    "O3": dict(cast_model_type=torch.float16, patch_torch_functions=False,
               keep_batchnorm_fp32=False, master_weights=False, loss_scale=1.0),
}


@pytest.mark.parametrize("level", list(EXPECTED))
def test_presets_and_model_dtypes(level):
    model, opt = _init(level)
    props = amp.properties()
    for k, v in EXPECTED[level].items():
        assert props[k] == v, k
    low = level in ("O2", "O3")
    assert model.fc1.weight.dtype == (torch.float16 if low else torch.float32)
    assert model.bn.weight.dtype == (torch.float16 if level == "O3" else torch.float32)
    assert model.bn.running_mean.dtype == (torch.float16 if level == "O3" else torch.float32)
    out, probs = model(torch.randn(5, 4))
    assert out.dtype == (torch.float16 if level == "O1" else torch.float32)
    assert all(v.dtype == torch.float32 for v in model.state_dict().values() if v.is_floating_point())
    if level == "O2":
        masters = list(amp.master_params(opt))
        assert all(m.dtype == torch.float32 for m in masters)
        assert not any(m is p for m in masters for p in model.parameters() if p.dtype == torch.float16)


def test_o2_step_updates_fp32_masters_then_copies_to_half_model():
    model, opt = _init("O2")
    x = torch.randn(5, 4)
    with amp.scale_loss(model(x)[0].pow(2).mean(), opt) as s:
        s.backward()
    masters = list(amp.master_params(opt))
    assert all(m.grad is None or m.grad.dtype == torch.float32 for m in masters)
    torch.nn.utils.clip_grad_norm_(amp.master_params(opt), 1.0)
    opt.step()
    assert torch.equal(model.fc1.weight, opt.param_groups[0]["params"][0].half())
    assert opt.state[masters[0]]["exp_avg"].dtype == torch.float32


def test_o2_master_weights_start_from_the_unrounded_fp32_weights():
    torch.manual_seed(0)
    model = nn.Linear(3, 3)
    w = model.weight.detach().clone()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt = amp.initialize(model, opt, opt_level="O2", verbosity=0)
    assert torch.equal(opt.param_groups[0]["params"][0], w)


def test_o2_picks_up_weights_loaded_into_the_model_after_initialize():
    model, opt = _init("O2")
    new = {k: torch.full_like(v, 0.5) if k == "fc1.weight" else v
           for k, v in model.state_dict().items()}
    model.load_state_dict(new)          # e.g. fine-tuning from pretrained weights
    with amp.scale_loss(model(torch.randn(5, 4))[0].mean() * 0, opt) as s:
        s.backward()
    opt.step()
    torch.testing.assert_close(model.fc1.weight.float(), torch.full((8, 4), 0.5), atol=1e-2, rtol=0)


def test_keep_fp32_modules_runs_them_in_fp32_and_returns_half():
    model, opt = _init("O2", keep_fp32_modules=(nn.LayerNorm, nn.Softmax))
    assert model.ln.weight.dtype == torch.float32 and model.fc2.weight.dtype == torch.float16
    seen = {}
    model.ln.register_forward_pre_hook(lambda m, a: seen.update(ln_in=a[0].dtype))
    model.ln.register_forward_hook(lambda m, a, o: seen.update(ln_out=o.dtype))
    out, probs = model(torch.randn(5, 4))
    assert out.dtype == torch.float32
    assert seen["ln_in"] == torch.float32       # computed in fp32 ...
    assert seen["ln_out"] == torch.float16      # ... and handed back as half to fc2
    amp.reset()
    model, opt = _init("O2", keep_fp32_modules=("LayerNorm",))
    assert model.ln.weight.dtype == torch.float32 and model(torch.randn(5, 4))[0].isfinite().all()
    with pytest.raises(RuntimeError, match="keep_fp32_modules only applies"):
        _init("O1", keep_fp32_modules=(nn.LayerNorm,))


@pytest.mark.parametrize("level", ["O2", "O3"])
def test_bf16_cast_model_type(level):
    model, opt = _init(level, cast_model_type=torch.bfloat16)
    assert model.fc1.weight.dtype == torch.bfloat16
    assert amp.properties()["half_dtype"] == torch.bfloat16
    out, _ = model(torch.randn(5, 4))
    with amp.scale_loss(out.pow(2).mean(), opt) as s:
        s.backward()
    opt.step()
    assert model.fc1.weight.dtype == torch.bfloat16


def test_override_validation_matches_apex():
    with pytest.raises(RuntimeError, match="master_weights with O1"):
        _init("O1", master_weights=False)
    with pytest.raises(RuntimeError, match="half_dtype=torch.bfloat16"):
        _init("O1", cast_model_type=torch.bfloat16)
    with pytest.raises(RuntimeError, match="keep_batchnorm_fp32 should be None"):
        _init("O1", keep_batchnorm_fp32=True)
    with pytest.raises(RuntimeError, match="patch_torch_functions=True should only"):
        _init("O2", patch_torch_functions=True)
    with pytest.raises(AssertionError, match="keep_batchnorm_fp32 must be a boolean"):
        _init("O2", keep_batchnorm_fp32="yes")
    model, opt = _init("O3", keep_batchnorm_fp32="True", loss_scale="128")
    assert model.bn.weight.dtype == torch.float32 and amp.loss_scale() == 128.0


def test_return_shapes_mirror_inputs():
    m1, m2 = nn.Linear(2, 2), nn.Linear(2, 2)
    o1 = torch.optim.SGD(m1.parameters(), lr=0.1)
    o2 = torch.optim.SGD(m2.parameters(), lr=0.1)
    ms, os_ = amp.initialize([m1, m2], [o1, o2], opt_level="O1", verbosity=0)
    assert isinstance(ms, list) and isinstance(os_, list) and ms[0] is m1 and os_[1] is o2
    amp.reset()
    m3 = nn.Linear(2, 2)
    assert amp.initialize(m3, opt_level="O2", verbosity=0) is m3
    m4 = nn.Linear(2, 2)
    o4 = torch.optim.SGD(m4.parameters(), lr=0.1)
    assert amp.initialize(m4, o4, enabled=False, verbosity=0) == (m4, o4)
    loss = m4(torch.randn(1, 2)).sum()
    with amp.scale_loss(loss, o4) as s:
        assert s is loss


def test_cast_model_outputs_and_verbosity_banner(capsys):
    model, opt = _init("O2", cast_model_outputs=torch.float16, verbosity=1)
    out, _ = model(torch.randn(5, 4))
    assert out.dtype == torch.float16
    text = capsys.readouterr().out
    assert "Selected optimization level O2" in text and "master_weights" in text


def test_all_levels_one_after_another_in_one_process_like_the_verifier():
    import warnings
    trajectory = {}
    for level in ["O0", "O1", "O2", "O3", "O1", "O2"]:
        model, opt = _init(level)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
        scales = []
        with warnings.catch_warnings():
            warnings.simplefilter("error")           # e.g. lr_scheduler's step-order warning
            for i in range(3):
                out, _ = model(torch.randn(5, 4))
                opt.zero_grad()
                with amp.scale_loss(F.mse_loss(out.float(), torch.zeros_like(out.float())), opt) as s:
                    s.backward()
                opt.step()
                sched.step()
                scales.append(amp.loss_scale())
        trajectory[level] = (scales, amp.skipped_steps())
        assert (getattr(F.softmax, "_amplint_kind", None) == "float") == (level == "O1")
        amp.reset()
    assert trajectory["O0"] == ([1.0] * 3, 0) and trajectory["O2"][0] == [65536.0] * 3
    assert not hasattr(F.softmax, "_amplint_kind")
