"""AMP201 unaligned-dimension: fixtures through the real CLI, the golden fixed models
still build and run in fp32 (and are aligned), settings, cross-file fixes, helpers."""
from __future__ import annotations

import ast
import importlib.util
import json
import os
import shutil
import sys
import textwrap

import pytest
from hypothesis import given, settings as hsettings, strategies as st

from amplint.analysis.dims import find_root, lcm, next_multiple
from amplint.config import Settings
from amplint.context import FileContext
from amplint.registry import all_rules
from amplint.testing import run_example

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DIMS = os.path.join(ROOT, "fixtures", "dims")
RULE = next(r for r in all_rules() if r.code == "AMP201")

import torch  # noqa: E402  (a dev dependency: a broken torch must fail, not skip)


def findings(amplint, *args, cwd=ROOT):
    proc = amplint("check", *args, "--select", "AMP201", "--format", "json", "--no-cache", cwd=cwd)
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)


# --- building the fixture models ------------------------------------------------------

def _load(folder, name, replace_with_golden: bool, tmp_path):
    """Copy ``folder`` to a temp dir (optionally with every ``X.py.unsafe-fixed`` written
    over ``X.py``), import ``name`` from there and return ``example()``."""
    copy = tmp_path / ("fixed" if replace_with_golden else "orig") / os.path.basename(folder)
    shutil.copytree(folder, copy, ignore=shutil.ignore_patterns("__pycache__", "clean", "nanogpt64", "bert")
                    if folder == DIMS else shutil.ignore_patterns("__pycache__"))
    if replace_with_golden:
        for entry in os.listdir(copy):
            if entry.endswith(".py.unsafe-fixed"):
                shutil.copy(copy / entry, copy / entry[: -len(".unsafe-fixed")])
    local_modules = [n[:-3] for n in os.listdir(copy) if n.endswith(".py")]
    sys.path.insert(0, str(copy))
    try:
        for mod in local_modules:
            sys.modules.pop(mod, None)
        spec = importlib.util.spec_from_file_location(f"_amp201_{tmp_path.name}_{name}", copy / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.example()
    finally:
        sys.path.remove(str(copy))
        for mod in local_modules:
            sys.modules.pop(mod, None)


def _layer_sizes(model):
    """(label, size, is_output) of every Tensor Core size in a built model."""
    nn = torch.nn
    out = []
    for name, m in model.named_modules():
        if isinstance(m, nn.Linear):
            out += [(f"{name}.in", m.in_features, False), (f"{name}.out", m.out_features, True)]
        elif isinstance(m, nn.Embedding):
            out += [(f"{name}.num", m.num_embeddings, False), (f"{name}.dim", m.embedding_dim, False)]
        elif isinstance(m, nn.LSTM):
            out += [(f"{name}.input", m.input_size, False), (f"{name}.hidden", m.hidden_size, False)]
        elif isinstance(m, nn.MultiheadAttention):
            out.append((f"{name}.embed", m.embed_dim, False))
        elif isinstance(m, nn.Conv2d) and m.groups == 1:
            out += [(f"{name}.in", m.in_channels, False), (f"{name}.out", m.out_channels, True)]
    for name, p in model.named_parameters(recurse=True):
        if p.dim() == 2 and name.endswith("weight") and "." in name:
            parent = model.get_submodule(name.rsplit(".", 1)[0])
            if type(parent).__module__.startswith("_amp201"):
                out += [(f"{name}.0", p.shape[0], False), (f"{name}.1", p.shape[1], False)]
    return out


def _unaligned(model, alignment):
    return sorted({
        size for _, size, is_out in _layer_sizes(model)
        if size % alignment and size >= 8 and not (is_out and size < 64)
    })


MODELS = [  # folder, module, alignment, unaligned sizes in the original model, left after the fix
    (DIMS, "gpt2", 8, [50257], []),
    (DIMS, "lstm_lm", 8, [650], []),
    (DIMS, "widths", 8, [250, 770], []),
    (DIMS, "pretrained", 8, [50257], [50257]),  # checkpoint-bound: no fix
    (os.path.join(DIMS, "nanogpt64"), "model", 64, [520, 50257], []),
    (os.path.join(DIMS, "bert"), "modeling_bert", 8, [30522], []),
]


@pytest.mark.parametrize("case", MODELS, ids=[f"{os.path.basename(c[0])}/{c[1]}" for c in MODELS])
def test_golden_fixed_models_build_run_and_are_aligned(case, tmp_path):
    folder, name, alignment, before, after = case
    assert os.path.exists(os.path.join(folder, f"{name}.py.unsafe-fixed"))
    model, inputs = _load(folder, name, False, tmp_path)
    assert _unaligned(model, alignment) == before
    model, inputs = _load(folder, name, True, tmp_path)
    with torch.no_grad():
        out = model(*inputs)
    outs = out if isinstance(out, tuple) else (out,)
    assert all(torch.isfinite(o).all() for o in outs)
    assert _unaligned(model, alignment) == after


def test_fixed_gpt2_keeps_weight_tying_and_token_range(tmp_path):
    model, (idx,) = _load(DIMS, "gpt2", True, tmp_path)
    assert model.wte.weight is model.lm_head.weight
    assert model.lm_head.out_features == 50264
    logits = model(idx)
    assert logits.shape == (*idx.shape, 50264)
    # the padded classes are real logits the loss sees; slicing restores the vocabulary
    loss = torch.nn.functional.cross_entropy(logits[..., :50257].reshape(-1, 50257), idx.reshape(-1))
    assert torch.isfinite(loss)


# --- the CLI ---------------------------------------------------------------------------

def _expected(folder):
    import re

    out = set()
    for base, _, files in os.walk(folder):
        for name in files:
            if name.endswith(".py"):
                with open(os.path.join(base, name), encoding="utf-8") as fh:
                    for n, line in enumerate(fh, 1):
                        if re.search(r"#\s*expect:.*AMP201", line):
                            out.add((os.path.relpath(os.path.join(base, name), ROOT), n))
    return out


def test_check_reports_exactly_the_expected_lines(amplint):
    got = findings(amplint, "fixtures/dims")
    assert {(f["path"], f["line"]) for f in got} == _expected(DIMS)
    assert not [f for f in got if "/clean/" in f["path"]]


def test_messages_fixes_and_related(amplint):
    got = {(os.path.basename(f["path"]), f["line"]): f for f in findings(amplint, "fixtures/dims")}
    head = got[("gpt2.py", 73)]
    assert "out_features is 50257, not a multiple of 8: pad to 50264" in head["message"]
    assert "5.3x" in head["message"] and "1.54x" in head["message"]
    assert head["fix"]["applicability"] == "unsafe"
    assert head["related"][0]["line"] == 17  # `vocab_size: int = 50257`
    nano = got[("model.py", 47)]
    assert "pad to 50304" in nano["message"] and "alignment = 64" in nano["message"]
    attn = got[("widths.py", 30)]
    assert "770 -> 800" in attn["fix"]["description"] and "10" in attn["fix"]["description"]
    pre = got[("pretrained.py", 35)]
    assert pre["severity"] == "info" and pre["fix"] is None and "checkpoint" in pre["message"]
    use = got[("modeling_bert.py", 16)]
    assert use["fix"] is None and "configuration_bert.py:13" in use["message"]
    definition = got[("configuration_bert.py", 13)]
    assert definition["fix"]["applicability"] == "unsafe"
    assert {r["line"] for r in definition["related"]} == {16, 55}


def test_cross_file_needs_both_files(amplint):
    alone = findings(amplint, "fixtures/dims/bert/modeling_bert.py")
    # the config is not linted: its default is unknown, nothing can be said
    assert alone == []
    # the config alone: its size-named default is reported where it is written (#23)
    config_alone = findings(amplint, "fixtures/dims/bert/configuration_bert.py")
    assert [(f["line"], f["code"]) for f in config_alone] == [(13, "AMP201")]
    assert "`BertConfig.vocab_size` = 30522" in config_alone[0]["message"]


def test_safe_fix_changes_nothing_and_unsafe_fix_converges(tmp_path, amplint):
    copy = tmp_path / "dims"
    shutil.copytree(DIMS, copy, ignore=shutil.ignore_patterns("*-fixed", "__pycache__"))
    before = (copy / "lstm_lm.py").read_text()
    amplint("fix", str(copy), "--no-cache")
    assert (copy / "lstm_lm.py").read_text() == before
    amplint("fix", str(copy), "--no-cache", "--unsafe-fixes")
    left = findings(amplint, str(copy))
    # what is left is bound to a pretrained checkpoint: info, with no edit to offer
    assert {(os.path.basename(f["path"]), f["severity"]) for f in left} == {("pretrained.py", "info"),
                                                                            ("modeling_tiny.py", "info")}


def test_target_and_alignment_settings(tmp_path, amplint):
    src = "import torch.nn as nn\nfc = nn.Linear(1000, 1000)\nemb = nn.Embedding(50240, 768)\n"
    (tmp_path / "m.py").write_text(src)
    assert findings(amplint, str(tmp_path)) == []
    fp8 = findings(amplint, str(tmp_path), "--target", "fp8")
    assert [f["line"] for f in fp8] == [2] and "multiples of 16" in fp8[0]["message"]
    (tmp_path / "pyproject.toml").write_text("[tool.amplint]\nalignment = 128\n")
    wide = findings(amplint, str(tmp_path))
    assert [f["line"] for f in wide] == [2, 3]
    assert "pad to 50304" in wide[1]["message"]


def test_explain_documents_the_penalties(amplint):
    proc = amplint("explain", "AMP201")
    assert proc.returncode == 0
    for needle in ("5.3x", "1.54x", "50304", "unsafe", "## Why is this bad?", "vocabulary", "retrain"):
        assert needle in proc.stdout


# --- in-process ------------------------------------------------------------------------

def _lint(code, **settings):
    found, _, errors = run_example(RULE, code, settings)
    assert not errors, errors
    return found


def _fix(code, **settings):
    text, _, _, errors = run_example(RULE, code, settings, fix=True)
    assert not errors, errors
    return text


def test_keyword_and_positional_forms_and_layers():
    code = textwrap.dedent("""\
        import torch.nn as nn
        a = nn.Conv1d(in_channels=100, out_channels=200, kernel_size=3)
        b = nn.GRU(input_size=300, hidden_size=500)
        c = nn.EmbeddingBag(1001, 64)
        d = nn.TransformerEncoderLayer(d_model=512, nhead=8, dim_feedforward=2050)
        e = nn.Bilinear(100, 100, 256)
        f = nn.LSTMCell(100, 200)
        g = nn.Transformer(512, 8, 6, 6, 2001)
        h = nn.LazyLinear(1001)
        """)
    assert [f.line for f in _lint(code)] == [2, 3, 4, 5, 6, 7, 8, 9]


def test_divisor_from_floor_division_keeps_heads_exact():
    code = textwrap.dedent("""\
        import torch.nn as nn
        class Attn(nn.Module):
            def __init__(self, dim=780, heads=12):
                super().__init__()
                self.head_dim = dim // heads
                self.qkv = nn.Linear(dim, 3 * dim)
        """)
    fixed = _fix(code)
    assert "dim=792" in fixed  # lcm(8, 12) = 24; 792 = 12 * 66


def test_noncomputable_and_data_bound_sizes_are_quiet():
    code = textwrap.dedent("""\
        import torch.nn as nn
        def make(n_in, num_classes=37, n_labels=11):
            return nn.Sequential(nn.Linear(n_in, 256), nn.Linear(256, num_classes), nn.Linear(256, n_labels))
        stem = nn.Conv2d(3, 64, 7)
        audio = nn.Conv1d(1, 32, 9)
        rows = nn.LSTM(28, 128)
        table = nn.Sequential(nn.Linear(20, 64), nn.Linear(64, 1))
        head = nn.Linear(512, 10)
        """)
    assert _lint(code) == []


def test_checkpoint_bound_in_hf_style_model():
    code = textwrap.dedent("""\
        import torch.nn as nn
        from transformers import PreTrainedModel
        class Model(PreTrainedModel):
            def __init__(self, config):
                super().__init__(config)
                self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
                self.extra = nn.Linear(768, 1001)
        """)
    found = _lint(code)
    # config.vocab_size is unknown here (no config in this file); the literal head is not checkpoint-bound
    assert [(f.line, f.severity.value, f.fix is not None) for f in found] == [(7, "warning", True)]


def test_find_root_follows_names_and_multipliers():
    code = textwrap.dedent("""\
        import torch.nn as nn
        WIDTH = 650
        class M(nn.Module):
            def __init__(self, w=WIDTH):
                super().__init__()
                self.w = w
                inner = 4 * self.w
                self.fc = nn.Linear(self.w, inner)
                self.g = nn.Linear(self.w + 1, 8)
        """)
    tree = ast.parse(code)
    ctx = FileContext("<t>", code, tree, Settings())
    ctx.walk_and_bucket(set())
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "Linear"]
    root_in = find_root(ctx, calls[0].args[0])
    root_out = find_root(ctx, calls[0].args[1])
    assert root_in.kind == root_out.kind == "literal"
    assert root_in.node is root_out.node and root_in.node.value == 650
    assert (root_in.mult, root_out.mult) == (1, 4)
    assert root_out.names == ("inner", "w", "w", "WIDTH")
    assert find_root(ctx, calls[1].args[0]) is None


