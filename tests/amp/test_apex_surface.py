"""The apex surface training scripts touch beyond the documented API (``_amp_state``,
``amp.init``, ``allow_incoming_model_not_fp32``, ``allow_banned``), loss-scale hysteresis, and
the optimizer stage GradScaler-style checks. Also through the command line: a script written
for apex's internals runs under ``python`` with only its import changed."""
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from amplint import amp

H = torch.float16


def _pair(level="O2", **kw):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return amp.initialize(model, opt, opt_level=level, verbosity=0, **kw)


def _train_step(model, opt, inf=False, loss_id=0):
    opt.zero_grad()
    with amp.scale_loss(model(torch.randn(3, 4)).float().mean(), opt, loss_id=loss_id) as s:
        s.backward()
        if inf:
            next(model.parameters()).grad.view(-1)[0] = float("inf")
    opt.step()


# -- _amp_state: a view over the engine ------------------------------------------------------

def test_loss_scaler_reads_and_writes_go_to_the_engine():
    from amplint.amp import _amp_state

    model, opt = _pair(num_losses=2)
    scalers = _amp_state.loss_scalers
    assert len(scalers) == 2 and scalers[1].loss_scale() == 65536.0 == scalers[1]._loss_scale
    scalers[0]._loss_scale = 2 ** 20          # what BERT fine-tuning scripts do
    assert amp.loss_scale(0) == 2 ** 20 and amp.state_dict()["loss_scaler0"]["loss_scale"] == 2 ** 20
    _train_step(model, opt, inf=True)
    assert _amp_state.loss_scalers[0].loss_scale() == 2 ** 19 and scalers[0]._unskipped == 0
    assert scalers[0].dynamic and scalers[0]._max_loss_scale == 2 ** 24
    with pytest.raises(ValueError, match="outside this run's"):
        scalers[0]._loss_scale = 2 ** 30
    with pytest.raises(ValueError, match="out of range"):
        scalers[0]._loss_scale = 0


def test_opt_properties_handle_and_import_paths():
    from amplint.amp import _amp_state
    from amplint.amp._amp_state import _amp_state as same, master_params

    assert same is _amp_state is amp._amp_state
    assert _amp_state.opt_properties.enabled is False          # before initialize
    model, opt = _pair("O2")
    props = _amp_state.opt_properties
    assert props.master_weights is True and props.patch_torch_functions is False
    assert props.options["cast_model_type"] is H and props.opt_level == "O2"
    assert list(master_params(opt)) == list(amp.master_params(opt))
    with pytest.raises(AttributeError, match="read-only"):
        props.loss_scale = 128.0
    with pytest.raises(AttributeError, match="not part of amplint's apex compatibility view"):
        _amp_state.hard_override
    with pytest.raises(AttributeError, match="cannot be set"):
        _amp_state.loss_scalers = []
    _amp_state.handle._deactivate()                            # = amp.reset()
    assert amp.properties() == {}


def test_amp_init_is_o1_casting_without_a_model():
    handle = amp.init(loss_scale=128.0)
    assert handle.is_active() and amp.loss_scale() == 128.0
    assert F.linear(torch.randn(2, 3), torch.randn(4, 3)).dtype == H
    with pytest.raises(NotImplementedError):
        F.binary_cross_entropy(torch.rand(2, dtype=H), torch.rand(2, dtype=H))
    handle._deactivate()
    assert not handle.is_active()
    amp.init(allow_banned=True, enable_caching=False)
    p = torch.rand(2, dtype=H)
    assert F.binary_cross_entropy(p, p).dtype == torch.float32
    w = nn.Parameter(torch.randn(4, 3))
    F.linear(torch.randn(2, 3), w)
    from amplint.amp._casting import CASTS
    assert not CASTS.cache                                     # caching off


class _Mixed(nn.Module):
    """A model that keeps one parameter in half on purpose (apex's tests use such)."""

    def __init__(self):
        super().__init__()
        self.w16 = nn.Parameter(torch.randn(4).half())
        self.w32 = nn.Parameter(torch.randn(4))

    def forward(self, x):
        return x * self.w16 + x * self.w32     # fp32 wins the promotion


