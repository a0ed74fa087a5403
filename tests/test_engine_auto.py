"""engine = "auto" (issue 13): the engine comes from the linted project, fixes respect it."""
import json
import os
import shutil

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENGINES = os.path.join(ROOT, "fixtures", "engines")
FIXTURES = os.path.join(ROOT, "fixtures")


def findings(amplint, *args):
    proc = amplint("check", "--no-cache", "--format", "json", *args)
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("folder,engine", [
    ("apex", "apex.amp"), ("amplint_engine", "amplint.amp"), ("none", "amplint"),
    ("autocast", None), ("lightning", None), ("transformers", None), ("accelerate", None),
])
def test_engine_per_framework(folder, engine, amplint):
    found = [f for f in findings(amplint, os.path.join(ENGINES, folder), "--select", "AMP401")]
    if engine is None:  # torch.autocast casts einsum itself
        assert found == []
        return
    assert len(found) == 1 and f"[engine {engine} (auto:" in found[0]["message"]
    if folder != "none":
        assert [r["path"].endswith("train.py") for r in found[0]["related"]] == [True]
        # the model file names the training script; no amp import is inserted into it
        assert found[0]["fix"]["applicability"] == "display" and "train.py" in found[0]["fix"]["description"]
    expected_import = {"apex": "from apex import amp", "amplint_engine": "from amplint import amp", "none": "from amplint import amp"}
    assert expected_import[folder] in found[0]["fix"]["description"]


def test_engine_option_and_config_override(tmp_path, amplint):
    shutil.copytree(os.path.join(ENGINES, "autocast"), tmp_path / "p")
    assert findings(amplint, str(tmp_path / "p"), "--select", "AMP401") == []
    assert len(findings(amplint, str(tmp_path / "p"), "--select", "AMP401", "--engine", "amplint")) == 1
    (tmp_path / "p" / "pyproject.toml").write_text('[tool.amplint]\nengine = "apex"\n')
    found = findings(amplint, str(tmp_path / "p"), "--select", "AMP401")
    assert len(found) == 1 and "[engine" not in found[0]["message"]  # named, not assumed
    assert findings(amplint, str(tmp_path / "p"), "--select", "AMP401", "--engine", "torch") == []


def test_detected_target_unless_set(tmp_path, amplint):
    (tmp_path / "model.py").write_text(
        "import torch\nfrom torch import nn\n\nclass A(nn.Module):\n    def forward(self, s, m):\n"
        "        return s.masked_fill(m, -1e9).softmax(-1)\n")
    assert len(findings(amplint, str(tmp_path), "--select", "AMP101")) == 1
    (tmp_path / "train.py").write_text("import lightning as L\ntrainer = L.Trainer(precision='bf16-mixed')\n")
    assert findings(amplint, str(tmp_path), "--select", "AMP101") == []  # bf16 holds -1e9
    assert len(findings(amplint, str(tmp_path), "--select", "AMP101", "--target", "fp16")) == 1


def test_registration_goes_into_the_initialize_file(tmp_path, amplint):
    (tmp_path / "train.py").write_text(
        "import torch\nfrom torch import nn\nfrom apex import amp\n\nclass M(nn.Module):\n    def forward(self, a):\n"
        "        return torch.einsum('ij,jk->ik', a, a)\n\nmodel = amp.initialize(M(), opt_level='O1')\n")
    proc = amplint("fix", "--no-cache", "--select", "AMP401", str(tmp_path))
    text = (tmp_path / "train.py").read_text()
    assert 'from apex import amp\namp.register_half_function(torch, "einsum")\n' in text, proc.stdout + text
    assert "amplint" not in text


