"""AMP101 overflow-constant, AMP102 underflow-epsilon, AMP103 all-masked-row NaN.

* runtime: every fixture model in ``fixtures/constants`` is imported and run on CPU in
  fp16 and fp32 before and after ``amplint fix`` (on a temporary copy): the failure the
  finding predicts happens before the fix and not after, and a ``safe`` fix leaves the
  fp32 output bit-identical;
* numerics: the rules' thresholds agree with what torch does with the same constant;
* the command line: ``explain``, targets, cross-file resolution, JSON ``related``;
* the shared analysis helpers (dtype guards, mask classification, fp32 evidence).
"""
from __future__ import annotations

import importlib.util
import itertools
import json
import os
import shutil
import sys
import textwrap

import pytest

import torch  # noqa: E402  (a dev dependency: a broken torch must fail, not skip)

from amplint.config import Settings  # noqa: E402
from amplint.engine import lint_text  # noqa: E402
from amplint.project import ProjectIndex  # noqa: E402
from amplint.registry import all_rules  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "fixtures", "constants")
RULES = {r.code: r for r in all_rules(()) if r.code in ("AMP101", "AMP102", "AMP103")}
_counter = itertools.count()


def lint(code: str, codes=("AMP101", "AMP102", "AMP103"), **settings):
    findings, _, errors = lint_text("<test>", textwrap.dedent(code), Settings(**settings),
                                    [RULES[c] for c in codes], ProjectIndex())
    assert not errors, errors
    return findings


# --- runtime: before and after the fix ----------------------------------------------

