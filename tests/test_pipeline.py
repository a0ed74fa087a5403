"""One lint pipeline (amplint/pipeline.py): ``amplint check`` / ``fix`` on disk and
``pipeline.lint_sources`` on text in memory (the language server, verify, ``fix --verify``)
run the same passes -- the second pass of a file whose cross-file question another file
answers, the fix rounds, the pieces of a large file -- and give the same findings."""
import json
import os
import subprocess
import sys
import textwrap

from amplint import pipeline
from amplint.config import ConfigResolver
from amplint.lsp_lint import DocumentLinter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CONFIG = """\
from dataclasses import dataclass


@dataclass
class TinyConfig:
    hidden_size: int = 770
"""

# uses the config's field as a layer size: the fact that makes AMP201 fire in the config's file
MODELING = """\
import torch
from torch import nn


class TinyModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.proj = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, x, mask):
        scores = self.proj(x)
        return scores.masked_fill(mask, -1e9)
"""

#: the real command line with the large-file size and the piece size made small (as
#: tests/test_robustness.py does), so that a test-sized file is cut into many pieces
_SMALL_PIECES = textwrap.dedent(
    """\
    import sys
    import amplint.pipeline as pipeline

    pipeline.LARGE_FILE, pipeline.PIECE = int(sys.argv[1]), int(sys.argv[2])
    from amplint.cli import main
    sys.exit(main(sys.argv[3:]))
    """
)

LARGE_HEAD = "import torch\nimport torch.nn.functional as F\nfrom torch import nn\n\nNEG = -1e9\n\n\n"
LARGE_BODY = textwrap.dedent(
    """\
    def helper_{i}(scores, mask):
        return torch.log(scores.masked_fill(mask, NEG) + 1e-8)


    class Block{i}(nn.Module):
        def forward(self, scores, mask):
            scores = scores.masked_fill(mask, -1e9)
            return F.softmax(scores, dim=-1).sum()


    """
)


def _key(path, line, column, code, message):
    return os.path.realpath(path), line, column, code, message


