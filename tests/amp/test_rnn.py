"""O1 runs recurrent layers and cells in half with fp32 weights (apex patched ``_VF``; CUDA
autocast casts them too): dtypes, gradients against an fp32 copy, packed sequences, models
whose half front end feeds an RNN, and the cuDNN flat-weight buffer on CUDA."""
import copy
import warnings

import pytest
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence

from amplint import amp
from amplint.amp import policy

LAYERS = [
    (nn.RNN, {}), (nn.RNN, dict(nonlinearity="relu", num_layers=2)),
    (nn.GRU, dict(num_layers=2, bidirectional=True)), (nn.GRU, dict(bias=False)),
    (nn.LSTM, {}), (nn.LSTM, dict(num_layers=2, bidirectional=True, batch_first=True)),
    (nn.LSTM, dict(proj_size=3, num_layers=2)),
]


def _max_rel(a_params, b_params):
    return max(((a.grad.float() - b.grad).abs().max() / b.grad.abs().max().clamp_min(1e-6)).item()
               for a, b in zip(a_params, b_params))


@pytest.mark.parametrize("cls,kw", LAYERS, ids=lambda v: getattr(v, "__name__", None) or str(v))
def test_layer_runs_in_half_with_fp32_weights_and_fp32_gradients(cls, kw):
    torch.manual_seed(0)
    model = cls(4, 8, **kw)
    ref = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt = amp.initialize(model, opt, opt_level="O1", loss_scale=128.0, verbosity=0)
    x = torch.randn(5, 3, 4)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "LSTM with projections")  # oneDNN note, CPU only
        out, hidden = model(x)
        assert out.dtype == torch.float16
        for h in (hidden if isinstance(hidden, tuple) else (hidden,)):
            assert h.dtype == torch.float16
        with amp.scale_loss(out.float().pow(2).sum(), opt) as scaled:
            scaled.backward()
        assert all(p.dtype == torch.float32 and p.grad.dtype == torch.float32
                   for p in model.parameters())
        amp.reset()
        r, _ = ref(x)
        r.pow(2).sum().backward()
    assert _max_rel(model.parameters(), ref.parameters()) < 1e-2


@pytest.mark.parametrize("cls", [nn.RNNCell, nn.GRUCell, nn.LSTMCell])
def test_cells_run_in_half_for_fp32_and_half_inputs(cls):
    torch.manual_seed(0)
    cell = cls(4, 8)
    ref = copy.deepcopy(cell)
    amp.initialize(cell, opt_level="O1", verbosity=0)
    for dtype in (torch.float32, torch.float16):
        x = torch.randn(3, 4, dtype=dtype)
        out = cell(x)
        outs = out if isinstance(out, tuple) else (out,)
        assert all(o.dtype == torch.float16 for o in outs)
    # three steps through the cast cache (weights cast once), gradient against fp32
    x = torch.randn(3, 4)
    state = None
    for _ in range(3):
        state = cell(x, state)
    (state[0] if isinstance(state, tuple) else state).float().sum().backward()
    amp.reset()
    state = None
    for _ in range(3):
        state = ref(x, state)
    (state[0] if isinstance(state, tuple) else state).sum().backward()
    assert _max_rel(cell.parameters(), ref.parameters()) < 1e-2


def test_packed_sequence_and_given_fp32_hidden_state():
    torch.manual_seed(0)
    lstm = nn.LSTM(4, 8, num_layers=2, bidirectional=True)
    amp.initialize(lstm, opt_level="O1", verbosity=0)
    x = torch.randn(6, 3, 4)
    packed = pack_padded_sequence(x, [6, 4, 2])
    out, (h, c) = lstm(packed)
    assert out.data.dtype == h.dtype == c.dtype == torch.float16
    h0 = torch.zeros(4, 3, 8)  # fp32, as a user would build it
    out, _ = lstm(x, (h0, h0.clone()))
    assert out.dtype == torch.float16
    gru = nn.GRU(4, 8)
    assert gru(pack_padded_sequence(x, [6, 5, 1]))[0].data.dtype == torch.float16


