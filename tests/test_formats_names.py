"""Every format parses whatever the file names (issue 25): a name that is not UTF-8, one
with a control character, one with a newline, one with XML/JSON metacharacters -- and a
file that fails to parse shows up where each format's consumer looks (SARIF results,
GitLab issues, JUnit errors)."""
import json
import os
import shutil
import subprocess
import sys
import xml.dom.minidom

import pytest

from test_output import _validator

MASK = "import torch\n\n\ndef attend(scores, mask):\n    return scores.masked_fill(mask, -1e9).softmax(-1)\n"
NAMES = [b"bad\xffname.py", b"ctl\x1bname.py", b"new\nline.py", b'weird&<>"name.py', "ünï#1.py".encode()]
FORMATS = ("text", "concise", "json", "sarif", "github", "gitlab", "junit")

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="names with any bytes: a Linux file system")


@pytest.fixture()
def odd_names(tmp_path):
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    for name in NAMES:
        with open(os.path.join(os.fsencode(repo), name), "wb") as fh:
            fh.write(MASK.encode())
    with open(os.path.join(os.fsencode(repo), b"broken\xfe.py"), "wb") as fh:
        fh.write(b"import torch\ndef f(:\n")
    return repo


def _check(amplint, repo, fmt, *more):
    proc = subprocess.run([shutil.which("amplint", path=os.path.dirname(sys.executable)), "check", "--no-cache",
                           "--format", fmt, *more, "."], cwd=repo, capture_output=True,
                          env={**os.environ, "LC_ALL": "C.UTF-8", "PYTHONIOENCODING": "utf-8"})  # stdout strict UTF-8
    assert b"Traceback" not in proc.stderr, proc.stderr.decode(errors="replace")
    assert proc.returncode == 2, (fmt, proc.returncode)  # findings and the syntax error
    return proc.stdout.decode("utf-8")  # always valid UTF-8


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_takes_any_file_name(odd_names, amplint, fmt, tmp_path):
    out = _check(amplint, odd_names, fmt)
    # a name that is not UTF-8 is written with its byte escaped; nothing forges a line
    if fmt in ("text", "concise"):
        assert "bad\\xffname.py:5:" in out and "ctl\\x1bname.py" in out and "new\\nline.py:5:" in out
        assert "\x1b" not in out
    if fmt in ("json", "gitlab"):
        paths = {i["path"] if fmt == "json" else i["location"]["path"] for i in json.loads(out)}
        assert {"bad\\xffname.py", "ctl\x1bname.py", "new\nline.py", 'weird&<>"name.py', "ünï#1.py"} <= paths
        if fmt == "gitlab":
            syntax = [i for i in json.loads(out) if i["check_name"] == "invalid-syntax"]
            assert [i["location"]["path"] for i in syntax] == ["broken\\xfe.py"] and syntax[0]["location"]["lines"]["begin"] == 2
    if fmt == "junit":
        xml.dom.minidom.parseString(out.encode())  # Python's parser
        if shutil.which("xmllint"):
            report = tmp_path / "r.xml"
            report.write_text(out, encoding="utf-8")
            lint = subprocess.run(["xmllint", "--noout", str(report)], capture_output=True, text=True)
            assert lint.returncode == 0, lint.stderr
        assert 'name="ctl\\x1bname.py"' in out and 'name="bad\\xffname.py"' in out
    if fmt == "sarif":
        doc = json.loads(out)
        errors = sorted(_validator().iter_errors(doc), key=str)
        assert not errors, "\n".join(str(e)[:300] for e in errors[:5])
        uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in doc["runs"][0]["results"]}
        assert {"bad%FFname.py", "ctl%1Bname.py", "new%0Aline.py", "weird%26%3C%3E%22name.py",
                "%C3%BCn%C3%AF%231.py", "broken%FE.py"} <= uris
    if fmt == "github":
        assert "file=bad\\xffname.py," in out and "file=new%0Aline.py," in out
    # written to a file with -o: the same, no crash
    target = tmp_path / f"out.{fmt}"
    _check(amplint, odd_names, fmt, "-o", str(target))
    assert target.read_bytes().decode("utf-8") == out


def test_sarif_has_what_code_scanning_reads(odd_names, amplint):
    doc = json.loads(_check(amplint, odd_names, "sarif"))
    run = doc["runs"][0]
    rules = {r["id"]: r for r in run["tool"]["driver"]["rules"]}
    amp101 = rules["AMP101"]
    assert amp101["fullDescription"]["text"] != amp101["shortDescription"]["text"]
    assert amp101["fullDescription"]["text"].startswith("Flags ") or len(amp101["fullDescription"]["text"]) > 80
    assert len(amp101["fullDescription"]["text"]) <= 1024
    assert "##" not in amp101["help"]["text"] and "`" not in amp101["help"]["text"]
    assert "## " in amp101["help"]["markdown"]
    for rule in rules.values():
        props = rule["properties"]
        assert props["tags"] and props["precision"] in {"very-high", "high", "medium", "low"}
        assert props["problem.severity"] in {"error", "warning", "recommendation"}
    results = run["results"]
    hashes = [r["partialFingerprints"]["primaryLocationLineHash"] for r in results if r["ruleId"].startswith("AMP")]
    assert hashes and len(set(hashes)) == len(hashes)
    syntax = [r for r in results if r["ruleId"] == "invalid-syntax"]
    assert len(syntax) == 1 and syntax[0]["level"] == "error"
    assert syntax[0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "broken%FE.py"
    assert run["tool"]["driver"]["rules"][syntax[0]["ruleIndex"]]["id"] == "invalid-syntax"
