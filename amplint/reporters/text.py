"""Ruff-style text: each finding with its source line and a caret, then a summary."""
from __future__ import annotations

import sys

from .common import marker, printable, render_errors, render_statistics, summary, where

__all__ = ["render", "render_errors", "render_statistics", "summary"]

_STYLE = {"error": "\x1b[1;31m", "warning": "\x1b[1;33m", "info": "\x1b[1;36m"}
_BOLD, _DIM, _RESET = "\x1b[1m", "\x1b[2m", "\x1b[0m"


def _frame(finding, source_line: str, color: bool, shown_line: str = "") -> list[str]:
    number = shown_line or str(finding.line)
    pad = " " * len(number)

    def shown(text: str) -> str:  # control characters escaped, tabs expanded
        return printable(text, keep_tabs=True).expandtabs(4)

    expanded = shown(source_line)
    # caret position in the line as shown
    col = len(shown(source_line[: finding.column - 1]))
    if finding.end_line == finding.line:
        width = len(shown(source_line[: finding.end_column - 1])) - col
    else:
        width = len(expanded) - col
    width = max(1, width)
    caret = " " * col + "^" * width
    if color:
        caret = _STYLE[finding.severity.value] + caret + _RESET
    return [f"{pad} |", f"{number} | {expanded}", f"{pad} | {caret} {finding.code}", f"{pad} |"]


def render(results, out, *, statistics=False, color=False) -> None:
    if statistics:
        render_statistics(results, out)
    else:
        for result in results:
            for f in result.findings:
                shown_line = where(result, f.line)
                head = f"{printable(f.path)}:{shown_line}:{f.column}: "
                code = f"{f.code} {marker(f)}{f.severity.value}: "
                if color:
                    head = _BOLD + head + _RESET
                    code = _STYLE[f.severity.value] + code + _RESET
                out.write(f"{head}{code}{printable(f.message)}\n")
                in_cell = shown_line.rpartition(":")[2]  # the gutter shows the line in its cell
                for line in _frame(f, result.frames.get(f.line, ""), color, in_cell):
                    out.write(line.rstrip() + "\n")
                pad = " " * len(in_cell)
                for r in f.related:
                    shown = where(result, r.line) if r.path == f.path else r.line
                    out.write(f"{pad} = note: {printable(r.note)} ({printable(r.path)}:{shown}:{r.column})\n")
                if f.fix is not None:
                    out.write(f"{pad} = fix ({f.fix.applicability.value}): {f.fix.description}\n")
                out.write("\n")
    # the tool's own diagnostics (unreadable files, bad config) go to stderr, findings to out
    render_errors(results, sys.stderr)
    line = summary(results)
    if line:
        out.write((_BOLD + line + _RESET if color else line) + "\n")

__all__ = ["render", "render_errors", "render_statistics", "summary"]
