"""One line per finding: ``path:line:col: CODE [*] message`` (``[*]``: fixable)."""
from __future__ import annotations

from .common import marker, render_errors, render_statistics, summary


def render_findings(results, out) -> None:
    for result in results:
        for f in result.findings:
            out.write(f"{f.path}:{f.line}:{f.column}: {f.code} {marker(f)}{f.message}\n")


def render(results, out, *, statistics=False, color=False) -> None:
    if statistics:
        render_statistics(results, out)
    else:
        render_findings(results, out)
    render_errors(results, out)
    line = summary(results)
    if line:
        out.write(line + "\n")
