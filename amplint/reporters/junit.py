"""JUnit XML, for CI systems that show test reports: one test suite per linted file,
one failing test case per finding (a clean file is one passing case), one erroring case
per file that could not be read or parsed."""
from __future__ import annotations

import xml.etree.ElementTree as ET

from .common import in_notebook, printable, unicode_text

#: besides the C0 controls (which printable escapes), XML 1.0 forbids U+FFFE and U+FFFF
_NOT_XML = {0xFFFE: "\\ufffe", 0xFFFF: "\\uffff"}


def _x(text: str) -> str:
    """``text`` as XML 1.0 can carry it: control characters (ESC, newlines in a file
    name) and the bytes of a name that is not UTF-8 escaped (``\\x1b``, ``\\xff``)."""
    return printable(unicode_text(text), keep_tabs=True).translate(_NOT_XML)


def _text(text: str) -> str:
    """Element text keeps its newlines; every other forbidden character is escaped."""
    return "\n".join(_x(line) for line in text.split("\n"))


def render(results, out, *, statistics=False, color=False) -> None:
    root = ET.Element("testsuites", name="amplint")
    totals = {"tests": 0, "failures": 0, "errors": 0}
    for result in results:
        shown = _x(result.path)
        suite = ET.SubElement(root, "testsuite", name=shown)
        counts = {"tests": 0, "failures": 0, "errors": 0}
        for f in result.findings:
            # a notebook: line 1 of the .ipynb, the place named by cell (`nb.ipynb:cell 2:3:5`)
            cell = in_notebook(result, f)
            place = cell or f"{f.line}:{f.column}"
            case = ET.SubElement(suite, "testcase", name=f"{f.code} {f.rule} at {_x(f.path)}:{place}",
                                 classname=shown, file=_x(f.path), line="1" if cell else str(f.line))
            failure = ET.SubElement(case, "failure", message=_x(f.message), type=f.code)
            failure.text = f"{_x(f.path)}:{place}: {f.code} {f.severity.value}: {_text(f.message)}"
            counts["tests"] += 1
            counts["failures"] += 1
        for e in result.errors:
            case = ET.SubElement(suite, "testcase", name=f"{_x(e.path)}:{e.line}:{e.col}", classname=shown, file=_x(e.path), line=str(e.line))
            ET.SubElement(case, "error", message=_x(e.reason)).text = f"{_x(e.path)}:{e.line}:{e.col}: error: {_text(e.reason)}"
            counts["tests"] += 1
            counts["errors"] += 1
        if not counts["tests"]:
            ET.SubElement(suite, "testcase", name="amplint", classname=shown, file=shown)
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
