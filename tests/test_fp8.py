"""fp8 readiness through the command line: the AMP7xx rules with the project's fp8 setup,
`amplint fp8-plan` (its filter accepted by torchao's convert_to_float8_training), and
`amplint verify --target fp8` on CPU emulation (and its message without torchao).

The rules' own examples run in tests/test_rule_examples.py, the fixture corpus
(fixtures/fp8) in tests/test_fixtures.py."""
from __future__ import annotations

import importlib.util
import json
import os
import textwrap

import pytest

from amplint.fp8.gemm import BREAK_EVEN, fit_break_even

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = os.path.join("fixtures", "fp8", "tiny_lm.py")
HAS_TORCHAO = importlib.util.find_spec("torchao") is not None
needs_torchao = pytest.mark.skipif(not HAS_TORCHAO, reason="torchao is the fp8 extra (pip install -e '.[dev]' installs it)")


def test_break_even_is_the_fit_of_the_recorded_h200_run():
    """The constants AMP703 and the plan use are what bench/fp8_gemm.py measured, not typed."""
    with open(os.path.join(ROOT, "bench", "fp8_results", "fp8_gemm_h200.json")) as f:
        rows = json.load(f)["rows"]
    for recipe, be in BREAK_EVEN.items():
        fitted = fit_break_even(rows, recipe)
        assert (fitted.mkn, fitted.min_side) == (be.mkn, be.min_side), recipe


def _project(tmp_path, files: dict) -> str:
    for name, text in files.items():
        (tmp_path / name).write_text(textwrap.dedent(text))
    (tmp_path / "pyproject.toml").write_text('[tool.amplint]\ntarget = "fp8"\n')
    return str(tmp_path)


MODEL = """
    import torch.nn as nn
    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn_out = nn.Linear(768, 768)
            self.lm_head = nn.Linear(768, 50304)
"""


@pytest.mark.parametrize("script, label", [
    ("import transformer_engine.pytorch as te\nwith te.fp8_autocast(enabled=True):\n    pass\n", "TransformerEngine (train.py:1)"),
    ('converters = ["quantize.linear.float8"]\n', "torchtitan quantize.linear.float8 (train.py:1)"),
    ("from torchao.float8 import convert_to_float8_training\nimport torch\nconvert_to_float8_training(m)\nm = torch.compile(m)\n",
     "torchao convert_to_float8_training (train.py:3)"),
])
def test_findings_name_the_fp8_setup_the_project_uses(amplint, tmp_path, script, label):
    root = _project(tmp_path, {"model.py": MODEL, "train.py": script})
    proc = amplint("check", ".", "--format", "json", "--no-cache", cwd=root)
    findings = {f["code"]: f for f in json.loads(proc.stdout) if f["code"].startswith("AMP7")}
    assert f"fp8 setup: {label}" in findings["AMP704"]["message"], proc.stdout
    # the break-even is torchao's: not claimed for TransformerEngine's own kernels
    assert ("AMP703" in findings) == (not label.startswith("TransformerEngine"))


def test_fp8_rules_are_off_for_other_targets(amplint, tmp_path):
    root = _project(tmp_path, {"model.py": MODEL})
    proc = amplint("check", ".", "--target", "bf16", "--format", "json", "--no-cache", cwd=root)
    assert not [f for f in json.loads(proc.stdout) if f["code"].startswith("AMP7")]


def test_rowwise_recipe_of_the_project_sets_the_break_even(amplint, tmp_path):
    root = _project(tmp_path, {
        "model.py": "import torch.nn as nn\nmlp = nn.Linear(4096, 4096)\n",
        "train.py": "import torch\nfrom torchao.float8 import Float8LinearConfig\n"
                    "config = Float8LinearConfig.from_recipe_name('rowwise')\ntorch.compile(m)\n",
    })
    proc = amplint("check", ".", "--format", "json", "--no-cache", cwd=root)
    (finding,) = [f for f in json.loads(proc.stdout) if f["code"] == "AMP703"]
    assert "rowwise break-even" in finding["message"]


