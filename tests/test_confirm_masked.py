"""bench/realcode/confirm_masked.py on toy distributions written here (no third-party code).

The harness must see an all ``-inf`` softmax row and the NaN it spreads, must tell a finite
fill (uniform row, no NaN) from it, and must say "not run" when a module cannot import.
"""
import os
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench", "realcode")
sys.path.insert(0, BENCH)
import confirm_masked as cm  # noqa: E402

ATTENTION = '''
import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self, dim, fill):
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)
        self.fill = fill

    def forward(self, x, pair_mask):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        scores = q @ k.transpose(-1, -2)
        scores = scores.masked_fill(~pair_mask, self.fill)
        return scores.softmax(dim=-1) @ v
'''


@pytest.fixture
def toy(tmp_path, monkeypatch):
    pkg = tmp_path / "toy==1.0" / "toy"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise ImportError('a package __init__ the harness skips')\n")
    (pkg / "attn.py").write_text(textwrap.dedent(ATTENTION))
    monkeypatch.setattr(cm.fetch, "SRC", str(tmp_path))
    yield
    for name in [m for m in sys.modules if m == "toy" or m.startswith("toy.")]:
        del sys.modules[name]


def two_layers(fill):
    def build(mod, dtype):
        layers = cm.stacked(mod.Attention(8, fill), mod.Attention(8, fill)).to(dtype)
        x = cm.padded(8, dtype)

        def run():
            h = x
            for layer in layers:
                h = layer(h, cm.pair_mask())
            return h
        return cm.Trial(run, cm.real_mask(), layers)
    return build


def test_inf_pair_mask_is_confirmed_and_its_nan_spreads(toy):
    case = cm.Case("toy==1.0", "toy.attn", two_layers(float("-inf")), "toy")
    outs = [cm.run_case(case, name) for name in cm.DTYPES]
    assert all(o.ran and o.inf_rows == 2 * 2 and o.nan_softmax and o.nan_real and o.nan_grad for o in outs)
    assert cm.verdict(outs).startswith("all-masked rows confirmed")


def test_finite_fill_is_a_uniform_row_not_nan(toy):
    case = cm.Case("toy==1.0", "toy.attn", two_layers(-1e4), "toy")
    outs = [cm.run_case(case, name) for name in cm.DTYPES]
    assert all(o.ran and o.inf_rows == 0 and o.filled_rows == 4 and not o.nan_real for o in outs)
    assert "finite fill" in cm.verdict(outs)


def test_an_empty_item_is_told_apart_from_the_other_items(toy):
    # a key mask on items of 0, 3 and 5 tokens: only item 0 (no real key) gets all -inf rows;
    # its NaN stays in its own (padded) outputs but reaches the shared parameters' gradients
    sizes = cm.EMPTY_SIZES

    def build(mod, dtype):
        att = mod.Attention(8, float("-inf")).to(dtype)
        x = cm.padded(8, dtype, sizes)
        keys = cm.real_mask(sizes)[:, None, :].expand(-1, max(sizes), -1)
        return cm.Trial(lambda: att(x, keys), cm.real_mask(sizes), att, empty_items=(0,))
    outs = [cm.run_case(cm.Case("toy==1.0", "toy.attn", build, "toy"), name) for name in cm.DTYPES]
    assert all(o.inf_rows == 5 and o.empty_items == 1 and o.nan_padded and not o.nan_real
               and not o.nan_other_items and o.nan_grad for o in outs)
    assert "NaN not in the other items" in cm.verdict(outs)
    assert "padded positions and gradients" in cm.verdict(outs)


def test_a_module_that_cannot_import_is_not_run(toy):
    case = cm.Case("toy==1.0", "toy.missing", two_layers(-1e4), "toy")
    out = cm.run_case(case, "fp32")
    assert not out.ran and out.error.startswith("import: ModuleNotFoundError")
    assert cm.verdict([out]) == "not run"
