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


# --- discovery ----------------------------------------------------------------------

APEX = "from apex import amp\n"


def _linted(proc):
    return sorted(line.split(":")[0] for line in proc.stdout.splitlines() if ": AMP" in line)


def test_gitignore_and_ignore_files_are_respected_when_walking(tmp_path, amplint):
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "info").mkdir()
    (tmp_path / ".git" / "info" / "exclude").write_text("local_only.py\n")
    (tmp_path / ".gitignore").write_text("# generated code\ngenerated/\n/top_only.py\n*_tmp.py\n!keep_tmp.py\n")
    for name in ("train.py", "local_only.py", "top_only.py", "x_tmp.py", "keep_tmp.py"):
        (tmp_path / name).write_text(APEX)
    for folder in ("generated", "src", "src/sub"):
        (tmp_path / folder).mkdir()
    (tmp_path / "generated" / "model.py").write_text(APEX)
    (tmp_path / "src" / "top_only.py").write_text(APEX)  # /top_only.py is anchored to the root
    (tmp_path / "src" / ".gitignore").write_text("secret.py\nsub/\n")
    (tmp_path / "src" / "secret.py").write_text(APEX)
    (tmp_path / "src" / "sub" / "deep.py").write_text(APEX)
    (tmp_path / "src" / ".ignore").write_text("!secret.py\n")  # .ignore wins over .gitignore in its folder
    src = tmp_path / "src"
    proc = amplint("check", "--no-cache", "--format", "concise", cwd=tmp_path)
    assert _linted(proc) == ["keep_tmp.py", "src/secret.py", "src/top_only.py", "train.py"]
    # from a subfolder: the root's .gitignore still applies, and paths are relative to the current folder
    (src / "x_tmp.py").write_text(APEX)
    proc = amplint("check", "--no-cache", "--format", "concise", ".", cwd=src)
    assert _linted(proc) == ["secret.py", "top_only.py"]
    everything = amplint("check", "--no-cache", "--format", "concise", "--no-respect-gitignore", cwd=tmp_path)
    assert len(_linted(everything)) == 10
    # a file named on the command line is linted, unless --force-exclude
    assert _linted(amplint("check", "--no-cache", "--format", "concise", "x_tmp.py", cwd=tmp_path)) == ["x_tmp.py"]
    assert amplint("check", "--no-cache", "--force-exclude", "x_tmp.py", "generated/model.py", cwd=tmp_path).returncode == 0


def test_force_exclude_applies_exclude_to_named_files(tmp_path, amplint):
    (tmp_path / "pyproject.toml").write_text("[tool.amplint]\nexclude = ['vendor/*']\n")
    (tmp_path / "vendor").mkdir()
    (tmp_path / "vendor" / "old.py").write_text(APEX)
    assert amplint("check", "--no-cache", cwd=tmp_path).returncode == 0
    assert amplint("check", "--no-cache", "vendor/old.py", cwd=tmp_path).returncode == 1  # named: linted (Ruff's way)
    assert amplint("check", "--no-cache", "--force-exclude", "vendor/old.py", cwd=tmp_path).returncode == 0
    assert amplint("fix", "--no-cache", "--force-exclude", "vendor/old.py", cwd=tmp_path).returncode == 0
    assert (tmp_path / "vendor" / "old.py").read_text() == APEX


def test_paths_are_printed_without_a_dot_slash_prefix(tmp_path, amplint):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "model.py").write_text(APEX)
    for args in ((), (".",), ("./src",), ("./src/model.py",)):
        proc = amplint("check", "--no-cache", "--format", "concise", *args, cwd=tmp_path)
        assert proc.stdout.startswith("src/model.py:1:1: AMP501"), (args, proc.stdout)
    proc = amplint("check", "--no-cache", "--format", "concise", "../src", cwd=tmp_path / "src")
    assert proc.stdout.startswith("../src/model.py:1:1: AMP501")
