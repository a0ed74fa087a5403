"""One line per finding: ``path:line:col: CODE [*] severity: message`` (``[*]``: fixable)."""
from __future__ import annotations

import sys

from .common import marker, printable, render_errors, render_statistics, summary, where


def render_findings(results, out) -> None:
    for result in results:
        for f in result.findings:
            out.write(f"{printable(f.path)}:{where(result, f.line)}:{f.column}: {f.code} {marker(f)}{f.severity.value}: {printable(f.message)}\n")


def render(results, out, *, statistics=False, color=False) -> None:
    if statistics:
        render_statistics(results, out)
    else:
        render_findings(results, out)
    render_errors(results, sys.stderr)
    line = summary(results)
    if line:
        out.write(line + "\n")