class ConvLSTM(nn.Module):
    """The CRNN layout of OCR and speech models: a half conv feeding an LSTM."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(3, 16, 3, padding=1)
        self.rnn = nn.LSTM(16, 16, bidirectional=True)
        self.head = nn.Linear(32, 5)

    def forward(self, x):                         # x: (batch, 3, time)
        feats = torch.relu(self.conv(x)).permute(2, 0, 1)   # (time, batch, 16), half
        out, _ = self.rnn(feats)
        return self.head(out)


class LinearLSTMCell(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(6, 16)
        self.cell = nn.LSTMCell(16, 16)
        self.out = nn.Linear(16, 2)

    def forward(self, x):                          # x: (time, batch, 6)
        state = None
        for step in x:
            state = self.cell(self.inp(step), state)
        return self.out(state[0])


@pytest.mark.parametrize("make,shape", [(ConvLSTM, (4, 3, 12)), (LinearLSTMCell, (5, 4, 6))],
                         ids=["conv-lstm", "linear-lstmcell"])
def test_half_front_end_feeding_an_rnn_trains_at_o1(make, shape):
    torch.manual_seed(0)
    model = make()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    model, opt = amp.initialize(model, opt, opt_level="O1", verbosity=0)
    x = torch.randn(*shape)
    losses = []
    for _ in range(8):
        out = model(x)
        assert out.dtype == torch.float16
        loss = out.float().pow(2).mean()
        opt.zero_grad()
        with amp.scale_loss(loss, opt) as scaled:
            scaled.backward()
        opt.step()
        losses.append(loss.item())
    assert amp.skipped_steps() == 0
    assert losses[-1] < 0.7 * losses[0], losses


def test_o1_bf16_and_reset_restores_torch():
    from torch import _VF

    orig_lstm = _VF.lstm
    orig_check = nn.RNNBase.check_input
    lstm = nn.LSTM(4, 8)
    amp.initialize(lstm, opt_level="O1", half_dtype=torch.bfloat16, verbosity=0)
    assert lstm(torch.randn(3, 2, 4))[0].dtype == torch.bfloat16
    amp.reset()
    assert _VF.lstm is orig_lstm and nn.RNNBase.check_input is orig_check
    with pytest.raises(ValueError, match="does not match weight dtype"):
        lstm(torch.randn(3, 2, 4, dtype=torch.float16))   # torch's own check is back


def test_policy_table_covers_rnn_modules():
    for name in ("torch.nn.LSTM", "nn.GRU", "torch.nn.RNN", "nn.LSTMCell", "nn.GRUCell",
                 "nn.RNNCell"):
        assert policy.cast_of(name) == policy.HALF, name
        assert policy.cast_of(name, "torch", "cuda") == policy.HALF, name
    assert "RNN" not in policy.APEX_DIFFERENCES["not cast"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the cuDNN flat buffer needs CUDA")
@pytest.mark.parametrize("half", [torch.float16, torch.bfloat16])
def test_cuda_layers_use_one_flat_half_buffer_without_warnings(half):
    torch.manual_seed(0)
    lstm = nn.LSTM(16, 32, num_layers=2, bidirectional=True, proj_size=8).cuda()
    ref = copy.deepcopy(lstm)
    opt = torch.optim.SGD(lstm.parameters(), lr=0.1)
    lstm, opt = amp.initialize(lstm, opt, opt_level="O1", half_dtype=half, verbosity=0,
                               loss_scale=128.0 if half is torch.float16 else None)
    x = torch.randn(7, 3, 16, device="cuda")
    with warnings.catch_warnings():
        warnings.simplefilter("error")             # "not part of single contiguous chunk"
        for _ in range(2):
            out, _ = lstm(x)
            assert out.dtype == half
            with amp.scale_loss(out.float().pow(2).sum(), opt) as scaled:
                scaled.backward()
        from amplint.amp._casting import CASTS
        assert [v for v in CASTS.rnn_layouts.values() if v is not None]   # cuDNN's layout used
        views = lstm._flat_weights
        amp.reset()
    r, _ = ref(x)
    (r.pow(2).sum() * 2).backward()
    assert _max_rel(lstm.parameters(), ref.parameters()) < (1e-2 if half is torch.float16 else 5e-2)
    assert all(v.dtype == torch.float32 for v in views)   # the module itself keeps fp32
