"""The fixture corpus against its expectations, through the real command line.

Every ``fixtures/**/*.py`` marks the findings it expects with a trailing comment on
the line where the finding starts: ``# expect: AMP101`` (several: ``# expect: AMP101,
AMP302``).  A file under a ``clean/`` folder must produce no finding at all.  Settings
for a folder come from its own ``pyproject.toml`` ([tool.amplint]), as for users.

Golden fixed output sits beside a fixture: ``X.py.fixed`` (``amplint fix``),
``X.py.unsafe-fixed`` (``amplint fix --unsafe-fixes``).  The fix is run on a copy of the
fixture's whole folder, so cross-file resolution and folder config apply.

The test prints precision and recall per rule; any miss or false positive fails.
"""
from __future__ import annotations

import collections
import json
import os
import re
import shutil

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "fixtures")
EXPECT = re.compile(r"#\s*expect:\s*([A-Z]+[0-9]+(?:\s*,\s*[A-Z]+[0-9]+)*)")


def expected_findings() -> set[tuple[str, int, str]]:
    out = set()
    for folder, _, files in os.walk(FIXTURES):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, ROOT)
            with open(path, encoding="utf-8") as fh:
                for number, line in enumerate(fh, 1):
                    m = EXPECT.search(line)
                    if m:
                        for code in re.split(r"\s*,\s*", m.group(1)):
                            out.add((rel, number, code))
    return out


def test_fixture_findings_match_expectations(amplint):
    proc = amplint("check", "fixtures", "--format", "json", "--no-cache")
    assert proc.returncode in (0, 1), proc.stderr
    actual = {(f["path"], f["line"], f["code"]) for f in json.loads(proc.stdout)}
    expected = expected_findings()
    per_rule = collections.defaultdict(lambda: [0, 0, 0])  # tp, fp, fn
    for item in actual | expected:
        stats = per_rule[item[2]]
        if item in actual and item in expected:
            stats[0] += 1
        elif item in actual:
            stats[1] += 1
        else:
            stats[2] += 1
    report = ["rule     precision  recall   (tp/fp/fn)"]
    for code in sorted(per_rule):
        tp, fp, fn = per_rule[code]
        p = tp / (tp + fp) if tp + fp else 1.0
        r = tp / (tp + fn) if tp + fn else 1.0
        report.append(f"{code:<8} {p:9.3f}  {r:6.3f}   ({tp}/{fp}/{fn})")
    print("\n".join(report))
    clean = [a for a in actual if f"{os.sep}clean{os.sep}" in os.sep + a[0]]
    assert not clean, f"findings in clean fixtures: {sorted(clean)}"
    assert actual == expected, (
        "\n".join(report)
        + f"\nunexpected: {sorted(actual - expected)}\nmissing: {sorted(expected - actual)}"
    )


def _golden_folders():
    found = collections.defaultdict(list)
    for folder, _, files in os.walk(FIXTURES):
        for name in files:
            for suffix, mode in ((".py.fixed", "safe"), (".py.unsafe-fixed", "unsafe"), (".py.module-fixed", "module")):
                if name.endswith(suffix):
                    found[(folder, mode)].append(name[: -len(suffix)] + ".py")
    return sorted(found.items())


GOLDEN = _golden_folders()


@pytest.mark.parametrize("case", GOLDEN, ids=[f"{os.path.relpath(f, FIXTURES)}-{m}" for (f, m), _ in GOLDEN])
def test_golden_fixed_output(case, tmp_path, amplint):
    (folder, mode), names = case
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy, ignore=shutil.ignore_patterns("*.fixed", "*-fixed", "__pycache__"))
    args = ["fix", str(copy), "--no-cache"]
    if mode == "unsafe":
        args.append("--unsafe-fixes")
    if mode == "module":
        args += ["--fix-style", "module"]
    proc = amplint(*args)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    suffix = {"safe": ".fixed", "unsafe": ".unsafe-fixed", "module": ".module-fixed"}[mode]
    for name in names:
        with open(os.path.join(folder, name + suffix), encoding="utf-8", newline="") as fh:
            expected = fh.read()
        got = (copy / name).read_text(encoding="utf-8")
        assert got == expected, f"{name} after `amplint {' '.join(args[:1] + args[3:])}` differs from {name + suffix}"
    # a second run changes nothing
    again = amplint(*args)
    for name in names:
        with open(os.path.join(folder, name + suffix), encoding="utf-8", newline="") as fh:
            assert (copy / name).read_text(encoding="utf-8") == fh.read(), f"{name}: fix is not idempotent"
