"""Ruff-style text: each finding with its source line and a caret, then a summary."""
from __future__ import annotations

import sys
from collections import Counter

from ..rule import Applicability
from .concise import marker

_STYLE = {"error": "\x1b[1;31m", "warning": "\x1b[1;33m", "info": "\x1b[1;36m"}
_BOLD, _DIM, _RESET = "\x1b[1m", "\x1b[2m", "\x1b[0m"


def _frame(finding, source_line: str, color: bool) -> list[str]:
    number = str(finding.line)
    pad = " " * len(number)
    expanded = source_line.expandtabs(4)
    # caret position in the tab-expanded line
    col = len(source_line[: finding.column - 1].expandtabs(4))
    if finding.end_line == finding.line:
        width = len(source_line[: finding.end_column - 1].expandtabs(4)) - col
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
                head = f"{f.path}:{f.line}:{f.column}: "
                code = f"{f.code} {marker(f)}"
                if color:
                    head = _BOLD + head + _RESET
                    code = _STYLE[f.severity.value] + code + _RESET
                out.write(f"{head}{code}{f.message}\n")
                for line in _frame(f, result.frames.get(f.line, ""), color):
                    out.write(line.rstrip() + "\n")
                pad = " " * len(str(f.line))
                for r in f.related:
                    out.write(f"{pad} = note: {r.note} ({r.path}:{r.line}:{r.column})\n")
                if f.fix is not None:
                    out.write(f"{pad} = fix ({f.fix.applicability.value}): {f.fix.description}\n")
                out.write("\n")
    # the tool's own diagnostics (unreadable files, bad config) go to stderr, findings to out
    render_errors(results, sys.stderr)
    line = summary(results)
    if line:
        out.write((_BOLD + line + _RESET if color else line) + "\n")


def render_errors(results, out) -> None:
    for result in results:
        for e in result.errors:
            out.write(f"{e.path}:{e.line}:{e.col}: error: {e.reason}\n")


def statistics(results) -> list[dict]:
    """Per rule: its findings and how many of them ``fix`` (safe) or ``fix --unsafe-fixes``
    (unsafe) can fix in this run; most frequent first."""
    rows: dict[str, dict] = {}
    for result in results:
        for f in result.findings:
            row = rows.setdefault(f.code, {"code": f.code, "name": f.rule, "count": 0, "fixable": False,
                                           "safe_fixes": 0, "unsafe_fixes": 0})
            row["count"] += 1
            if f.fix is not None and f.fix.applicability is Applicability.SAFE:
                row["safe_fixes"] += 1
                row["fixable"] = True  # Ruff's key: `amplint fix` fixes some of them
            elif f.fix is not None and f.fix.applicability is Applicability.UNSAFE:
                row["unsafe_fixes"] += 1
    return sorted(rows.values(), key=lambda row: (-row["count"], row["code"]))


def render_statistics(results, out) -> None:
    """``count  CODE  [*] name``: ``[*]`` some findings have a safe fix, ``[-]`` only unsafe ones."""
    rows = statistics(results)
    width = max([len(str(row["count"])) for row in rows] + [1])
    for row in rows:
        mark = "[*]" if row["safe_fixes"] else "[-]" if row["unsafe_fixes"] else "   "
        out.write(f"{row['count']:>{width}}  {row['code']}  {mark} {row['name']}\n")


def summary(results) -> str:
    findings = [f for r in results for f in r.findings]
    fixed = sum(r.fixed for r in results)
    errors = sum(len(r.errors) for r in results)
    parts = []
    if fixed:
        parts.append(f"Fixed {fixed} finding{'s' if fixed != 1 else ''}.")
    if findings:
        safe = sum(1 for f in findings if f.fix is not None and f.fix.applicability is Applicability.SAFE)
        unsafe = sum(1 for f in findings if f.fix is not None and f.fix.applicability is Applicability.UNSAFE)
        text = f"Found {len(findings)} finding{'s' if len(findings) != 1 else ''}"
        extra = []
        if safe:
            extra.append(f"{safe} fixable with `amplint fix`")
        if unsafe:
            extra.append(f"{unsafe} {'more ' if safe else ''}fixable with `amplint fix --unsafe-fixes`")
        parts.append(text + (f" ({'; '.join(extra)})" if extra else "") + ".")
    elif not errors and not fixed:
        parts.append("All checks passed.")
    if errors:
        parts.append(f"{errors} error{'s' if errors != 1 else ''} (files that could not be checked).")
    return " ".join(parts)


def diff_summary(results) -> str:
    """``fix --diff``: what the fixes would do, and what would be left."""
    would_fix = sum(r.fixed for r in results)
    left = [f for r in results for f in r.findings]
    parts = [f"Would fix {would_fix} finding{'s' if would_fix != 1 else ''}" if would_fix else "No fixes to apply"]
    if left:
        unsafe = sum(1 for f in left if f.fix is not None and f.fix.applicability is Applicability.UNSAFE)
        parts.append(f"{len(left)} would remain" + (f" ({unsafe} fixable with `--unsafe-fixes`)" if unsafe else ""))
    errors = sum(len(r.errors) for r in results)
    if errors:
        parts.append(f"{errors} error{'s' if errors != 1 else ''} (files that could not be checked)")
    return "; ".join(parts) + "."
