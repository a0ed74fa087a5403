"""JUnit XML, for CI systems that show test reports: one test suite per linted file,
one failing test case per finding (a clean file is one passing case), one erroring case
per file that could not be read or parsed."""
from __future__ import annotations

import xml.etree.ElementTree as ET


def render(results, out, *, statistics=False, color=False) -> None:
    root = ET.Element("testsuites", name="amplint")
    totals = {"tests": 0, "failures": 0, "errors": 0}
    for result in results:
        suite = ET.SubElement(root, "testsuite", name=result.path)
        counts = {"tests": 0, "failures": 0, "errors": 0}
        for f in result.findings:
            case = ET.SubElement(suite, "testcase", name=f"{f.code} {f.rule} at {f.path}:{f.line}:{f.column}",
                                 classname=result.path, file=f.path, line=str(f.line))
            failure = ET.SubElement(case, "failure", message=f.message, type=f.code)
            failure.text = f"{f.path}:{f.line}:{f.column}: {f.code} {f.message}"
            counts["tests"] += 1
            counts["failures"] += 1
        for e in result.errors:
            case = ET.SubElement(suite, "testcase", name=f"{e.path}:{e.line}:{e.col}", classname=result.path, file=e.path, line=str(e.line))
            ET.SubElement(case, "error", message=e.reason).text = f"{e.path}:{e.line}:{e.col}: error: {e.reason}"
            counts["tests"] += 1
            counts["errors"] += 1
        if not counts["tests"]:
            ET.SubElement(suite, "testcase", name="amplint", classname=result.path, file=result.path)
            counts["tests"] = 1
        for key, value in counts.items():
            suite.set(key, str(value))
            totals[key] += value
    for key, value in totals.items():
        root.set(key, str(value))
    ET.indent(root)
    out.write('<?xml version="1.0" encoding="UTF-8"?>\n')
    out.write(ET.tostring(root, encoding="unicode"))
    out.write("\n")