def _load(path: str):
    folder = os.path.dirname(path)
    sys.path.insert(0, folder)
    try:
        spec = importlib.util.spec_from_file_location(f"_amplint_fixture_{next(_counter)}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(folder)
        for name in [n for n, m in sys.modules.items() if getattr(m, "__file__", None) and os.path.dirname(os.path.abspath(m.__file__)) == os.path.abspath(folder)]:
            del sys.modules[name]  # e.g. configuration_bertlike, so the copy's own is used next time
    return module


def _run(module, half: bool):
    """('error', message) | ('nonfinite', output) | ('ok', output)."""
    torch.manual_seed(0)
    model, inputs = module.example()
    if half:
        model = model.half()
        inputs = tuple(x.half() if torch.is_tensor(x) and x.is_floating_point() else x for x in inputs)
    try:
        with torch.no_grad():
            out = model(*inputs)
    except RuntimeError as exc:
        return "error", str(exc)
    return ("ok" if bool(torch.isfinite(out).all()) else "nonfinite"), out


#: fixture, fix mode, what fp16 does before the fix, whether fp32 fails before too
RUNTIME = [
    ("attention_masked_fill.py", "safe", "error", False),
    ("encoder_additive.py", "unsafe", "nonfinite", False),
    # AMP102's safe fix (the norm in fp32) cures this one (issue 13); a float16-only eps
    # is unsafe: it moves fp16 results by up to 1e-4 / x (issue 24)
    ("layernorm_eps.py", "safe", "nonfinite", False),
    ("segmentation_loss.py", "unsafe", "nonfinite", False),
    ("masked_row_nan.py", "unsafe", "nonfinite", True),  # -inf rows are NaN in every dtype
]


@pytest.mark.parametrize("name,mode,before16,fp32_fails", RUNTIME, ids=[r[0] for r in RUNTIME])
def test_fix_removes_the_predicted_failure(name, mode, before16, fp32_fails, tmp_path, amplint):
    src = os.path.join(FIXTURES, name)
    copy = tmp_path / name
    shutil.copy(src, copy)

    before = _load(src)
    status16, detail = _run(before, half=True)
    assert status16 == before16, f"{name}: fp16 before the fix: {status16}"
    if before16 == "error":
        assert "cannot be converted to type c10::Half without overflow" in detail
    status32, out32 = _run(before, half=False)
    assert status32 == ("nonfinite" if fp32_fails else "ok")

    args = ["fix", str(copy), "--no-cache", "--select", "AMP101,AMP102,AMP103"]
    if mode == "unsafe":
        # the safe pass alone must not touch an unsafe-only fixture's failure
        proc = amplint(*args)
        assert proc.returncode in (0, 1), proc.stderr
        assert _run(_load(str(copy)), half=True)[0] == before16, "safe fixes alone should not change this"
        args.append("--unsafe-fixes")
    proc = amplint(*args)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    assert copy.read_text() != open(src).read()

    after = _load(str(copy))
    fixed16, out16 = _run(after, half=True)
    assert fixed16 == "ok", f"{name}: fp16 after `amplint {' '.join(args[:1] + args[3:])}`: {fixed16}"
    fixed32, fixed_out32 = _run(after, half=False)
    assert fixed32 == "ok"
    if mode == "safe":
        assert torch.equal(out32, fixed_out32), "a safe fix changed the fp32 output"
    # and nothing is left to report for these rules
    left = amplint("check", str(copy), "--no-cache", "--select", "AMP101,AMP102,AMP103", "--format", "json")
    assert json.loads(left.stdout) == []


def test_cross_file_constants_fail_before_and_are_not_rewritten(tmp_path, amplint):
    folder = os.path.join(FIXTURES, "bertlike")
    status, detail = _run(_load(os.path.join(folder, "modeling_bertlike.py")), half=True)
    assert status == "error" and "c10::Half" in detail
    assert _run(_load(os.path.join(folder, "modeling_bertlike.py")), half=False)[0] == "ok"
    copy = tmp_path / "bertlike"
    shutil.copytree(folder, copy, ignore=shutil.ignore_patterns("__pycache__"))
    proc = amplint("fix", str(copy), "--unsafe-fixes", "--no-cache", "--select", "AMP101,AMP102,AMP103")
    assert proc.returncode == 1, proc.stdout + proc.stderr  # findings remain: no fix for config defaults
    name = "configuration_bertlike.py"
    assert (copy / name).read_text() == open(os.path.join(folder, name)).read()
    # the hand-written LayerNorm is computed in fp32 instead (AMP102's safe fix, issue 13):
    # the config's eps is left alone, the modeling file changes nowhere else
    fixed = (copy / "modeling_bertlike.py").read_text()
    assert "hidden_states = hidden_states.float()" in fixed
    assert "-1e4" not in fixed.replace(open(os.path.join(folder, "modeling_bertlike.py")).read(), "")


def test_cross_file_findings_name_the_config_file(amplint):
    proc = amplint("check", "fixtures/constants/bertlike", "--no-cache", "--format", "json", "--select", "AMP101,AMP102")
    findings = {f["code"]: f for f in json.loads(proc.stdout)}
    assert set(findings) == {"AMP101", "AMP102"}
    for code, field, line in (("AMP101", "attention_mask_value", 17), ("AMP102", "layer_norm_eps", 16)):
        f = findings[code]
        assert f["path"].endswith("modeling_bertlike.py")
        # AMP101: no fix for a config default; AMP102: the norm computed in fp32 (safe)
        assert f["fix"] is None if code == "AMP101" else f["fix"]["applicability"] == "safe"
        config = [r for r in f["related"] if r["path"].endswith("configuration_bertlike.py")]
        assert config and config[0]["line"] == line and f"BertLikeConfig.{field}" in config[0]["note"], f["related"]
    # linted alone, the modeling file cannot know the config defaults: nothing to report
    alone = amplint("check", "fixtures/constants/bertlike/modeling_bertlike.py", "--no-cache", "--format", "json",
                    "--select", "AMP101,AMP102")
    assert json.loads(alone.stdout) == []


# --- numerics: the thresholds are torch's -------------------------------------------

VALUES = [-1e30, -1e10, -1e9, -65520.0, -65519.0, -65505.0, -65504.0, -65500.0, -1e4, 448.0, 449.0, 1e5, 7e4]


@pytest.mark.parametrize("value", VALUES)
def test_amp101_fires_exactly_when_masked_fill_raises(value):
    x = torch.zeros(3, dtype=torch.float16)
    try:
        x.masked_fill(torch.tensor([True, False, True]), value)
        raises = False
    except RuntimeError:
        raises = True
    findings = lint(f"import torch\ndef f(x, m):\n    return x.masked_fill(m, {value!r}).softmax(-1)\n", ("AMP101",))
    assert bool(findings) == raises, (value, findings)


@pytest.mark.parametrize("value", [1e-12, 1e-8, 2.9e-8, 3e-8, 5.96e-8, 1e-7, 1e-6, 1e-5, 6e-5, 6.2e-5, 1e-4, 1e-3])
def test_amp102_severity_is_what_fp16_does_with_the_constant(value):
    half = float(torch.tensor(value, dtype=torch.float16))
    normal = value >= float(torch.finfo(torch.float16).tiny)
    findings = lint(f"import torch\ndef f(x):\n    return x / (x.abs() + {value!r})\n", ("AMP102",))
    if normal:
        assert not findings
    elif half == 0.0:
        assert [f.severity.value for f in findings] == ["error"] and "becomes 0" in findings[0].message
    else:
        assert [f.severity.value for f in findings] == ["warning"] and "subnormal" in findings[0].message


def test_amp102_replacement_is_normal_in_the_target():
    from amplint.numerics import FORMATS
    from amplint.rules.amp102_underflow_epsilon import normal_replacement

    for target, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16), ("fp8", torch.float8_e4m3fn)):
        v = normal_replacement(FORMATS[target].smallest_normal)
        assert v >= float(torch.finfo(dtype).tiny)
        assert float(torch.tensor(v).to(dtype)) > 0
    assert normal_replacement(FORMATS["fp16"].smallest_normal) == 1e-4