def _cli_findings(args, large=None, piece=None):
    """(path, line, column, code, message) of ``amplint check ARGS`` through the real CLI."""
    prefix = [sys.executable, "-m", "amplint"] if large is None else [sys.executable, "-c", _SMALL_PIECES,
                                                                       str(large), str(piece)]
    proc = subprocess.run([*prefix, "check", *args, "--no-cache", "--format", "json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, proc.stderr
    return sorted(_key(f["path"], f["line"], f["column"], f["code"], f["message"])
                  for f in json.loads(proc.stdout))


def _memory_findings(results):
    return sorted(_key(f.path, f.line, f.column, f.code, f.message) for r in results.values() for f in r.findings)


def test_lint_sources_runs_the_check_passes_of_amplint_check(tmp_path, monkeypatch):
    """A two-file project whose config file gets AMP201 only from the modeling file's facts
    (the second pass): ``lint_sources`` on the texts finds what ``amplint check`` finds on
    the files, each file linted as many times as ``check`` lints it (the config file
    twice: the first pass, then against the index)."""
    config, modeling = tmp_path / "configuration_tiny.py", tmp_path / "modeling_tiny.py"
    config.write_text(CONFIG)
    modeling.write_text(MODELING)
    on_disk = _cli_findings([str(tmp_path)])
    (in_project,) = [k for k in on_disk if k[0] == str(config.resolve())]
    (alone,) = _cli_findings([str(config)])
    assert in_project[3] == alone[3] == "AMP201"
    assert "modeling_tiny.py:8" in in_project[4] and "modeling_tiny.py" not in alone[4]  # the cross-file fact

    counts = {}
    real = pipeline.lint_text

    def counting(path, *args, **kwargs):
        counts[path] = counts.get(path, 0) + 1
        return real(path, *args, **kwargs)

    monkeypatch.setattr(pipeline, "lint_text", counting)
    pipeline.run([str(config), str(modeling)], ConfigResolver(), pipeline.RunOptions(use_cache=False, jobs=1))
    on_disk_counts, counts = counts, {}
    texts = {str(config): CONFIG, str(modeling): MODELING}
    results = pipeline.lint_sources(texts, ConfigResolver())
    assert _memory_findings(results) == on_disk
    assert counts == on_disk_counts and counts[str(config)] == 2  # the same passes: first, then against the index
    assert all(r.text == texts[p] and r.fixed == 0 and not r.errors for p, r in results.items())


def test_the_language_server_lints_a_document_as_check_lints_the_file(tmp_path):
    """The editor's document goes through the same pipeline as ``amplint check`` on the
    saved file: same findings (and ``fix`` of the document is ``amplint fix`` of the file)."""
    with open(os.path.join(ROOT, "fixtures", "constants", "attention_masked_fill.py"), encoding="utf-8") as fh:
        text = fh.read()  # findings with safe fixes
    path = tmp_path / "attention.py"
    path.write_text(text)
    linter = DocumentLinter(root=str(tmp_path))
    linted = linter.lint_text(path.as_uri(), text, 1)
    assert not linted.errors and linted.findings
    assert sorted(_key(str(path), f.line, f.column, f.code, f.message) for f in linted.findings) == \
        _cli_findings([str(path)])
    fixed = linter.fix_text(path.as_uri(), text)
    proc = subprocess.run([sys.executable, "-m", "amplint", "fix", str(path), "--no-cache"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode in (0, 1), proc.stderr
    assert fixed is not None and fixed == path.read_text()


def test_a_large_source_in_memory_is_linted_in_pieces_like_a_large_file(tmp_path, monkeypatch):
    """A source over LARGE_FILE given to ``lint_sources`` is cut into pieces as ``check``
    cuts the file (the large-file path works for text in memory, not only for files and
    stdin), with the findings of ``check`` -- in pieces and whole."""
    text = LARGE_HEAD + "".join(LARGE_BODY.format(i=i) for i in range(40))
    path = tmp_path / "big.py"
    path.write_text(text)
    whole = _cli_findings([str(path)])
    assert len(whole) > 100
    assert _cli_findings([str(path), "-j", "2"], large=1000, piece=3000) == whole

    pieces = []
    real = pipeline._lint_piece

    def counting(path, lines, first, end, *args):
        pieces.append((first, end))
        return real(path, lines, first, end, *args)

    monkeypatch.setattr(pipeline, "LARGE_FILE", 1000)
    monkeypatch.setattr(pipeline, "PIECE", 3000)
    monkeypatch.setattr(pipeline, "_lint_piece", counting)
    results = pipeline.lint_sources({str(path): text}, ConfigResolver())
    assert len(pieces) >= 4  # linted in pieces, in this process
    assert _memory_findings(results) == whole
    # fingerprints numbered over the whole file, as check numbers them
    check = subprocess.run([sys.executable, "-m", "amplint", "check", str(path), "--no-cache", "--format", "json"],
                           cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert sorted(f.fingerprint for f in results[str(path)].findings) == \
        sorted(f["fingerprint"] for f in json.loads(check.stdout))


def test_lint_sources_fixes_in_rounds_like_fix(tmp_path):
    """Fix mode of ``lint_sources`` is ``amplint fix``'s, rounds included: the fixed texts
    are what ``fix`` writes, and the findings left are what ``check`` then reports.  In
    the apex project the first round moves train.py from apex to amplint, which changes
    what model.py's AMP401 display fix must register with (`from amplint import amp`):
    one round would leave the apex advice."""
    import shutil

    shutil.copytree(os.path.join(ROOT, "fixtures", "engines", "apex"), tmp_path / "apex")
    shutil.copytree(os.path.join(ROOT, "fixtures", "dims", "bert"), tmp_path / "bert")
    paths = sorted(str(p) for p in tmp_path.rglob("*.py"))
    texts = {p: open(p, encoding="utf-8").read() for p in paths}
    results = pipeline.lint_sources(texts, ConfigResolver(), pipeline.LintMode(fix=True, unsafe=True))
    proc = subprocess.run([sys.executable, "-m", "amplint", "fix", str(tmp_path), "--unsafe-fixes", "--no-cache"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode in (0, 1), proc.stderr
    assert {p: r.text for p, r in results.items()} == {p: open(p, encoding="utf-8").read() for p in paths}
    assert sum(r.fixed for r in results.values()) > 0 and not any(r.errors for r in results.values())
    assert _memory_findings(results) == _cli_findings([str(tmp_path)])
    model = results[str(tmp_path / "apex" / "model.py")]
    assert any("from amplint import amp" in (f.fix.description if f.fix else "") for f in model.findings)