def test_arithmetic_helpers():
    assert next_multiple(50257, 8) == 50264 and next_multiple(50257, 64) == 50304 and next_multiple(768, 8) == 768
    assert lcm(8, 12) == 24 and lcm(8, 10) == 40 and lcm(64) == 64


@hsettings(max_examples=40, deadline=None)
@given(st.integers(min_value=1, max_value=70000), st.sampled_from([8, 16, 64]))
def test_literal_sizes_property(n, alignment):
    code = f"import torch.nn as nn\nfc = nn.Linear(512, {n})\n"
    found = _lint(code, alignment=alignment)
    flagged = n % alignment != 0 and n >= 64  # out_features: heads below 64 are quiet
    assert bool(found) == flagged
    found_in = _lint(f"import torch.nn as nn\nfc = nn.Linear({n}, 512)\n", alignment=alignment)
    assert bool(found_in) == (n % alignment != 0 and n >= 32)  # in_features: below 32 is the data's
    if flagged:
        assert f"pad to {next_multiple(n, alignment)}" in found[0].message
        assert _fix(code, alignment=alignment) == f"import torch.nn as nn\nfc = nn.Linear(512, {next_multiple(n, alignment)})\n"


def test_class_in_a_function_or_config_name_is_not_a_class_count():
    code = textwrap.dedent("""\
        from dataclasses import dataclass
        import torch.nn as nn
        @dataclass
        class ClassifierConfig:
            hidden: int = 1000
            num_classes: int = 1001
        def build_classifier(width=650, cfg: ClassifierConfig = None):
            return nn.Sequential(nn.Linear(width, 512), nn.Linear(512, cfg.num_classes))
        """)
    found = _lint(code)
    assert [f.line for f in found] == [8] and "in_features is 650" in found[0].message