def test_finfo_min_fill_keeps_softmax_identical_in_fp32():
    """The claim behind AMP101's `safe` fix for masked_fill feeding a softmax."""
    torch.manual_seed(0)
    s = torch.randn(4, 6, 6) * 10
    m = torch.rand(4, 6, 6) > 0.5
    m[0, 2] = True  # a fully masked row
    a = s.masked_fill(m, -1e9).softmax(-1)
    b = s.masked_fill(m, torch.finfo(s.dtype).min).softmax(-1)
    assert torch.equal(a, b)
    # and the reason additive use is `unsafe`: finfo.min plus a negative score overflows in fp16
    h = torch.tensor([-20.0], dtype=torch.float16) + torch.finfo(torch.float16).min
    assert torch.isinf(h).all()


# --- the command line ---------------------------------------------------------------

@pytest.mark.parametrize("code,name,number", [("AMP101", "overflow-constant", "65504"),
                                              ("AMP102", "underflow-epsilon", "6.1e-5"),
                                              ("AMP103", "all-masked-row-nan", "NaN")])
def test_explain(code, name, number, amplint):
    for key in (code, name):
        proc = amplint("explain", key)
        assert proc.returncode == 0, proc.stderr
        for heading in ("What it does", "Why is this bad?", "Example", "Use instead"):
            assert heading in proc.stdout
    assert number in amplint("explain", code).stdout


def test_targets_through_the_cli(tmp_path, amplint):
    src = tmp_path / "m.py"
    src.write_text("import torch\n"
                   "def attend(s, m):\n"
                   "    return torch.softmax(s.masked_fill(m, -1e4), -1) / (s.norm() + 1e-3)\n")
    codes = lambda *a: sorted(f["code"] for f in json.loads(amplint("check", str(src), "--no-cache", "--format", "json",
                                                                   "--select", "AMP101,AMP102", *a).stdout))
    assert codes() == []  # -1e4 and 1e-3 are fine in fp16
    assert codes("--target", "fp8") == ["AMP101", "AMP102"]  # 448 / 0.0156
    assert codes("--target", "bf16") == []
    assert codes("--target", "fp8", "--opt-level", "O0") == []


