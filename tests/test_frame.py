"""Unit tests of the lint frame: context, constant evaluator, suppressions, fixes, config."""
from __future__ import annotations

import ast
import textwrap

import pytest

from amplint.config import ConfigError, ConfigResolver, Settings, validate
from amplint.context import FileContext
from amplint.engine import apply_fixes, fix_text, lint_text
from amplint.project import FileSummary, ProjectIndex, summarize
from amplint.registry import is_selected
from amplint.rule import Edit, Fix, Invalid, Rule, Valid


def make_ctx(code: str, project=None, path="m.py") -> FileContext:
    code = textwrap.dedent(code)
    ctx = FileContext(path, code, ast.parse(code), Settings(), project)
    ctx.walk_and_bucket(set())
    return ctx


def find(ctx, predicate):
    return [n for n in ast.walk(ctx.tree) if predicate(n)]


def last_call_arg(ctx, func_name):
    calls = find(ctx, lambda n: isinstance(n, ast.Call) and getattr(n.func, "attr", getattr(n.func, "id", None)) == func_name)
    return calls[-1].args[-1]


# --- imports ------------------------------------------------------------------------

def test_qualname_resolves_aliases():
    ctx = make_ctx("""
        import torch
        import torch.nn.functional as F
        from torch import einsum
        from torch.nn import functional as nnf
        import torch.nn as nn
        (F.softmax, nnf.log_softmax, einsum, nn.Linear, torch.nn.modules.linear.Linear, x.softmax)
    """)
    exprs = ctx.tree.body[-1].value.elts
    assert [ctx.qualname(e) for e in exprs] == [
        "torch.nn.functional.softmax", "torch.nn.functional.log_softmax", "torch.einsum",
        "torch.nn.Linear", "torch.nn.Linear", None,
    ]


# --- structure ----------------------------------------------------------------------

def test_forward_reachability_follows_calls_in_the_same_file():
    ctx = make_ctx("""
        import torch.nn as nn
        def helper(x):
            return x.exp()
        def unused(x):
            return x.exp()
        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.w = 1
            def _attn(self, x):
                return helper(x)
            def forward(self, x):
                return self._attn(x)
        class NotAModel:
            def forward(self, x):
                return x.exp()
    """)
    exps = find(ctx, lambda n: isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "exp")
    assert [ctx.in_forward(e) for e in exps] == [True, False, False]
    init_assign = find(ctx, lambda n: isinstance(n, ast.Assign))[0]
    assert not ctx.in_forward(init_assign) and ctx.in_model_code(init_assign)


def test_module_class_detection_through_local_bases():
    ctx = make_ctx("""
        from torch import nn
        class Base(nn.Module):
            pass
        class Child(Base):
            pass
        class Plain:
            pass
    """)
    assert [ctx.is_module_class(c) for c in ctx.classes.values()] == [True, True, False]


# --- evaluator ------------------------------------------------------------------------

@pytest.mark.parametrize("expr, value", [
    ("-1e9", -1e9), ("float('-inf')", float("-inf")), ("-math.inf", float("-inf")),
    ("1e4 * 1e5", 1e9), ("4 * 768", 3072), ("768 // 12", 64), ("2 ** 10", 1024), ("int('3')", 3),
    ("NEG", -1e9), ("np.inf", float("inf")),
])
def test_evaluator_folds(expr, value):
    ctx = make_ctx(f"import math\nimport numpy as np\nNEG = -1e9\ny = ({expr})\n")
    got = ctx.evaluate(ctx.tree.body[-1].value)
    assert got is not None and got.value == value


def test_evaluator_unknowns_are_none():
    ctx = make_ctx("import random\nA = 1\nA = 2\ny = (A, random.random(), x, 'a')\n")
    assert [ctx.evaluate(e) for e in ctx.tree.body[-1].value.elts] == [None] * 4


def test_evaluator_follows_defaults_self_attrs_and_configs_with_provenance():
    ctx = make_ctx("""
        import torch.nn as nn
        from dataclasses import dataclass
        @dataclass
        class GPTConfig:
            n_embd: int = 770
        class Attn(nn.Module):
            def __init__(self, config, mask_value=-1e9):
                super().__init__()
                self.mask_value = mask_value
                self.hidden = 4 * config.n_embd
            def forward(self, x, m):
                a = x.masked_fill(m, self.mask_value)
                return nn.Linear(self.hidden, 8)
    """)
    mask = ctx.evaluate(last_call_arg(ctx, "masked_fill"))
    assert mask.value == -1e9
    assert [r.line for r in mask.origin] == [10, 8]  # self.mask_value = ..., then the default
    hidden = ctx.evaluate(find(ctx, lambda n: isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "Linear")[0].args[0])
    assert hidden.value == 3080
    assert any("GPTConfig.n_embd" in r.note for r in hidden.origin)


