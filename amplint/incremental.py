"""Re-linting only what an edit touched (the language server's fast pass).

After an edit, the lines that changed are widened to whole top-level statements; those
statements are linted alone -- at their own line numbers, with the document's
one-line imports and constants above them, every other line blank -- and the previous
whole-document lint supplies the findings everywhere else (shifted by the lines the
edit added or removed).  A 2,000-line model file then costs one class, not the file.

The result is provisional: facts from the rest of the file (a helper defined elsewhere,
a constant built over several lines) are not seen, so the server follows it with a
whole-document lint once typing pauses, and that one replaces it.  Any doubt -- the
widened region does not parse on its own, the edit spans most of the file -- gives None:
lint the whole document now.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Callable, Optional

from .context import FileContext
from .files import SourceError
from .rule import Edit, Finding, Position

_STATEMENT_START = re.compile(r"(?!(?:else|elif|except|finally|case)\b)[A-Za-z_@]")
_PREAMBLE = re.compile(r"(?:import\s|from\s|[A-Za-z_][\w.]*\s*(?::[^=]*)?=[^=])")
_CONTINUED = re.compile(r"[\\(\[{,]\s*(?:#.*)?$")
#: above this share of the document changed, the whole document is linted at once
WHOLE_SHARE = 0.5


def changed_span(old: list[str], new: list[str]) -> tuple[int, int, int]:
    """(first, old_end, new_end): lines ``first`` (1-based) to ``old_end`` (exclusive) of
    ``old`` became lines ``first`` to ``new_end`` of ``new``; the rest are the same."""
    first = 0
    limit = min(len(old), len(new))
    while first < limit and old[first] == new[first]:
        first += 1
    old_end, new_end = len(old), len(new)
    while old_end > first and new_end > first and old[old_end - 1] == new[new_end - 1]:
        old_end, new_end = old_end - 1, new_end - 1
    return first + 1, old_end + 1, new_end + 1


def _starts_statement(line: str) -> bool:
    return bool(_STATEMENT_START.match(line))


def widen(lines: list[str], first: int, end: int) -> tuple[int, int]:
    """Lines [first, end) widened to whole top-level statements (with their decorators)."""
    start = min(first, len(lines))
    while start > 1 and not (_starts_statement(lines[start - 1]) and not lines[start - 1].startswith("@")):
        start -= 1
    while start > 1 and lines[start - 2].startswith("@"):
        start -= 1
    stop = max(end, start + 1)
    while stop <= len(lines) and not (_starts_statement(lines[stop - 1]) and not lines[stop - 2].startswith("@")):
        stop += 1
    return start, min(stop, len(lines) + 1)


def piece_source(lines: list[str], start: int, end: int) -> str:
    """Lines [start, end) at their own numbers, the one-line imports and assignments
    above them kept, every other line blank."""
    out = []
    for number, line in enumerate(lines[: end - 1], 1):
        if number >= start:
            out.append(line)
        elif _PREAMBLE.match(line) and not _CONTINUED.search(line):
            out.append(line)
        else:
            out.append("")
    return "\n".join(out) + "\n"


def _moved(position: Position, delta: int) -> Position:
    return dataclasses.replace(position, line=position.line + delta)


def shifted(f: Finding, delta: int) -> Finding:
    """``f`` moved ``delta`` lines down (its fix's edits with it)."""
    if delta == 0:
        return f
    fix = f.fix
    if fix is not None:
        fix = dataclasses.replace(fix, edits=type(fix.edits)(
            Edit(_moved(e.start, delta), _moved(e.end, delta), e.text) for e in fix.edits))
    return dataclasses.replace(f, line=f.line + delta, end_line=f.end_line + delta, fix=fix)


def relint(old_text: str, old_findings: list[Finding], text: str,
           lint: Callable[[str], tuple[list[Finding], list[SourceError]]]) -> Optional[tuple[list[Finding], list[SourceError]]]:
    """The findings of ``text`` from the previous lint of ``old_text`` and a lint of the
    changed statements only (``lint`` lints a piece's source); None: lint it whole."""
    old, new = FileContext.split_lines(old_text), FileContext.split_lines(text)
    first, old_end, new_end = changed_span(old, new)
    start, end = widen(new, first, new_end)
    if (end - start) > WHOLE_SHARE * max(len(new), 1):
        return None
    delta = new_end - old_end
    old_start, old_stop = start, end - delta  # the same region in the old numbering
    if old_stop < old_start:
        return None
    try:
        found, errors = lint(piece_source(new, start, end))
    except SourceError:
        return None
    if errors:
        return None
    kept = [f for f in old_findings if f.end_line < old_start]
    kept += [f for f in found if start <= f.line < end]
    kept += [shifted(f, delta) for f in old_findings if f.line >= old_stop]
    if any(f.line < old_stop and f.end_line >= old_start and not old_start <= f.line for f in old_findings):
        return None  # a finding spanning the region's edge: not worth guessing
    return kept, []

