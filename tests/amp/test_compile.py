"""torch.compile: O1 and O2 trace a GPT-like model into one graph (no graph breaks) whose only
output is the loss, and a compiled training step matches the eager one."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

torch_dynamo = pytest.importorskip("torch._dynamo")


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.fc2(F.gelu(self.fc(self.ln2(x))))


class TinyGPT(nn.Module):
    """bench/amp_gpt2.py's model, tiny: tied embeddings, SDPA, LayerNorm, GELU."""

    def __init__(self, vocab=64, seq=16, d=32, layers=2, heads=4):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.wte.weight

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln_f(x))


def _data():
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, 64, (2, 17), generator=g)
    return idx[:, :-1], idx[:, 1:]


def _loss(model, x, y):
    logits = model(x)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def _initialized(level, half, **extra):
    from amplint import amp

    torch.manual_seed(0)
    model = TinyGPT()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    kw = {"half_dtype": half} if level == "O1" else {"cast_model_type": half}
    return amp.initialize(model, opt, opt_level=level, verbosity=0, **kw, **extra)


@pytest.mark.parametrize("level,half", [("O1", torch.float16), ("O2", torch.float16),
                                        ("O1", torch.bfloat16), ("O2", torch.bfloat16)])
def test_forward_and_loss_trace_into_one_graph(level, half):
    model, _ = _initialized(level, half)
    torch_dynamo.reset()
    x, y = _data()
    explained = torch_dynamo.explain(lambda a, b: _loss(model, a, b))(x, y)
    assert explained.graph_break_count == 0, [str(b.reason) for b in explained.break_reasons]
    assert explained.graph_count == 1
    # The loss is the graph's only output: O1's weight casts must not leak out of the graph
    # through the eager weight-cast cache (they did: one extra output per weight, each half
    # weight materialised and kept alive until the scale_loss exit).
    (graph,) = explained.graphs
    outputs = next(n for n in graph.graph.nodes if n.op == "output").args[0]
    assert len(outputs) == 1


def test_kept_fp32_modules_trace_without_breaks():
    model, _ = _initialized("O2", torch.bfloat16, keep_fp32_modules=(nn.LayerNorm,))
    torch_dynamo.reset()
    x, y = _data()
    explained = torch_dynamo.explain(lambda a, b: _loss(model, a, b))(x, y)
    assert explained.graph_break_count == 0, [str(b.reason) for b in explained.break_reasons]


@pytest.mark.parametrize("level", ["O1", "O2"])
def test_compiled_training_steps_match_eager(level):
    """Three fp16 steps (dynamic loss scale, overflow check, master weights at O2) with the
    model compiled (AOT autograd, so the backward graph is traced too) give the eager losses."""
    from amplint import amp

    x, y = _data()
    losses = {}
    for compiled in (False, True):
        amp.reset()
        torch_dynamo.reset()
        model, opt = _initialized(level, torch.float16)
        run = torch.compile(model, backend="aot_eager") if compiled else model
        losses[compiled] = []
        for _ in range(3):
            loss = _loss(run, x, y)
            opt.zero_grad()
            with amp.scale_loss(loss, opt) as scaled:
                scaled.backward()
            opt.step()
            losses[compiled].append(loss.item())
    assert losses[True] == pytest.approx(losses[False], rel=1e-3)
    assert losses[True][2] < losses[True][0]   # it trains
