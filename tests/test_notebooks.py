"""Jupyter notebooks (issue 25): ``check``/``fix`` on ``.ipynb``, code cells linted as one
module, findings by cell, fixes written back with every byte outside the edited cells kept."""
import json

import yaml

NOTEBOOK = {
    "cells": [
        {"cell_type": "markdown", "metadata": {}, "source": ["# A model ü\n", "notes"]},
        {"cell_type": "code", "execution_count": 1, "metadata": {"tags": ["setup"]}, "outputs": [],
         "source": ["%matplotlib inline\n", "import torch\n", "!pip install einops\n", "files = !ls\n", "torch?\n",
                    "NEG = -1e9"]},
        {"cell_type": "code", "execution_count": 2, "metadata": {},
         "outputs": [{"name": "stdout", "output_type": "stream", "text": ["ok é\n"]}],
         "source": ["def attend(scores, mask):\n", "    s = 'é'  # a non-ASCII line\n",
                    "    return scores.masked_fill(mask, NEG).softmax(-1)\n", "\n", "from apex import amp"]},
        {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
         "source": "%%bash\nfor i in 1 2; do echo $i; done\n"},
        {"cell_type": "raw", "metadata": {}, "source": ["x = masked_fill(-1e9)"]},
    ],
    "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
    "nbformat": 4, "nbformat_minor": 5,
}


def _write(path, notebook=NOTEBOOK):
    text = json.dumps(notebook, indent=1, ensure_ascii=False) + "\n"  # nbformat's own layout
    path.write_text(text, encoding="utf-8")
    return text.encode("utf-8")


def test_check_reports_findings_by_cell_and_skips_magics(tmp_path, amplint):
    _write(tmp_path / "nb.ipynb")
    proc = amplint("check", "--no-cache", "--format", "concise", cwd=tmp_path)  # found by the folder walk
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("nb.ipynb:cell 3:3:37: AMP101 ")  # cell 3 counts the markdown cell
    assert lines[1].startswith("nb.ipynb:cell 3:5:1: AMP501 ")
    assert "error:" not in proc.stderr  # the magics, shell lines and the %%bash cell are not syntax errors
    text = amplint("check", "--no-cache", "nb.ipynb", cwd=tmp_path).stdout
    assert "nb.ipynb:cell 3:3:37: AMP101" in text and "3 |     return scores.masked_fill(mask, NEG)" in text
    assert "(nb.ipynb:cell 2:6:" in text  # the related note: where NEG is defined
    found = json.loads(amplint("check", "--no-cache", "--format", "json", "nb.ipynb", cwd=tmp_path).stdout)
    assert (found[0]["cell"], found[0]["line"], found[0]["column"]) == (3, 3, 37)


def test_fix_writes_back_only_the_edited_cells(tmp_path, amplint):
    before = _write(tmp_path / "nb.ipynb")
    proc = amplint("fix", "--no-cache", "--unsafe-fixes", "nb.ipynb", cwd=tmp_path)
    assert proc.returncode in (0, 1), proc.stderr
    after = (tmp_path / "nb.ipynb").read_bytes()
    fixed = json.loads(after)
    assert fixed["cells"][2]["source"][4] == "from amplint import amp"
    assert fixed["cells"][2]["source"][2] == "    return scores.masked_fill(mask, torch.finfo(scores.dtype).min).softmax(-1)\n"
    # byte for byte outside the source lines that changed
    old_lines, new_lines = before.split(b"\n"), after.split(b"\n")
    assert len(old_lines) == len(new_lines)
    changed = [i for i, (a, b) in enumerate(zip(old_lines, new_lines)) if a != b]
    assert changed and all(b"amp" in new_lines[i] or b"finfo" in new_lines[i] for i in changed), changed
    assert fixed["cells"][1]["source"][:5] == NOTEBOOK["cells"][1]["source"][:5]  # magics back as they were
    assert fixed["cells"][3] == NOTEBOOK["cells"][3] and fixed["cells"][2]["outputs"] == NOTEBOOK["cells"][2]["outputs"]
    again = amplint("fix", "--no-cache", "--unsafe-fixes", "nb.ipynb", cwd=tmp_path)
    assert (tmp_path / "nb.ipynb").read_bytes() == after and "Fixed" not in again.stdout