def test_bf16_folder_config_silences_overflow_but_not_nan(tmp_path, amplint):
    (tmp_path / "pyproject.toml").write_text('[tool.amplint]\ntarget = "bf16"\n')
    (tmp_path / "m.py").write_text("import torch\n"
                                   "def attend(s, pad_mask):\n"
                                   "    s = s.masked_fill(pad_mask, -1e9)\n"
                                   "    s = s.masked_fill(pad_mask[:, :, None] | pad_mask[:, None, :], float('-inf'))\n"
                                   "    return s.softmax(-1)\n")
    out = json.loads(amplint("check", str(tmp_path), "--no-cache", "--format", "json").stdout)
    assert [(f["code"], f["line"]) for f in out] == [("AMP103", 4)]


def test_optimizer_eps_only_at_o3(tmp_path, amplint):
    src = tmp_path / "train.py"
    src.write_text("import torch\nopt = torch.optim.Adam(params, lr=1e-3)\n")
    for level, expected in (("O1", []), ("O2", []), ("O3", ["AMP102"])):
        out = json.loads(amplint("check", str(src), "--no-cache", "--format", "json", "--opt-level", level).stdout)
        assert [f["code"] for f in out] == expected, level
    proc = amplint("fix", str(src), "--no-cache", "--opt-level", "O3", "--unsafe-fixes")
    assert src.read_text() == "import torch\nopt = torch.optim.Adam(params, lr=1e-3, eps=1e-4)\n", proc.stdout


# --- analysis helpers ----------------------------------------------------------------

def test_dtype_guards():
    code = """
    import torch
    def f(x, m):
        if x.dtype != torch.float16:
            a = x.masked_fill(m, -1e9)
        if x.dtype in (torch.float32, torch.float64):
            b = x.masked_fill(m, -1e9)
        if not x.dtype == torch.half:
            c = x.masked_fill(m, -1e9)
        if x.dtype is torch.float16 or x.dtype is torch.bfloat16:
            d = x.masked_fill(m, -1e4)
        else:
            d = x.masked_fill(m, -1e9)
        e = x.masked_fill(m, -1e9 if x.dtype == torch.float32 else -1e4)
        if x.dtype == torch.bfloat16:
            g = x.masked_fill(m, -1e9)
        return x.masked_fill(m, -1e9)
    """
    lines = [f.line for f in lint(code, ("AMP101",))]
    # only the bf16-only branch counts for bf16; for fp16 it never runs. Unguarded: line 17.
    assert lines == [17], lines
    assert [f.line for f in lint(code, ("AMP101",), target="fp8")] == [5, 9, 13, 14, 17]


def test_mask_classification():
    def severity(mask_setup, mask_expr):
        code = f"""
        import torch
        class A(torch.nn.Module):
            def __init__(self, n):
                super().__init__()
                self.register_buffer("tri", torch.tril(torch.ones(n, n)))
                self.look_ahead = torch.triu(torch.ones(n, n), 1).bool()
            def forward(self, s, mask, src_key_padding_mask, lengths):
                {mask_setup}
                s = s.masked_fill({mask_expr}, float("-inf"))
                return s.softmax(-1)
        """
        found = lint(code, ("AMP103",))
        return found[0].severity.value if found else None

    assert severity("pass", "self.tri == 0") is None
    assert severity("pass", "self.look_ahead") is None
    # a padding mask alone masks keys: every sequence keeps its real positions
    assert severity("pass", "src_key_padding_mask[:, None, :]") is None
    assert severity("m = torch.arange(s.size(-1))[None, :] >= lengths[:, None]", "m") is None
    # padded queries as well as keys: a padded row is all -inf
    assert severity("m = src_key_padding_mask[:, :, None] | src_key_padding_mask[:, None, :]", "m") == "warning"
    assert severity("pass", "torch.logical_or(src_key_padding_mask.unsqueeze(1), src_key_padding_mask.unsqueeze(2))") == "warning"
    assert severity("pass", "mask == 0") == "info"
    assert severity("m = mask & self.tri.bool()", "~m") == "info"
    assert severity("m = src_key_padding_mask | self.tri.bool()", "m") == "warning"


