"""One line per finding: ``path:line:col: CODE [*] message`` (``[*]``: fixable)."""
from __future__ import annotations

from ..rule import Applicability


def marker(finding) -> str:
    if finding.fix is None or finding.fix.applicability is Applicability.DISPLAY:
        return ""
    return "[*] " if finding.fix.applicability is Applicability.SAFE else "[-] "


def render_findings(results, out) -> None:
    for result in results:
        for f in result.findings:
            out.write(f"{f.path}:{f.line}:{f.column}: {f.code} {marker(f)}{f.message}\n")


def render(results, out, *, statistics=False, color=False) -> None:
    import sys

    from .text import render_errors, render_statistics, summary

    if statistics:
        render_statistics(results, out)
    else:
        render_findings(results, out)
    render_errors(results, sys.stderr)
    line = summary(results)
    if line:
        out.write(line + "\n")
