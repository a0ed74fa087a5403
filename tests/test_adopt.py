"""Adopting amplint on an existing codebase, through the command line: ``check
--add-noqa`` and the baseline (``--write-baseline`` / ``--baseline``)."""
import json
import os
import shutil

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MASK = "import torch\n\n\ndef attend(scores, mask):\n    return scores.masked_fill(mask, -1e9).softmax(-1)\n"


@pytest.fixture
def fixtures_copy(tmp_path):
    dest = tmp_path / "fixtures"
    shutil.copytree(os.path.join(ROOT, "fixtures"), dest)
    return dest


def _snapshot(folder):
    return {p: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_add_noqa_silences_every_finding_once_and_keeps_other_bytes(fixtures_copy, amplint):
    before = _snapshot(fixtures_copy)
    first = amplint("check", "--no-cache", "--format", "json", ".", cwd=fixtures_copy)
    assert first.returncode == 1 and json.loads(first.stdout)
    proc = amplint("check", "--no-cache", "--add-noqa", ".", cwd=fixtures_copy)
    assert proc.returncode == 0, proc.stderr
    assert "Added " in proc.stderr and "noqa" in proc.stderr
    after = _snapshot(fixtures_copy)
    assert after != before
    for path, old in before.items():
        new = after[path]
        if new == old:
            continue
        # only text appended at the end of lines: every old line is a prefix of its new line
        old_lines, new_lines = old.splitlines(keepends=True), new.splitlines(keepends=True)
        assert len(old_lines) == len(new_lines), path
        for o, n in zip(old_lines, new_lines):
            body = o.rstrip(b"\r\n")
            assert n.startswith(body.rstrip(b" \t")) and n.endswith(o[len(body):]), (path, o, n)
    second = amplint("check", "--no-cache", "--report-unused-suppressions", ".", cwd=fixtures_copy)
    assert second.returncode == 0, second.stdout
    assert "All checks passed" in second.stdout
    again = amplint("check", "--no-cache", "--add-noqa", ".", cwd=fixtures_copy)
    assert again.returncode == 0 and "Added 0 noqa codes" in again.stderr
    assert _snapshot(fixtures_copy) == after  # idempotent


def test_add_noqa_merges_codes_and_places_comments_where_suppression_looks(tmp_path, amplint):
    source = (
        "import torch\n"
        "\n"
        "\n"
        "def attend(scores, mask):\n"
        "    a = scores.masked_fill(mask, -1e9)  # noqa: E501\n"
        "    b = scores.masked_fill(\n"
        "        mask, -1e9)\n"
        "    c = scores.masked_fill(mask, -1e9) + \\\n"
        "        scores\n"
        "    d = scores.masked_fill(mask, -1e9 if '''\n"
        "''' else 0)\n"
        "    e = scores.masked_fill(mask, -1e9)  # amplint: ignore[AMP999]\n"
        "    return a, b, c, d, e\n"
    )
    model = tmp_path / "model.py"
    model.write_bytes(source.replace("\n", "\r\n").encode())
    assert amplint("check", "--no-cache", "--select", "AMP101", "model.py", cwd=tmp_path).returncode == 1
    proc = amplint("check", "--no-cache", "--select", "AMP101", "--add-noqa", "model.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = model.read_bytes().decode().split("\r\n")
    assert lines[4] == "    a = scores.masked_fill(mask, -1e9)  # noqa: E501, AMP101"
    assert lines[5] == "    b = scores.masked_fill("  # the finding is the -1e9 on the next line
    assert lines[6] == "        mask, -1e9)  # noqa: AMP101"
    assert lines[7].endswith("\\") and lines[8] == "        scores  # noqa: AMP101"  # never after a backslash
    assert lines[9].endswith("'''") and lines[10] == "''' else 0)  # noqa: AMP101"  # never inside a string
    assert lines[11] == "    e = scores.masked_fill(mask, -1e9)  # amplint: ignore[AMP999, AMP101]"
    assert model.read_bytes().count(b"\r\n") == source.count("\n")  # CRLF kept
    assert amplint("check", "--no-cache", "--select", "AMP101", "model.py", cwd=tmp_path).returncode == 0


def test_baseline_hides_recorded_findings_survives_line_shifts_and_reports_new_ones(fixtures_copy, amplint, tmp_path):
    baseline = tmp_path / "amplint-baseline.json"
    proc = amplint("check", "--no-cache", "--write-baseline", str(baseline), ".", cwd=fixtures_copy)
    assert proc.returncode == 0, proc.stderr
    recorded = json.loads(baseline.read_text())
    assert recorded["amplint-baseline"] == 1 and len(recorded["findings"]) > 20
    assert {"path", "code", "fingerprint", "line", "message"} <= set(recorded["findings"][0])
    assert all(f["path"].startswith("fixtures/") for f in recorded["findings"])  # relative to the baseline file

    clean = amplint("check", "--no-cache", "--baseline", str(baseline), ".", cwd=fixtures_copy)
    assert clean.returncode == 0, clean.stdout
    assert "All checks passed" in clean.stdout
    assert f"{len(recorded['findings'])} findings in the baseline" in clean.stderr

    # the same run from another folder: paths in the baseline are relative to the baseline file
    assert amplint("check", "--no-cache", "--baseline", str(baseline), "fixtures", cwd=tmp_path).returncode == 0

    # lines added above the findings and re-indentation elsewhere keep the baseline valid
    model = fixtures_copy / "constants" / "attention_masked_fill.py"
    model.write_text("# a new header comment\n\n\n" + model.read_text())
    assert amplint("check", "--no-cache", "--baseline", str(baseline), ".", cwd=fixtures_copy).returncode == 0

    # a hazard added after the baseline is reported, and only it
    (fixtures_copy / "new_model.py").write_text(MASK)
    text = model.read_text()
    model.write_text(text + "\n\ndef more(scores, mask):\n    return scores.masked_fill(mask, -1e9).softmax(-1)\n")
    new = amplint("check", "--no-cache", "--format", "json", "--baseline", str(baseline), ".", cwd=fixtures_copy)
    assert new.returncode == 1
    reported = json.loads(new.stdout)
    assert sorted((os.path.basename(f["path"]), f["code"]) for f in reported) == [
        ("attention_masked_fill.py", "AMP101"), ("new_model.py", "AMP101")]
    assert reported[0]["line"] > len(text.splitlines())


def test_same_flagged_code_twice_is_one_more_finding(tmp_path, amplint):
    (tmp_path / "m.py").write_text(MASK)
    baseline = tmp_path / "b.json"
    assert amplint("check", "--no-cache", "--write-baseline", "b.json", "m.py", cwd=tmp_path).returncode == 0
    (tmp_path / "m.py").write_text(MASK + "\n\ndef again(scores, mask):\n    return scores.masked_fill(mask, -1e9).softmax(-1)\n")
    proc = amplint("check", "--no-cache", "--format", "concise", "--baseline", str(baseline), "m.py", cwd=tmp_path)
    assert proc.returncode == 1 and proc.stdout.count("AMP101") == 1


def test_bad_baseline_is_one_line_exit_2(tmp_path, amplint):
    (tmp_path / "m.py").write_text(MASK)
    (tmp_path / "b.json").write_text("{not json")
    proc = amplint("check", "--baseline", "b.json", "m.py", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith("amplint: error: --baseline b.json: ") and proc.stdout == ""
    proc = amplint("check", "--baseline", "missing.json", "m.py", cwd=tmp_path)
    assert proc.returncode == 2 and "missing.json" in proc.stderr
