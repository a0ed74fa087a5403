"""Ruff-style text: each finding with its source line and a caret, then a summary."""
from __future__ import annotations

from collections import Counter

from ..rule import Applicability
from .concise import marker, printable

_STYLE = {"error": "\x1b[1;31m", "warning": "\x1b[1;33m", "info": "\x1b[1;36m"}
_BOLD, _DIM, _RESET = "\x1b[1m", "\x1b[2m", "\x1b[0m"


def _frame(finding, source_line: str, color: bool) -> list[str]:
    number = str(finding.line)
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
                head = f"{printable(f.path)}:{f.line}:{f.column}: "
                code = f"{f.code} {marker(f)}"
                if color:
                    head = _BOLD + head + _RESET
                    code = _STYLE[f.severity.value] + code + _RESET
                out.write(f"{head}{code}{printable(f.message)}\n")
                for line in _frame(f, result.frames.get(f.line, ""), color):
                    out.write(line.rstrip() + "\n")
                pad = " " * len(str(f.line))
                for r in f.related:
                    out.write(f"{pad} = note: {printable(r.note)} ({printable(r.path)}:{r.line}:{r.column})\n")
                if f.fix is not None:
                    out.write(f"{pad} = fix ({f.fix.applicability.value}): {f.fix.description}\n")
                out.write("\n")
    render_errors(results, out)
    line = summary(results)
    if line:
        out.write((_BOLD + line + _RESET if color else line) + "\n")


def render_errors(results, out) -> None:
    """Errors, then warnings (paths skipped for a harmless reason), one line each."""
    for result in results:
        for e in result.errors:
            out.write(f"{printable(e.path)}:{e.line}:{e.col}: error: {printable(e.reason)}\n")
        for w in getattr(result, "warnings", ()):
            out.write(f"{printable(w.path)}:{w.line}:{w.col}: warning: {printable(w.reason)}\n")


def render_statistics(results, out) -> None:
    counts = Counter()
    names, fixable = {}, Counter()
    for result in results:
        for f in result.findings:
            counts[f.code] += 1
            names[f.code] = f.rule
            if f.fix is not None and f.fix.applicability is not Applicability.DISPLAY:
                fixable[f.code] += 1
    width = max([len(str(c)) for c in counts.values()] + [1])
    for code, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        mark = "[*]" if fixable[code] else "   "
        out.write(f"{count:>{width}}  {code}  {mark} {names[code]}\n")


def summary(results) -> str:
    findings = [f for r in results for f in r.findings]
    fixed = sum(r.fixed for r in results)
    errors = sum(len(r.errors) for r in results)
    skipped = sum(len(getattr(r, "warnings", ())) for r in results)
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
            extra.append(f"{unsafe} more with `amplint fix --unsafe-fixes`")
        parts.append(text + (f" ({'; '.join(extra)})" if extra else "") + ".")
    elif not errors and not fixed and not (skipped and skipped == len(results)):  # not when nothing was linted
        parts.append("All checks passed.")
    if errors:
        parts.append(f"{errors} error{'s' if errors != 1 else ''} (files that could not be checked).")
    if skipped:
        parts.append(f"{skipped} path{'s' if skipped != 1 else ''} not linted (see the warning{'s' if skipped != 1 else ''} above).")
    return " ".join(parts)