@pytest.mark.parametrize("how", ["keyword", "amp_state"])
def test_allow_incoming_model_not_fp32_gives_half_parameters_fp32_masters(how):
    torch.manual_seed(0)
    model = _Mixed()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(RuntimeError, match="allow_incoming_model_not_fp32=True"):
        amp.initialize(model, opt, opt_level="O2", cast_model_type=False, verbosity=0)
    kw = {}
    if how == "keyword":
        kw["allow_incoming_model_not_fp32"] = True
    else:
        amp._amp_state.allow_incoming_model_not_fp32 = True
    try:
        model, opt = amp.initialize(model, opt, opt_level="O2", cast_model_type=False,
                                    verbosity=0, **kw)
    finally:
        amp._amp_state.allow_incoming_model_not_fp32 = False
    assert [p.dtype for p in amp.master_params(opt)] == [torch.float32, torch.float32]
    assert model.w16.dtype == H and model.w32.dtype == torch.float32
    w0 = model.w16.detach().clone()
    opt.zero_grad()
    with amp.scale_loss(model(torch.randn(2, 4)).float().mean(), opt) as s:
        s.backward()
    opt.step()
    assert not torch.equal(w0, model.w16)
    assert torch.equal(model.w16, next(amp.master_params(opt)).to(H))


# -- hysteresis ---------------------------------------------------------------------------------

def test_hysteresis_cuts_the_scale_only_after_consecutive_overflows_and_checkpoints():
    model, opt = _pair("O1", hysteresis=3)
    scale0 = amp.loss_scale()
    for _ in range(2):
        _train_step(model, opt, inf=True)
    assert amp.loss_scale() == scale0 and amp.skipped_steps() == 2   # skipped, not cut yet
    _train_step(model, opt)                                          # a clean step refills
    for _ in range(3):
        _train_step(model, opt, inf=True)
    assert amp.loss_scale() == scale0 / 2
    _train_step(model, opt, inf=True)                                # still in the run: cut again
    assert amp.loss_scale() == scale0 / 4
    saved = amp.state_dict()
    assert saved["loss_scaler0"]["hysteresis_left"] == 0
    amp.load_state_dict(saved)
    with pytest.raises(RuntimeError, match="hysteresis_left=7"):
        amp.load_state_dict({"loss_scaler0": dict(saved["loss_scaler0"], hysteresis_left=7)})
    amp.reset()
    _pair("O1")
    assert "hysteresis_left" not in amp.state_dict()["loss_scaler0"]   # apex's format
    with pytest.raises(ValueError, match="hysteresis=0"):
        _pair("O1", hysteresis=0)


# -- the optimizer stage ---------------------------------------------------------------------------

@pytest.mark.parametrize("level", ["O0", "O1", "O2"])
def test_second_step_without_new_gradients_is_refused(level):
    model, opt = _pair(level)
    _train_step(model, opt)
    with pytest.raises(RuntimeError, match=r"step\(\) has already been called"):
        opt.step()
    opt.zero_grad()
    opt.step()                      # after zero_grad: allowed (nothing to apply)
    _train_step(model, opt)         # the normal loop goes on


def test_step_with_scaled_gradients_is_refused():
    model, opt = _pair("O1")
    with pytest.raises(RuntimeError, match="still scaled"):
        with amp.scale_loss(model(torch.randn(3, 4)).float().mean(), opt) as s:
            s.backward()
            opt.step()
    opt.zero_grad()
    with amp.scale_loss(model(torch.randn(3, 4)).float().mean(), opt, delay_unscale=True) as s:
        s.backward()
    with pytest.raises(RuntimeError, match="delay_unscale=True"):
        opt.step()
    with amp.scale_loss(model(torch.randn(3, 4)).float().mean(), opt) as s:
        s.backward()
    opt.step()                       # the last block without delay_unscale unscaled them


@pytest.mark.parametrize("level", ["O1", "O2"])
def test_backward_outside_scale_loss_is_refused(level):
    model, opt = _pair(level)
    opt.zero_grad()
    model(torch.randn(3, 4)).float().mean().backward()
    with pytest.raises(RuntimeError, match="outside `with amp.scale_loss"):
        opt.step()
    opt.zero_grad(set_to_none=False)   # zeroed gradients are a fresh baseline
    opt.step()


def test_apex_internals_script_runs_from_the_command_line(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import torch, torch.nn as nn
        from amplint import amp                      # was: from apex import amp
        model = nn.Linear(4, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        model, opt = amp.initialize(model, opt, opt_level="O1", verbosity=0)
        amp._amp_state.loss_scalers[0]._loss_scale = 2 ** 10
        for step in range(3):
            opt.zero_grad()
            with amp.scale_loss(model(torch.randn(8, 4)).float().mean(), opt) as scaled:
                scaled.backward()
            opt.step()
            print("step", step, "scale", amp._amp_state.loss_scalers[0].loss_scale())
    """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "step 2 scale 1024.0"