def test_same_config_class_in_two_folders_pairs_by_folder(amplint):
    got = findings(amplint, "fixtures")
    definition = [f for f in got if f["path"] == "fixtures/dims/bert/configuration_bert.py"]
    assert len(definition) == 1
    assert {r["path"] for r in definition[0]["related"]} == {"fixtures/dims/bert/modeling_bert.py"}


def test_unannotated_config_across_files(tmp_path, amplint):
    (tmp_path / "conf.py").write_text(textwrap.dedent("""\
        from dataclasses import dataclass
        @dataclass
        class ModelArgs:
            dim: int = 4096
            n_heads: int = 32
            vocab_size: int = 32001
        """))
    (tmp_path / "model.py").write_text(textwrap.dedent("""\
        import torch.nn as nn
        class Transformer(nn.Module):
            def __init__(self, params):
                super().__init__()
                self.tok = nn.Embedding(params.vocab_size, params.dim)
                self.out = nn.Linear(params.dim, params.vocab_size, bias=False)
        """))
    got = sorted((os.path.basename(f["path"]), f["line"], f["fix"] is not None) for f in findings(amplint, str(tmp_path)))
    assert got == [("conf.py", 6, True), ("model.py", 5, False), ("model.py", 6, False)]
    amplint("fix", str(tmp_path), "--unsafe-fixes", "--no-cache")
    assert "vocab_size: int = 32008" in (tmp_path / "conf.py").read_text()
    assert findings(amplint, str(tmp_path)) == []


def test_position_table_across_files_is_not_a_vocabulary(tmp_path, amplint):
    (tmp_path / "configuration_roberta.py").write_text(textwrap.dedent("""\
        class RobertaConfig:
            def __init__(self, vocab_size=50265, hidden_size=768, max_position_embeddings=514, pad_token_id=1):
                self.vocab_size = vocab_size
                self.hidden_size = hidden_size
                self.max_position_embeddings = max_position_embeddings
        """))
    (tmp_path / "modeling_roberta.py").write_text(textwrap.dedent("""\
        import torch.nn as nn
        from configuration_roberta import RobertaConfig
        class Embeddings(nn.Module):
            def __init__(self, config: RobertaConfig):
                super().__init__()
                self.words = nn.Embedding(config.vocab_size, config.hidden_size)
                self.positions = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        """))
    got = sorted((os.path.basename(f["path"]), f["line"]) for f in findings(amplint, str(tmp_path)))
    # 50265 is RoBERTa's vocabulary (flagged at the use and at the definition); 514 positions are a lookup table
    assert got == [("configuration_roberta.py", 2), ("modeling_roberta.py", 6)]