def test_fp32_evidence_follows_the_dtype_outward():
    def flagged(body):
        return bool(lint("import torch\nclass N(torch.nn.Module):\n    def forward(self, x):\n"
                         + textwrap.indent(textwrap.dedent(body), "        "), ("AMP102",)))

    assert not flagged("h = x.float()\nv = h.pow(2).mean(-1)\nreturn h * torch.rsqrt(v + 1e-6)\n")
    assert not flagged("return torch.rsqrt(x.to(torch.float32).pow(2).mean(-1) + 1e-6)\n")
    assert not flagged("v = x.pow(2).mean(-1, dtype=torch.float32)\nreturn torch.rsqrt(v + 1e-6)\n")
    assert flagged("h = x.float()\nv = h.pow(2).mean(-1).half()\nreturn torch.rsqrt(v + 1e-6)\n")
    assert flagged("p = x.float().softmax(-1).type_as(x)\nreturn torch.log(p + 1e-8)\n")
    assert flagged("v = x.pow(2).mean(-1)\nreturn torch.rsqrt(v + 1e-6)\n")


def test_amp101_quiet_outside_tensor_code():
    assert not lint("""
    import torch
    import time
    MAX_LEN = 1e9
    cfg = {}
    cfg["limit"] = 1e9
    def schedule(step):
        return step * 1e6 + MAX_LEN
    class M(torch.nn.Module):
        def forward(self, x):
            start = time.time() * 1e9
            n = len(x) * 1e9
            return x
    """)


def test_fix_names_the_tensor_or_nothing():
    out = lint("""
    import torch
    class M(torch.nn.Module):
        def forward(self, q, k, s, m):
            a = (q @ k).masked_fill(m, -1e9).softmax(-1)
            b = s.masked_fill(m, -1e9)
            return torch.ones_like(s) * -1e9
    """, ("AMP101",))
    assert [(f.line, f.fix is None) for f in out] == [(5, True), (6, False), (7, True)]
    assert out[1].fix.applicability.value == "unsafe"  # b never reaches a softmax


def test_context_branch_runs_in_half():
    """The shared helper other rules can reuse (``ctx.branch_runs_in_half``)."""
    import ast

    from amplint.context import FileContext

    src = textwrap.dedent("""
    import torch
    def f(x):
        if x.dtype == torch.float16:
            a = 1
        else:
            b = 2
        c = 3
        d = 4 if x.dtype not in (torch.float16, torch.bfloat16) else 5
    """)
    tree = ast.parse(src)
    ctx = FileContext("t.py", src, tree, Settings())
    ctx.walk_and_bucket(set())
    body = tree.body[1].body
    a, b, c, d = body[0].body[0], body[0].orelse[0], body[1], body[2].value
    assert [ctx.branch_runs_in_half(n) for n in (a, b, c, d.body, d.orelse)] == [True, False, None, False, True]
    assert [ctx.branch_runs_in_half(n, "bf16") for n in (a, b, d.body, d.orelse)] == [False, True, False, True]


