"""Pieces every reporter shares: the fixability marker, error lines, the statistics
table and the summary line."""
from __future__ import annotations

import hashlib
import os

from ..rule import Applicability

#: characters a terminal would act on (escape sequences, carriage returns, newlines that
#: forge extra output lines) or that reorder text (bidi controls): shown as escapes
_UNPRINTABLE = {c: f"\\x{c:02x}" for c in [*range(0x20), 0x7F, *range(0x80, 0xA0)]}
_UNPRINTABLE.update({ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"})
_UNPRINTABLE.update({c: f"\\u{c:04x}" for c in [0x2028, 0x2029, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]})
#: a file name that is not UTF-8 comes from the OS with its bad bytes as surrogates
#: (surrogateescape): shown as ``\xff``, which every output encoding can carry
_UNPRINTABLE.update({0xDC00 + b: f"\\x{b:02x}" for b in range(0x80, 0x100)})
_UNPRINTABLE_KEEP_TABS = {c: e for c, e in _UNPRINTABLE.items() if c != ord("\t")}


def unicode_text(text: str) -> str:
    """``text`` as valid Unicode: the bytes of a name that is not UTF-8 (surrogates from
    surrogateescape) as ``\\xff``, any other lone surrogate as ``\\uXXXX``.  For the
    structured formats (JSON, SARIF, GitLab, JUnit), which must never carry a lone
    surrogate (strict parsers reject it; UTF-8 cannot encode it)."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    out = []
    for c in text:
        code = ord(c)
        if 0xDC80 <= code <= 0xDCFF:
            out.append(f"\\x{code - 0xDC00:02x}")
        elif 0xD800 <= code <= 0xDFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(c)
    return "".join(out)


def unicode_data(value):
    """``value`` (JSON-like: dicts, lists, strings) with every string through :func:`unicode_text`."""
    if isinstance(value, str):
        return unicode_text(value)
    if isinstance(value, dict):
        return {unicode_data(k): unicode_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [unicode_data(v) for v in value]
    return value


def is_syntax_error(error) -> bool:
    return error.reason.startswith("syntax error")


def printable(text: str, keep_tabs: bool = False) -> str:
    """``text`` with control characters escaped (``\\x1b``, ``\\n``), for a terminal."""
    return text.translate(_UNPRINTABLE_KEEP_TABS if keep_tabs else _UNPRINTABLE)


def where(result, line: int) -> str:
    """``line``, or ``cell N:line`` in a notebook (Ruff's ``nb.ipynb:cell 3:2:5``)."""
    cells = getattr(result, "cells", None)
    if cells:
        from ..notebook import cell_of

        cell, in_cell = cell_of(cells, line)
        if cell is not None:
            return f"cell {cell}:{in_cell}"
    return str(line)


def in_notebook(result, finding) -> str:
    """``cell N:line:col`` of a notebook finding ("" elsewhere).  The structured formats
    (SARIF, GitLab, JUnit, GitHub) point a notebook finding at line 1, column 1 of the
    ``.ipynb`` -- a module line is no line of the notebook's JSON, as in Ruff ("a location
    that is clearly a fallback") -- and carry this place in their message."""
    if not getattr(result, "cells", None):
        return ""
    place = where(result, finding.line)
    return f"{place}:{finding.column}" if place.startswith("cell ") else ""


def marker(finding) -> str:
    """``[*] `` (safe fix), ``[-] `` (unsafe fix) or nothing, before a finding's message."""
    if finding.fix is None or finding.fix.applicability is Applicability.DISPLAY:
        return ""
    return "[*] " if finding.fix.applicability is Applicability.SAFE else "[-] "


def render_errors(results, out) -> None:
    """Errors, then warnings (paths skipped for a harmless reason), one line each."""
    for result in results:
        for e in result.errors:
            out.write(f"{printable(e.path)}:{where(result, e.line)}:{e.col}: error: {printable(e.reason)}\n")
        for w in getattr(result, "warnings", ()):
            out.write(f"{printable(w.path)}:{w.line}:{w.col}: warning: {printable(w.reason)}\n")


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
            extra.append(f"{unsafe} {'more ' if safe else ''}fixable with `amplint fix --unsafe-fixes`")
        parts.append(text + (f" ({'; '.join(extra)})" if extra else "") + ".")
    elif results and not errors and not fixed and not (skipped and skipped == len(results)):  # not when nothing was linted
        parts.append("All checks passed.")
    if errors:
        parts.append(f"{errors} error{'s' if errors != 1 else ''} (files that could not be checked).")
    if skipped:
        parts.append(f"{skipped} path{'s' if skipped != 1 else ''} not linted (see the warning{'s' if skipped != 1 else ''} above).")
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


def location_fingerprint(finding, base: str) -> str:
    """A finding's identity across commits for code-quality services: its path relative
    to ``base``, its code and its fingerprint (which survives line shifts)."""
    try:
        rel = os.path.relpath(os.path.abspath(finding.path), base).replace(os.sep, "/")
    except ValueError:
        rel = os.path.abspath(finding.path)
    return hashlib.sha256(f"{rel}\0{finding.code}\0{finding.fingerprint}".encode("utf-8", "surrogatepass")).hexdigest()


def source_root() -> str:
    """What locations are relative to in SARIF and GitLab reports: the git work tree
    the run starts in, else the current folder."""
    from ..ignorefiles import repository_root

    cwd = os.getcwd()
    return repository_root(cwd) or cwd
