"""Unit tests of the dtype flow (amplint.dtypes.DtypeFlow, ``ctx.dtype_of``).

Each snippet calls ``reveal(expr)``; the test reads the class the analysis gives each
revealed expression, in source order."""
from __future__ import annotations

import ast
import textwrap

import pytest

from amplint.config import Settings
from amplint.context import FileContext
from amplint.dtypes import DtypeClass
from amplint.engine import parse

H, F32, F64, I, B, S, U = (DtypeClass.HALF, DtypeClass.FP32, DtypeClass.FP64, DtypeClass.INTEGER,
                           DtypeClass.BOOL, DtypeClass.SCALAR, DtypeClass.UNKNOWN)


def _context(code: str, **settings) -> FileContext:
    code = textwrap.dedent(code)
    ctx = FileContext("<t>", code, parse("<t>", code), Settings(**settings))
    ctx.walk_and_bucket(set())
    return ctx


def reveal(code: str, **settings) -> list[DtypeClass]:
    ctx = _context(code, **settings)
    calls = [n for n in ast.walk(ctx.tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "reveal"]
    calls.sort(key=lambda c: (c.lineno, c.col_offset))
    return [ctx.dtype_of(c.args[0]) for c in calls]


HEADER = "import math\nimport torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"


def model(body: str, init: str = "pass", params: str = "x") -> str:
    def block(text: str) -> str:
        return textwrap.indent(textwrap.dedent(text).strip("\n"), " " * 8)

    return HEADER + (
        "class M(nn.Module):\n"
        "    def __init__(self, dim):\n"
        "        super().__init__()\n"
        f"{block(init)}\n"
        f"    def forward(self, {params}):\n"
        f"{block(body)}\n"
    )


def test_casts_and_method_chains():
    got = reveal(model("""
        a = x.float()
        reveal(a)
        reveal(a.view(-1).transpose(0, 1).sum(-1))
        reveal(x.double())
        reveal(x.half())
        reveal(x.to(torch.float32))
        reveal(x.to(x.device, dtype=torch.float64))
        reveal(x.to(a.dtype))
        reveal(x.to(a))
        reveal(x.type_as(a))
        reveal(x.long())
        reveal(x)
        reveal(x.to(x.device))
    """))
    assert got == [F32, F32, F64, H, F32, F64, F32, F32, F32, I, U, U]


def test_factories():
    got = reveal(model("""
        reveal(torch.arange(10))
        reveal(torch.arange(0, 1, 0.5))
        reveal(torch.arange(10, dtype=torch.float64))
        reveal(torch.linspace(0, 1, 5))
        reveal(torch.zeros(3))
        reveal(torch.ones(3, dtype=torch.half))
        reveal(torch.zeros_like(x))
        reveal(torch.randint(0, 5, (3,)))
        reveal(x.new_zeros(3))
        reveal(x.sum(dtype=torch.float32))
    """))
    assert got == [I, F32, F64, F32, F32, H, U, I, U, F32]


def test_promotion_and_integer_arithmetic():
    got = reveal(model("""
        t = torch.arange(8)
        reveal(t * 2)
        reveal(t / 2)
        reveal(t * -math.log(10000.0))
        reveal(torch.exp(t * -0.5))
        reveal(x.half() * torch.zeros(3))
        reveal(x.half() * 0.5)
        reveal(x > 0)
        reveal((x > 0).sum())
        reveal(x.float() + x)
        reveal(x + x)
    """))
    assert got == [I, F32, F32, F32, F32, H, B, I, F32, U]


def test_names_follow_reaching_assignments():
    got = reveal(model("""
        h = x.float()
        if x.ndim > 2:
            h = x
        reveal(h)
        y = x.float()
        y = y * 2
        reveal(y)
        z = torch.arange(4).to(dtype=torch.float)
        z -= 2
        reveal(z)
    """))
    assert got == [U, F32, F32]


def test_buffers_and_parameters_by_opt_level():
    init = """
        self.weight = nn.Parameter(torch.ones(dim))
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim)))
        self.table = torch.arange(dim).float()
        self.scale = dim ** -0.5
        self.proj = nn.Linear(dim, dim)
    """
    body = """
        reveal(self.weight)
        reveal(self.inv_freq)
        reveal(self.table)
        reveal(self.scale)
        reveal(self.proj(x))
    """
    assert reveal(model(body, init)) == [F32, F32, F32, S, U]
    assert reveal(model(body, init), opt_level="O2") == [H, H, F32, S, U]


def test_policy_outputs_under_o1():
    got = reveal(model("""
        reveal(F.softmax(x, dim=-1))
        reveal(F.mse_loss(x, x, reduction='none'))
        reveal(x @ x)
        reveal(x.pow(2))
    """))
    assert got == [F32, F32, H, F32]
    # pure half: nothing is upcast
    assert reveal(model("reveal(F.softmax(x, dim=-1))"), opt_level="O2") == [U]
    # CPU autocast keeps softmax in half
    assert reveal(model("reveal(F.softmax(x, dim=-1))"), engine="torch", device="cpu") == [U]


def test_autocast_disabled_block():
    got = reveal(model("""
        with torch.autocast("cuda", enabled=False):
            reveal(x @ x)
            reveal(F.softmax(x.float(), -1))
    """), engine="torch")
    assert got == [U, F32]


def test_custom_fwd_cast_inputs():
    code = HEADER + textwrap.dedent("""
        class Fn(torch.autograd.Function):
            @staticmethod
            @torch.cuda.amp.custom_fwd(cast_inputs=torch.float32)
            def forward(ctx, a):
                reveal(a)
    """)
    assert reveal(code, engine="torch") == [F32]


def test_function_summaries_and_call_site_arguments():
    code = HEADER + textwrap.dedent("""
        def table(n):
            return torch.arange(n).float()

        def pinv(a):
            return reveal(a)

        class M(nn.Module):
            def forward(self, x):
                reveal(table(8))
                p = x.softmax(-1)
                return pinv(p) + self.helper(x)

            def helper(self, h):
                reveal(h)
                return h
    """)
    assert reveal(code) == [F32, F32, U]


def test_data_parameters_of_forward_are_inputs_under_o1():
    code = model("reveal(targets); reveal(x); reveal(x * targets); reveal(targets ** 2)", params="x, targets")
    assert reveal(code) == [DtypeClass.INPUT, U, U, DtypeClass.INPUT]
    assert reveal(code, opt_level="O2") == [U, U, U, U]


def test_in_model_forward():
    ctx = _context(HEADER + textwrap.dedent("""
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.t = torch.arange(3).sum()
            def forward(self, x):
                a = x.sum()
                with torch.no_grad():
                    b = x.sum()
                return a
    """))
    sums = sorted((n for n in ast.walk(ctx.tree) if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "sum"),
                  key=lambda n: n.lineno)
    assert [ctx.in_model_forward(n) for n in sums] == [False, True, False]


def test_aliases_of_torch_functions():
    code = HEADER + textwrap.dedent("""
        import functools

        def stable_softmax(t, dim=-1):
            return (t - t.amax(dim, keepdim=True)).softmax(dim)

        class M(nn.Module):
            def __init__(self, stable, kmeans):
                super().__init__()
                self.attn_fn = F.softmax if not stable else stable_softmax
                init_fn = torch.randn if not kmeans else torch.zeros
                self.register_buffer("embed", init_fn(4, 8))

            @property
            def loss_fn(self):
                return F.l1_loss if self.stable else F.mse_loss

            def forward(self, x, target):
                softmax = torch.softmax if self.fast else stable_softmax
                sm = functools.partial(F.softmax, dim=-1)
                reveal(self.embed)
                reveal(self.loss_fn(x, target, reduction='none'))
                reveal(nn.Softmax(dim=-1)(x))
    """)
    assert reveal(code) == [F32, F32, F32]
    ctx = _context(code)
    calls = {ctx.segment(n.func): n for n in ast.walk(ctx.tree) if isinstance(n, ast.Call)}
    flow = ctx.dtype_flow
    assert flow.callees(ast.parse("self.attn_fn").body[0].value) == [None]  # no class around it
    attn_fn = next(n for n in ast.walk(ctx.tree) if isinstance(n, ast.Attribute) and n.attr == "attn_fn")
    assert flow.callees(attn_fn) == ["torch.nn.functional.softmax", None]
    assert flow.callees(calls["functools.partial"]) == ["torch.nn.functional.softmax"]
    assert flow.callees(calls["nn.Softmax"]) == ["torch.nn.functional.softmax"]


# --- precision facts: the same flow asked at each opt level (ctx.precision_of) -------


def precisions(code: str, **settings) -> list:
    ctx = _context(code, **settings)
    calls = [n for n in ast.walk(ctx.tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "reveal"]
    calls.sort(key=lambda c: (c.lineno, c.col_offset))
    out = []
    for c in calls:
        p = ctx.precision_of(c.args[0])
        out.append(None if p is None else p.kind if p.half is None else (p.half.mode, p.half.format))
    return out


def test_precision_modes_come_from_the_dtype_flow_at_each_level():
    code = model("""
        t = torch.arange(4096, device=x.device)
        reveal(t)
        reveal(t.half())
        reveal(t.to(torch.bfloat16))
        reveal(torch.arange(4096, dtype=x.dtype))
        reveal(t.type_as(x))
        reveal(torch.arange(4096, dtype=self.inv_freq.dtype))
        reveal(t[:, None].float() * self.inv_freq[None, :])
        reveal(t.half()[:, None] * self.inv_freq[None, :].to(x.dtype))
        reveal(x)
    """, init='self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(0, dim, 2).float() / dim))')
    assert precisions(code, target="bf16") == [
        "int", ("explicit", "float16"), ("explicit", "bfloat16"), ("activation", "bfloat16"),
        ("activation", "bfloat16"), ("buffer", "bfloat16"), "fp32", ("activation", "bfloat16"), None,
    ]


def test_precision_cause_is_the_cast_that_made_it_half():
    code = model("""
        t = torch.arange(4096, device=x.device, dtype=x.dtype)
        reveal(t[:, None] * self.inv_freq[None, :].to(x.dtype))
    """, init='self.register_buffer("inv_freq", torch.ones(dim))')
    ctx = _context(code)
    product = next(n for n in ast.walk(ctx.tree) if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mult))
    half = ctx.precision_of(product).half
    assert half.mode == "activation" and ctx.segment(half.cause).startswith("torch.arange(4096")
    assert ctx.segment(half.source) == "x"


def test_buffer_read_in_init_is_fp32_even_under_o2():
    code = model("reveal(self.w)", init="""
        self.w = nn.Parameter(torch.ones(dim))
        reveal(self.w)
    """)
    assert reveal(code, opt_level="O2") == [F32, H]


def test_fp32_until_the_model_is_cast():
    code = model("""
        b = self.bias[:, :, :4, :4]
        reveal(torch.matmul(x, x) * b)
        reveal(self.mix * 2)
    """, init="""
        self.register_buffer("bias", torch.tril(torch.ones(4, 4)).view(1, 1, 4, 4))
        self.mix = nn.Parameter(torch.zeros(3))
    """)
    ctx = _context(code)
    calls = sorted((n for n in ast.walk(ctx.tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "reveal"),
                   key=lambda c: c.lineno)
    assert [ctx.dtype_of(c.args[0]) for c in calls] == [F32, F32]
    assert [ctx.fp32_until_model_cast(c.args[0]) for c in calls] == [True, False]


@pytest.mark.parametrize("level, severity", [("O1", "info"), ("O2", "warning")])
def test_softmax_of_buffer_promoted_scores_is_reported(amplint, level, severity):
    """pytorch-pretrained-bert 0.6.2 GPT-2: scores times the fp32 `tril` buffer are fp32
    under O1 only; O2 casts the buffer and the softmax runs in half."""
    proc = amplint("check", "fixtures/dtypes/buffer_promoted.py", "--no-cache", "--format", "json",
                   "--opt-level", level, "--select", "AMP301")
    import json

    found = [(f["line"], f["severity"]) for f in json.loads(proc.stdout)]
    assert (23, severity) in found
    if level == "O1":
        assert found == [(23, "info")]  # the softmax over the mixing weights is not an activation
        means = amplint("check", "fixtures/dtypes/buffer_promoted.py", "--no-cache", "--format", "json",
                        "--select", "AMP302")
        assert json.loads(means.stdout) == []  # a mean cannot overflow: not reported