def test_evaluator_resolves_config_defaults_across_files():
    config = make_ctx("""
        class BertConfig:
            def __init__(self, vocab_size=30522, layer_norm_eps=1e-12):
                self.vocab_size = vocab_size
    """, path="configuration_bert.py")
    project = ProjectIndex([summarize(config, [])])
    model = make_ctx("""
        import torch.nn as nn
        class Emb(nn.Module):
            def __init__(self, config):
                super().__init__()
                self.e = nn.Embedding(config.vocab_size, 8)
    """, project=project, path="modeling_bert.py")
    value = ctx_value = model.evaluate(find(model, lambda n: isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "Embedding")[0].args[0])
    assert ctx_value.value == 30522
    assert value.origin[0].path == "configuration_bert.py" and value.origin[0].line == 3
    # the summary survives its JSON round trip (the cache stores it)
    again = FileSummary.from_json(summarize(config, []).to_json())
    assert again.configs[0].field == "vocab_size"


# --- a tiny rule to drive the engine --------------------------------------------------

class BigNumber(Rule):
    code = "TST001"
    name = "big-number"
    summary = "numbers above 65504"
    docs = "## What it does\nTest.\n## Why is this bad?\nTest.\n## Example\n`x`\n"
    fix_applicability = "safe"
    markers = ()
    VALID = [Valid("y = 1\n")]
    INVALID = [Invalid("y = 1e9\n", expected_fix="y = 65504.0\n")]

    def visit_Constant(self, node, ctx):
        if isinstance(node.value, float) and node.value > 65504:
            ctx.report(self, node, "too big", fix=Fix([Edit.replace(node, "65504.0")], "safe", "clamp"))


def lint(code, **settings):
    return lint_text("t.py", textwrap.dedent(code), Settings(**settings), [BigNumber])[0]


def test_suppressions_cover_multiline_statements_and_codes():
    code = """
        a = 1e9  # amplint: ignore[TST001]
        b = 1e9  # noqa: TST001
        c = 1e9  # amplint: ignore
        d = 1e9  # noqa: E501
        e = f(
            1e9,
        )  # amplint: ignore[TST001]
        g = 1e9  # amplint: ignore[AMP101]
    """
    assert [f.line for f in lint(code)] == [5, 9]


def test_unused_suppressions_are_reported_when_asked():
    code = "a = 1  # amplint: ignore[TST001]\nb = 1e9  # amplint: ignore[TST001]\nc = 2  # noqa\n"
    findings, _, _ = lint_text("t.py", code, Settings(), [BigNumber], report_unused_suppressions=True)
    assert [(f.code, f.line) for f in findings] == [("AMP900", 1)]


def test_per_file_ignores(tmp_path):
    s = Settings(per_file_ignores=(("tests/*", ("TST",)),), root=str(tmp_path))
    assert lint_text(str(tmp_path / "tests" / "t.py"), "a = 1e9\n", s, [BigNumber])[0] == []
    assert len(lint_text(str(tmp_path / "src.py"), "a = 1e9\n", s, [BigNumber])[0]) == 1


def test_fix_keeps_crlf_and_everything_outside_the_edit():
    code = "# head\r\nx = [1e9,   2]  # keep\r\n\tz = 3\r\n".replace("\tz", "z")
    new, count, left, errors = fix_text("t.py", code, Settings(), [BigNumber])
    assert new == "# head\r\nx = [65504.0,   2]  # keep\r\nz = 3\r\n" and count == 1 and not left and not errors


def test_fix_that_breaks_syntax_is_reverted():
    class Breaker(BigNumber):
        code = "TST002"

        def visit_Constant(self, node, ctx):
            if node.value == 1e9:
                ctx.report(self, node, "x", fix=Fix([Edit.replace(node, "(")], "safe", "break"))

    code = "a = 1e9\n"
    new, count, left, errors = fix_text("t.py", code, Settings(), [Breaker])
    assert new == code and count == 0 and "invalid code" in errors[0].reason


def test_overlapping_fixes_are_applied_one_at_a_time():
    code = "a = 1e9\n"
    ctx = make_ctx(code)
    node = ctx.tree.body[0].value
    f1 = Fix([Edit.replace(node, "1")], "safe", "one")
    f2 = Fix([Edit.replace(node, "2")], "safe", "two")
    text, applied = apply_fixes(ctx, [f1, f2])
    assert text == "a = 1\n" and applied == 1


def test_non_ascii_columns():
    code = "s = 'é'; a = 1e9\n"
    finding = lint(code)[0]
    assert finding.column == code.index("1e9") + 1
    new, *_ = fix_text("t.py", code, Settings(), [BigNumber])
    assert new == "s = 'é'; a = 65504.0\n"


# --- selection and config -------------------------------------------------------------