def test_no_fix_inserts_an_amplint_import_into_a_project_without_it(tmp_path, amplint):
    """Every fixture folder whose files never import amplint: `fix --unsafe-fixes` adds none."""
    shutil.copytree(FIXTURES, tmp_path / "f", ignore=shutil.ignore_patterns("*.fixed", "*-fixed", "__pycache__"))
    before = {}
    for folder, _, files in os.walk(tmp_path / "f"):
        for name in files:
            if name.endswith(".py"):
                before[os.path.join(folder, name)] = open(os.path.join(folder, name), encoding="utf-8").read()
    proc = amplint("fix", "--no-cache", "--unsafe-fixes", str(tmp_path / "f"))
    assert proc.returncode in (0, 1, 2), proc.stderr
    projects_with_amplint = {os.path.dirname(p) for p, t in before.items() if "amplint" in t}
    for path, old in before.items():
        new = open(path, encoding="utf-8").read()
        added = new.count("from amplint import") + new.count("import amplint") - old.count("from amplint import") - old.count("import amplint")
        if added:
            assert os.path.dirname(path) in projects_with_amplint or "apex" in old, path


def _golden_folders():
    out = set()
    for folder, _, files in os.walk(FIXTURES):
        if any(n.endswith((".py.fixed", ".py.unsafe-fixed")) for n in files):
            out.add(folder)
    return sorted(out)


@pytest.mark.parametrize("folder", _golden_folders(), ids=lambda f: os.path.relpath(f, FIXTURES))
def test_fix_then_unsafe_equals_unsafe(folder, tmp_path, amplint):
    """`fix` followed by `fix --unsafe-fixes` writes what `fix --unsafe-fixes` writes alone."""
    ignore = shutil.ignore_patterns("*.fixed", "*-fixed", "__pycache__")
    shutil.copytree(folder, tmp_path / "one", ignore=ignore)
    shutil.copytree(folder, tmp_path / "two", ignore=ignore)
    amplint("fix", "--no-cache", "--unsafe-fixes", str(tmp_path / "one"))
    amplint("fix", "--no-cache", str(tmp_path / "two"))
    amplint("fix", "--no-cache", "--unsafe-fixes", str(tmp_path / "two"))
    for name in sorted(os.listdir(tmp_path / "one")):
        if name.endswith(".py"):
            assert (tmp_path / "one" / name).read_text() == (tmp_path / "two" / name).read_text(), name


@pytest.mark.parametrize("folder,line,what", [
    ("pure_half", 6, "model.half()"), ("pure_half_pretrained", 12, "from_pretrained(torch_dtype=torch.float16)")])
def test_a_whole_model_cast_to_half_is_pure_half_training(folder, line, what, tmp_path, amplint):
    """`model.half()` / `model.to(torch.float16)` as a statement and `torch_dtype=torch.float16`
    mean pure-half training (diffusers, the maintainer-fixes benchmark): nothing is upcast, so a
    softmax in half is a warning with a fix, as at O2; alone, the model file stays O1 `info`."""
    shutil.copytree(os.path.join(ENGINES, folder), tmp_path / "p")
    project = str(tmp_path / "p")
    (found,) = findings(amplint, project, "--select", "AMP301")
    assert found["severity"] == "warning" and found["fix"]["applicability"] == "safe", found
    assert "[engine pure half (auto: " in found["message"] and found["message"].endswith("train.py:%d)]" % line)
    assert [r["path"].endswith("train.py") and r["line"] == line for r in found["related"]] == [True]
    assert what in found["related"][0]["note"] and "opt level O2" in found["related"][0]["note"]
    (alone,) = findings(amplint, str(tmp_path / "p" / "model.py"), "--select", "AMP301")
    assert alone["severity"] == "info" and alone["fix"] is None
    # a configured opt level is how the project trains; the cast decides nothing then
    (o1,) = findings(amplint, project, "--select", "AMP301", "--opt-level", "O1")
    assert o1["severity"] == "info" and "[engine pure half" not in o1["message"]
    # an autocast setup wins: half weights under autocast still get its fp32 softmax
    (tmp_path / "p" / "loop.py").write_text("import torch\nwith torch.autocast('cuda'):\n    pass\n")
    (ac,) = findings(amplint, project, "--select", "AMP301")
    assert "torch.autocast" in ac["message"] and ac["severity"] == "info"
