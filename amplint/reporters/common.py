"""Pieces every reporter shares: the fixability marker, error lines, the statistics
table and the summary line."""
from __future__ import annotations

from collections import Counter

from ..rule import Applicability


def marker(finding) -> str:
    """``[*] `` (safe fix), ``[-] `` (unsafe fix) or nothing, before a finding's message."""
    if finding.fix is None or finding.fix.applicability is Applicability.DISPLAY:
        return ""
    return "[*] " if finding.fix.applicability is Applicability.SAFE else "[-] "


def render_errors(results, out) -> None:
    for result in results:
        for e in result.errors:
            out.write(f"{e.path}:{e.line}:{e.col}: error: {e.reason}\n")


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
    elif not errors and not fixed:
        parts.append("All checks passed.")
    if errors:
        parts.append(f"{errors} error{'s' if errors != 1 else ''} (files that could not be checked).")
    return " ".join(parts)