def test_a_broken_notebook_is_one_error_line(tmp_path, amplint):
    (tmp_path / "bad.ipynb").write_text('{"cells": [ {"cell_type": "code", "source": [}\n')
    (tmp_path / "m.py").write_text("from apex import amp\n")
    proc = amplint("check", "--no-cache", cwd=tmp_path)
    assert proc.returncode == 2 and "bad.ipynb:1:" in proc.stderr and "not a notebook: invalid JSON" in proc.stderr
    assert "m.py:1:1: AMP501" in proc.stdout
    (tmp_path / "bad.ipynb").write_text('{"cells": [{"cell_type": "code", "source": [1]}, 2]}')
    proc = amplint("check", "--no-cache", "bad.ipynb", cwd=tmp_path)
    assert proc.returncode == 2 and "bad.ipynb:1:1: error: not a notebook: cell 1 is not a cell with a text source" in proc.stderr
    syntax = dict(NOTEBOOK, cells=[{"cell_type": "code", "metadata": {}, "outputs": [], "source": ["import torch\n", "def f(:\n"]}])
    _write(tmp_path / "bad.ipynb", syntax)
    proc = amplint("check", "--no-cache", "bad.ipynb", cwd=tmp_path)
    assert proc.returncode == 2 and "bad.ipynb:cell 1:2:" in proc.stderr


def test_pre_commit_hooks_take_notebooks():
    import os

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, ".pre-commit-hooks.yaml")) as fh:
        for hook in yaml.safe_load(fh):
            assert "jupyter" in hook["types_or"]


def test_fix_from_stdin_writes_the_notebook_to_stdout(tmp_path, amplint):
    before = _write(tmp_path / "nb.ipynb")
    proc = amplint("fix", "--stdin-filename", "nb.ipynb", cwd=tmp_path, input=before.decode())
    assert proc.returncode == 0, proc.stderr
    fixed = json.loads(proc.stdout)  # the notebook, not the cells' module text
    assert fixed["cells"][2]["source"][4] == "from amplint import amp"
    assert fixed["metadata"] == NOTEBOOK["metadata"] and (tmp_path / "nb.ipynb").read_bytes() == before


def test_structured_formats_point_at_the_notebook_and_name_the_cell(tmp_path, amplint):
    """SARIF, GitLab, JUnit and GitHub cannot show a module line of a notebook (it is no
    line of the .ipynb's JSON): line 1 of the file, the cell in the message, as Ruff does."""
    import xml.etree.ElementTree as ET

    _write(tmp_path / "nb.ipynb")
    run = lambda fmt: amplint("check", "--no-cache", "--format", fmt, "nb.ipynb", cwd=tmp_path).stdout  # noqa: E731
    sarif = json.loads(run("sarif"))["runs"][0]["results"]
    amp101 = next(r for r in sarif if r["ruleId"] == "AMP101")
    assert amp101["locations"][0]["physicalLocation"]["region"] == {"startLine": 1, "startColumn": 1}
    assert amp101["message"]["text"].startswith("cell 3:3:37: ") and "fixes" not in amp101
    assert amp101["properties"]["notebook"] == {"cell": 3, "line": 3, "column": 37}
    gitlab = next(i for i in json.loads(run("gitlab")) if i["check_name"] == "AMP101")
    assert gitlab["location"]["lines"] == {"begin": 1, "end": 1} and gitlab["description"].startswith("cell 3:3:37: ")
    case = next(c for c in ET.fromstring(run("junit")).iter("testcase") if "AMP101" in c.get("name"))
    assert case.get("name").endswith("at nb.ipynb:cell 3:3:37") and case.get("line") == "1"
    github = next(line for line in run("github").splitlines() if "AMP101" in line)
    assert github.startswith("::error file=nb.ipynb,line=1,col=1,title=") and "::cell 3:3:37: AMP101 " in github