def test_selection_longest_prefix_wins():
    class Off(BigNumber):
        code = "TST009"
        enabled_by_default = False

    assert is_selected(BigNumber, (), ())
    assert not is_selected(BigNumber, (), ("TST",))
    assert is_selected(BigNumber, ("TST001",), ("TST",))
    assert not is_selected(Off, (), ())
    assert not is_selected(Off, ("TST",), ())
    assert is_selected(Off, ("TST009",), ()) and is_selected(Off, ("ALL",), ())


@pytest.mark.parametrize("table, message", [
    ({"target": "fp12"}, "target: must be one of"),
    ({"alignment": 12}, "power of two"),
    ({"select": ["not a code"]}, "not a rule code"),
    ({"slect": ["AMP1"]}, "unknown key"),
    ({"per-file-ignores": {"x/*": [1]}}, "list of rule codes"),
])
def test_config_validation_errors(table, message):
    with pytest.raises(ConfigError, match=message):
        validate(table, "pyproject.toml")


def test_config_nearest_pyproject_and_overrides(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.amplint]\ntarget = 'bf16'\nalignment = 64\n")
    sub = tmp_path / "pkg"
    sub.mkdir()
    (sub / "m.py").write_text("")
    settings = ConfigResolver({"opt_level": "O2"}).for_path(str(sub / "m.py"))
    assert (settings.target, settings.alignment, settings.opt_level) == ("bf16", 64, "O2")
    assert settings.root == str(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.amplint]\ntarget = 'bf17'\n")
    with pytest.raises(ConfigError) as info:
        ConfigResolver().for_path(str(sub / "m.py"))
    assert info.value.line == 2


# --- the rule contract -----------------------------------------------------------------

class _CountsCalls(Rule):
    """Reports each file's number of calls once, from its per-file state."""

    code = "TST001"
    name = "counts-calls"
    summary = "counts calls"
    docs = "## What it does\ncounts"

    def begin_file(self, ctx) -> list:
        return []

    def visit_Call(self, node, ctx):
        ctx.state(self).append(node)

    def end_file(self, ctx):
        calls = ctx.state(self)
        if calls:
            ctx.report(self, calls[0], f"{len(calls)} calls")


def test_rule_hooks_and_per_file_state():
    """begin_file's return value is the rule's state for that file alone, even when one
    rule instance lints several files (as in a worker process)."""
    from amplint.engine import _Rules

    rule_set = _Rules([_CountsCalls])
    assert rule_set.instances[0].begin_file.__func__ is _CountsCalls.begin_file
    first = lint_text("a.py", "f()\ng()\n", Settings(), [_CountsCalls])[0]
    second = lint_text("b.py", "h()\n", Settings(), [_CountsCalls])[0]
    assert [f.message for f in first] == ["2 calls"] and [f.message for f in second] == ["1 calls"]


def test_base_rule_declares_every_hook_as_a_no_op():
    class Plain(Rule):
        code = "TST002"
        name = "plain"
        summary = "nothing"
        docs = "## What it does\nnothing"

    rule = Plain()
    ctx = make_ctx("x = 1\n")
    assert rule.begin_file(ctx) is None and rule.end_file(ctx) is None
    assert Plain.collect(ctx) is None and not Plain.collects() and Plain.collect_markers == ()
    assert lint_text("m.py", "x = 1\n", Settings(), [Plain])[0] == []


def test_finding_node_is_a_field_left_out_of_equality_and_json():
    from amplint.rule import Finding, Severity

    tree = ast.parse("x = 1\n")
    a = Finding("m.py", 1, 1, 1, 6, "TST001", "t", "m", Severity.INFO, node=tree.body[0])
    b = Finding("m.py", 1, 1, 1, 6, "TST001", "t", "m", Severity.INFO)
    assert a == b and "node" not in a.to_dict() and "node" not in repr(a)
    found = lint_text("m.py", "f()\n", Settings(), [_CountsCalls])[0]
    assert isinstance(found[0].node, ast.Call)  # kept in the worker for suppressions


def test_worker_state_is_a_dataclass_reset_per_pool():
    """A worker's state for one run (index, given sources) is reset for each pool; the
    rules it selected and instantiated are kept for the process's life (typed records)."""
    from amplint import engine, pipeline

    pipeline._init_worker(None, {"a.py": "x = 1\n"})
    assert isinstance(pipeline._WORKER, pipeline.WorkerState) and pipeline._WORKER.project is None
    assert pipeline._WORKER.sources == {"a.py": "x = 1\n"}
    rule_set = engine._Rules.for_settings(Settings())
    assert isinstance(engine._RULES, engine.RuleCache) and engine._RULES.rule_sets and engine._RULES.rule_classes
    pipeline._init_worker([])
    assert pipeline._WORKER.project is not None and not pipeline._WORKER.sources
    assert engine._Rules.for_settings(Settings()) is rule_set
