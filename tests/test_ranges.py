"""Unit tests of the value-range facts (amplint.ranges.MagnitudeBounds, ``ctx.magnitude_bound``)."""
from __future__ import annotations

import ast
import textwrap

from amplint.config import Settings
from amplint.context import FileContext
from amplint.engine import parse


def bounds(code: str) -> list:
    code = textwrap.dedent(code)
    ctx = FileContext("<t>", code, parse("<t>", code), Settings())
    ctx.walk_and_bucket(set())
    calls = sorted((n for n in ast.walk(ctx.tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "reveal"),
                   key=lambda c: (c.lineno, c.col_offset))
    return [ctx.magnitude_bound(c.args[0]) for c in calls]


def test_probabilities_and_what_keeps_them_bounded():
    assert bounds("""
        import torch
        import torch.nn.functional as F
        def f(x, y):
            p = F.softmax(x, dim=-1)
            reveal(p)
            reveal(torch.abs(p).transpose(-1, -2))
            reveal(p * torch.sigmoid(y))
            reveal(p + p)
            reveal(p ** 2)
            reveal(x)
            reveal(x.softmax(-1) * x)
            reveal(torch.clamp(x, min=-3, max=2))
            reveal(p.masked_fill(y > 0, -1e4))
    """) == [1.0, 1.0, 1.0, 2.0, 1.0, None, None, 3, 1e4]


def test_helper_parameters_and_map_unpacking():
    assert bounds("""
        import torch
        def pinv(x):
            reveal(x)
            return x
        def g(a, b):
            s1, s2 = map(lambda t: t.softmax(dim=-1), (a, b))
            pinv(s2)
        def h(a):
            reveal(a)
        h(torch.randn(3))
    """) == [1.0, None]


def test_a_cycle_has_no_bound():
    assert bounds("""
        import torch
        def f(x):
            p = x.softmax(-1)
            for _ in range(3):
                p = p * 3
            reveal(p)
    """) == [None]


def test_hand_written_l2_normalisation_is_unit_bounded():
    assert bounds("""
        import torch
        def norm(t, dim, eps=1e-8):
            return torch.sqrt(torch.sum(torch.square(t), dim=dim, keepdim=True) + eps)
        def f(x, y):
            reveal(x / (x.norm(dim=-1, keepdim=True) + 1e-6))
            reveal(torch.div(x, norm(x, dim=-1)))
            n = torch.sqrt((x ** 2).sum(1, keepdim=True))
            reveal(x / n)
            reveal(x / x.pow(2).sum(-1, keepdim=True).clamp(min=1e-12) ** 0.5)
            reveal(x / y.norm(dim=-1, keepdim=True))
            reveal(x / x.norm(p=1, dim=-1, keepdim=True))
            reveal(x / x.sum(-1, keepdim=True))
    """) == [1.0, 1.0, 1.0, 1.0, None, None, None]