def test_fp8_plan_text_and_written_filter(amplint, tmp_path):
    out = tmp_path / "fp8_filter.py"
    proc = amplint("fp8-plan", TINY, "--tokens", "16384", "--write", str(out))
    assert proc.returncode == 0, proc.stderr
    lines = {line.split()[1]: line.split()[0] for line in proc.stdout.splitlines() if line.startswith("  ")}
    assert lines == {"up": "convert", "down": "convert", "side": "keep", "lm_head": "keep"}
    assert "AMP702" in proc.stdout and "AMP704" in proc.stdout and "mix (1024, 1000)" in proc.stdout
    text = out.read_text()
    assert "def module_filter_fn(module, fqn):" in text and '"lm_head"' in text
    # without --tokens the example's 16 tokens make every GEMM too small: all kept, AMP703
    proc = amplint("fp8-plan", TINY, "--format", "json")
    data = json.loads(proc.stdout)
    assert data["converted"] == 0 and {layer["code"] for layer in data["layers"]} == {"AMP702", "AMP703", "AMP704"}


@needs_torchao
def test_written_filter_is_accepted_by_convert_to_float8_training(amplint, tmp_path):
    out = tmp_path / "fp8_filter.py"
    assert amplint("fp8-plan", TINY, "--tokens", "16384", "--write", str(out)).returncode == 0
    from torchao.float8 import convert_to_float8_training
    from torchao.float8.float8_linear import Float8Linear

    spec = importlib.util.spec_from_file_location("fp8_filter_under_test", out)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    tiny_spec = importlib.util.spec_from_file_location("tiny_lm_under_test", os.path.join(ROOT, TINY))
    tiny = importlib.util.module_from_spec(tiny_spec)
    tiny_spec.loader.exec_module(tiny)
    model, _ = tiny.example()
    convert_to_float8_training(model, module_filter_fn=module.module_filter_fn)
    converted = {fqn for fqn, m in model.named_modules() if isinstance(m, Float8Linear)}
    assert converted == {"up", "down"}


def test_fp8_plan_bad_target_is_one_line(amplint, tmp_path):
    proc = amplint("fp8-plan", str(tmp_path / "missing.py"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "no such file" in proc.stderr


@needs_torchao
def test_verify_fp8_on_cpu_emulation(amplint, tmp_path):
    """The CI run: bf16 against emulated fp8 for 3 steps, per-layer stats, HTML report (~30 s:
    two trainings of a 10M-parameter model and torchao's import)."""
    report = tmp_path / "fp8.html"
    # --tolerance 0.1: by the third step the tiny model's loss is 0.14, so the relative
    # bf16/fp8 difference moves with the CPU's matmul kernels (0.0508 on one x86 machine, under
    # 0.05 on another); what this test checks is the run and its report, not that margin
    proc = amplint("verify", "--target", "fp8", TINY, "--tokens", "16384", "--format", "json", "--report", str(report),
                   "--threads", "1", "--tolerance", "0.1")
    assert proc.returncode == 0, proc.stderr
    (data,) = json.loads(proc.stdout)
    assert data["emulated"] and data["plan"]["converted"] == 2
    assert len(data["fp8_losses"]) == 3 and 0 < data["loss_difference"] < 0.1
    stats = {s["fqn"]: s for s in data["layers"]}
    assert stats["up"]["verdict"] == "convert" and stats["up"]["input_amax"] > 0
    assert 0 < stats["up"]["output_error"] < 0.2  # e4m3 rounding of input and weight: a few %
    assert stats["lm_head"]["verdict"] == "keep" and stats["lm_head"]["output_error"] is None
    page = report.read_text()
    assert "output error vs bf16" in page and "AMP704" in page and ">up<" in page


def test_verify_fp8_without_torchao_says_how_to_install(amplint, tmp_path):
    shadow = tmp_path / "shadow" / "torchao"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('No module named torchao')\n")
    proc = amplint("verify", "--target", "fp8", TINY, env={"PYTHONPATH": str(tmp_path / "shadow")})
    assert proc.returncode == 2
    assert 'pip install "amplint[fp8]"' in proc.stderr and proc.stdout == ""


def test_torchao_is_optional_and_pinned():
    import tomllib

    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    assert not any("torchao" in r for r in project["dependencies"])
    assert any(r.startswith("torchao") for r in project["optional-dependencies"]["fp8"])
    with open(os.path.join(ROOT, "constraints.txt")) as f:
        assert "torchao==0.18.0" in f.read().split()


def test_a_regular_expression_compile_is_no_torch_compile(amplint, tmp_path):
    root = _project(tmp_path, {"train.py": "import re\nfrom torchao.float8 import convert_to_float8_training\n"
                                           "PATTERN = re.compile('x')\nconvert_to_float8_training(model)\n"})
    proc = amplint("check", ".", "--format", "json", "--no-cache", cwd=root)
    assert [f["line"] for f in json.loads(proc.stdout) if f["code"] == "AMP705"] == [4]
