"""The seed's apex usage (shared/seed, Chinese notes), verbatim after `from apex import amp` ->
`from amplint import amp` and with `.cuda()` removed (CI has no GPU)."""
import pytest
import torch
from torch.nn.utils import clip_grad_norm_

from amplint import amp

D_in, D_out = 16, 4


def _data(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(8, D_in, generator=g), torch.randn(8, D_out, generator=g)


@pytest.mark.filterwarnings("ignore:amplint.amp O2")  # O2 + clipping model.parameters(): warned
@pytest.mark.parametrize("level", ["O1", "O0", "O2", "O3"])
def test_seed_checkpoint_recipe(level, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # --- seed code starts (only `opt_level = 'O1'` is parametrised) ---
    # Declare model and optimizer as usual, with default (FP32) precision
    model = torch.nn.Linear(D_in, D_out)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    # Initialization

    opt_level = level
    model, optimizer = amp.initialize(model, optimizer, opt_level=opt_level)

    # Train your model
    for step in range(3):
        x, y = _data(step)
        loss = torch.nn.functional.mse_loss(model(x).float(), y)
        optimizer.zero_grad()
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        clip_grad_norm_(model.parameters(), 50) # 梯度裁剪
        optimizer.step()

    # Save checkpoint
    checkpoint = {
        'model': model.state_dict(),
        'optimizer': optimizer.state_dict(),
        'amp': amp.state_dict()
    }
    torch.save(checkpoint, 'amp_checkpoint.pt')
    saved_weight = model.weight.detach().clone()

    # Restore
    model = torch.nn.Linear(D_in, D_out)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    checkpoint = torch.load('amp_checkpoint.pt')

    model, optimizer = amp.initialize(model, optimizer, opt_level=opt_level)
    model.load_state_dict(checkpoint['model'])
    optimizer.load_state_dict(checkpoint['optimizer'])
    amp.load_state_dict(checkpoint['amp'])

    # Continue training
    assert torch.equal(model.weight, saved_weight)
    x, y = _data(3)
    loss = torch.nn.functional.mse_loss(model(x).float(), y)
    optimizer.zero_grad()
    with amp.scale_loss(loss, optimizer) as scaled_loss:
        scaled_loss.backward()
    clip_grad_norm_(model.parameters(), 50)
    optimizer.step()
    assert torch.isfinite(model.weight).all() and not torch.equal(model.weight, saved_weight)


def test_seed_quick_start_and_registrations():
    # 某些不常用的函数，在使用前需要注册 (register before use), and einsum per slayton58
    amp.register_float_function(torch, 'sigmoid')
    amp.register_half_function(torch, 'einsum')
    try:
        model = torch.nn.Linear(D_in, D_out)
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
        model, optimizer = amp.initialize(model, optimizer, opt_level="O1") # 这里是“欧一”，不是“零一”
        x, y = _data(0)
        out = model(x)
        assert torch.sigmoid(out).dtype == torch.float32
        assert torch.einsum("bi,oi->bo", x, model.weight).dtype == torch.float16
        loss = torch.nn.functional.mse_loss(torch.sigmoid(out), y)
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        optimizer.step()
        assert model.weight.grad.dtype == torch.float32
    finally:
        from amplint.amp._casting import CASTS
        CASTS.registry.clear()
