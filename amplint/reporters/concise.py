"""One line per finding: ``path:line:col: CODE [*] message`` (``[*]``: fixable)."""
from __future__ import annotations

from ..rule import Applicability

#: characters a terminal would act on (escape sequences, carriage returns, newlines that
#: forge extra output lines) or that reorder text (bidi controls): shown as escapes
_UNPRINTABLE = {c: f"\\x{c:02x}" for c in [*range(0x20), 0x7F, *range(0x80, 0xA0)]}
_UNPRINTABLE.update({ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"})
_UNPRINTABLE.update({c: f"\\u{c:04x}" for c in [0x2028, 0x2029, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]})
_UNPRINTABLE_KEEP_TABS = {c: e for c, e in _UNPRINTABLE.items() if c != ord("\t")}


def printable(text: str, keep_tabs: bool = False) -> str:
    """``text`` with control characters escaped (``\\x1b``, ``\\n``), for a terminal."""
    return text.translate(_UNPRINTABLE_KEEP_TABS if keep_tabs else _UNPRINTABLE)


def marker(finding) -> str:
    if finding.fix is None or finding.fix.applicability is Applicability.DISPLAY:
        return ""
    return "[*] " if finding.fix.applicability is Applicability.SAFE else "[-] "


def render_findings(results, out) -> None:
    for result in results:
        for f in result.findings:
            out.write(f"{printable(f.path)}:{f.line}:{f.column}: {f.code} {marker(f)}{printable(f.message)}\n")


def render(results, out, *, statistics=False, color=False) -> None:
    from .text import render_errors, render_statistics, summary

    if statistics:
        render_statistics(results, out)
    else:
        render_findings(results, out)
    render_errors(results, out)
    line = summary(results)
    if line:
        out.write(line + "\n")
