"""What a lint costs: each file parsed and analysed as few times as its findings need
(bench/lint_speed.py measures the time; these tests pin the counts that time depends on)."""
import gc
import os
import subprocess
import sys
import weakref

import pytest

from amplint import engine, pipeline
from amplint.config import ConfigResolver

CONFIG = """\
from dataclasses import dataclass


@dataclass
class TinyConfig:
    hidden_size: int = 770
"""

# a transformers-style modeling file: uses the config field as a layer size (an AMP201
# fact for the config's file) and defines a ModelOutput dataclass (a config-like class,
# every default None)
MODELING = """\
from dataclasses import dataclass
from typing import Optional

import torch
from torch import nn


@dataclass
class {name}Output:
    logits: Optional[torch.Tensor] = None
    hidden_states: Optional[torch.Tensor] = None


class {name}Model(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.proj = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, x):
        return {name}Output(logits=self.proj(x))
"""


@pytest.fixture
def lint_counts(monkeypatch):
    """path -> how many times the engine linted it (one parse and analysis each)."""
    counts: dict[str, int] = {}
    real = engine.lint_text

    def counting(path, *args, **kwargs):
        counts[path] = counts.get(path, 0) + 1
        return real(path, *args, **kwargs)

    monkeypatch.setattr(pipeline, "lint_text", counting)  # what the pipeline's workers call
    return counts


def _check(paths):
    options = pipeline.RunOptions(use_cache=False, jobs=1)
    return {r.path: r for r in pipeline.run([str(p) for p in paths], ConfigResolver(), options)}


def test_a_file_is_linted_again_only_when_another_file_can_change_its_findings(tmp_path, lint_counts):
    """Each modeling file has AMP201 facts (its layer sizes) and a config-like dataclass
    whose defaults are all None: no fact of the other file can make a finding there.
    They were linted twice (48 of the 100 transformers files of bench/lint_speed.py)."""
    (tmp_path / "modeling_a.py").write_text(MODELING.format(name="A"))
    (tmp_path / "modeling_b.py").write_text(MODELING.format(name="B"))
    _check([tmp_path])
    assert lint_counts == {str(tmp_path / "modeling_a.py"): 1, str(tmp_path / "modeling_b.py"): 1}


def test_a_config_default_made_unaligned_by_another_file_is_still_found(tmp_path, lint_counts):
    (tmp_path / "configuration_tiny.py").write_text(CONFIG)
    (tmp_path / "modeling_a.py").write_text(MODELING.format(name="A"))
    results = _check([tmp_path])
    config = str(tmp_path / "configuration_tiny.py")
    assert [f.code for f in results[config].findings] == ["AMP201"]  # found with the modeling file's facts
    assert lint_counts[config] == 2


def test_a_task_frees_its_cyclic_tree_and_leaves_the_collector_as_it_was():
    """Tasks run with the cyclic collector paused (it traversed each file's tree many
    times); the task's cyclic garbage must still be gone when the task returns."""
    class Node:
        pass

    made = []

    def task(n):
        node, child = Node(), Node()
        node.child, child.parent = child, node  # a cycle, like the tree's parent links
        made.append(weakref.ref(node))
        assert not gc.isenabled()
        return n

    assert gc.isenabled()
    assert pipeline._map(task, [1, 2, 3], 1, (None,), None) == [1, 2, 3]
    assert gc.isenabled()
    assert all(ref() is None for ref in made)
    gc.disable()  # a caller that turned the collector off keeps it off
    try:
        assert pipeline._map(task, [4], 1, (None,), None) == [4]
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_no_tree_outlives_its_file(tmp_path):
    """Per-file facts live in the file's analyses, not in module-level maps keyed on its
    nodes: a weak map from a tree (or a config class) to values holding its nodes kept
    every tree of a run alive -- the values' parent links lead back to the key -- and the
    collector traversed them all again (3.5x the memory on 100 transformers files)."""
    script = MODELING.format(name="A") + "\n\nscaler = torch.cuda.amp.GradScaler()  # an fp16 setup: engine evidence\n"
    (tmp_path / "config.py").write_text(CONFIG)
    for name in "ABC":
        (tmp_path / f"model_{name}.py").write_text(script.replace("AModel", f"{name}Model"))
    probe = ("import ast, gc, sys\nfrom amplint.cli import main\n"
             "try:\n    main(['check', '.', '--no-cache', '-j', '1', '-q'])\nexcept SystemExit:\n    pass\n"
             "gc.collect()\nprint(sum(isinstance(o, ast.Module) for o in gc.get_objects()))\n")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "0", proc.stdout


def _imported(stderr: str) -> set[str]:
    """Module names from ``python -v`` lines (PYTHONVERBOSE=1: every module loaded, also
    through importlib, which ``-X importtime`` does not show)."""
    return {line.split("'")[1] for line in stderr.splitlines() if line.startswith("import '")}


def test_a_one_file_check_imports_only_what_it_uses(tmp_path, amplint):
    """Issue 16's cold one-file check: importlib.metadata (to find no plugin), every
    reporter (junit's xml.etree), the cache (hmac, secrets, tempfile) and the fixer's
    tempfile were a sixth of its CPU time."""
    (tmp_path / "model.py").write_text(MODELING.format(name="A") + "\n\ndef f(s, m):\n    return s.masked_fill(m, -1e9)\n")
    proc = amplint("check", "model.py", "--no-cache", cwd=tmp_path, env={"PYTHONVERBOSE": "1"})
    # what the interpreter loads before amplint runs (a site-packages .pth may import
    # tempfile, as this machine's does) is not amplint's cost
    startup = subprocess.run([sys.executable, "-c", "pass"], capture_output=True, text=True, cwd=tmp_path,
                             env=dict(os.environ, PYTHONVERBOSE="1"))
    imported = _imported(proc.stderr) - _imported(startup.stderr)
    assert "AMP101" in proc.stdout and {"amplint.engine", "amplint.reporters.text"} <= imported  # the measure works
    for module in ("importlib.metadata", "xml.etree.ElementTree", "amplint.reporters.junit", "amplint.cache",
                   "tempfile", "torch", "numpy"):
        assert module not in imported, module
    proc = amplint("check", "model.py", "--format", "junit", cwd=tmp_path, env={"PYTHONVERBOSE": "1"})
    assert proc.stdout.startswith("<?xml") and {"amplint.reporters.junit", "amplint.cache"} <= _imported(proc.stderr)