@pytest.mark.parametrize("level, severities", [("O1", ["info", "info", "error"]), ("O2", ["error", "error", "error"])])
def test_amp102_is_info_on_values_fp32_under_o1_only(amplint, level, severities):
    """An fp32 parameter (Snake's alpha) and a softmax output O1 runs in fp32: the eps is
    added in fp32 under O1 (info); under O2 they are half (error). An activation stays an error."""
    proc = amplint("check", "fixtures/constants/o1_fp32/snake_and_clamp.py", "--no-cache", "--format", "json",
                   "--opt-level", level, "--select", "AMP102")
    found = sorted({(f["line"], f["severity"]) for f in json.loads(proc.stdout) if f["severity"] != "warning"})
    assert [s for _, s in found] == severities, found


def test_amp102_skips_dead_defaults_and_discarded_norms(amplint):
    """A default every caller in the file overrides never applies: the finding names the
    value the callers pass (1e-5, SequenceNorm's own default, passed on as `eps=eps`) and
    its source, not ScaleNorm's `eps=1e-6`; an `x + eps` whose statement value is thrown
    away (transformers' MegaRMSNorm) has no effect and is not reported."""
    proc = amplint("check", "fixtures/constants/eps_dead/dead_defaults.py", "--no-cache", "--format", "json",
                   "--select", "AMP102")
    found = json.loads(proc.stdout)
    assert [f["line"] for f in found] == [31], found
    assert "= 1e-05" in found[0]["message"], found[0]["message"]
    related = {r["line"] for r in found[0]["related"]}
    assert 35 in related and 38 in related and 24 not in related, related


@pytest.mark.parametrize("level, count", [("O1", 0), ("O2", 1)])
def test_amp102_window_sum_of_a_torch_tensor_buffer_is_fp32_under_o1(amplint, level, count):
    """`torch.Tensor(window)` makes the default float dtype (fp32) and `F.fold(input=...)`
    keeps its keyword operand's dtype, and a `self.x = []` placeholder is no tensor: both window
    sums are fp32 under O1, so their `clamp(..., 1e-11)` floors are fine there; O2 casts the
    buffer (not the plain tensor attribute) to half, and that floor vanishes."""
    proc = amplint("check", "fixtures/false_positives/clean/ola_window_sum.py", "--no-cache", "--format", "json",
                   "--opt-level", level, "--select", "AMP102")
    assert len(json.loads(proc.stdout)) == count, proc.stdout


def test_amp102_skips_eps_added_to_values_at_least_one(amplint):
    """`log(cosh(x) + eps)` and `log(1 + x ** 2 + eps)`: the other term is >= 1, so the
    eps keeps nothing away from 0 and its vanishing in half is harmless (auraloss LogCosh)."""
    proc = amplint("check", "fixtures/false_positives/clean/log_cosh.py", "--no-cache", "--format", "json",
                   "--opt-level", "O2", "--select", "AMP102")
    assert json.loads(proc.stdout) == [], proc.stdout


def test_amp102_names_every_callers_default_of_a_dead_default(amplint):
    """Two models pass their own `epsilon=1e-15` default to one encoder: the finding in the
    encoder names both defaults (and both call sites), not the encoder's dead default."""
    proc = amplint("check", "fixtures/constants/eps_dead/shared_encoder.py", "--no-cache", "--format", "json",
                   "--select", "AMP102")
    found = json.loads(proc.stdout)
    assert [(f["line"], f["severity"]) for f in found] == [(16, "error")], found
    related = {r["line"] for r in found[0]["related"]}
    assert {20, 22, 29, 31} <= related and 9 not in related, related


def test_amp102_clamp_floor_before_a_log_is_an_eps_by_role(amplint):
    """`torch.log10(torch.clamp(mel, min=self.amin))`: the floor's name says nothing, its
    role (a clamp straight into a log) does; `self.amin = 1e-10` becomes 0 in fp16."""
    proc = amplint("check", "fixtures/constants/eps_role/logmel_floor.py", "--no-cache", "--format", "json",
                   "--select", "AMP102")
    found = json.loads(proc.stdout)
    assert [(f["line"], f["severity"]) for f in found] == [(17, "error")], found
    assert "`self.amin` (= 1e-10)" in found[0]["message"], found[0]["message"]
