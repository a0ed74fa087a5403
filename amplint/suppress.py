"""Suppression comments: ``# amplint: ignore[AMP101, AMP102]``, a bare
``# amplint: ignore`` (every rule), and flake8/Ruff-style ``# noqa: AMP101`` or bare
``# noqa``.  A comment on any line of a multi-line statement covers the whole statement
(for compound statements such as ``def`` or ``if``, their header lines).
"""
from __future__ import annotations

import ast
import dataclasses
import re
from typing import Optional

from .context import FileContext
from .rule import Finding

_DIRECTIVE = re.compile(
    r"#\s*(?:amplint\s*:\s*ignore(?P<bracket>\[(?P<codes1>[^\]]*)\])?"
    r"|noqa(?:\s*:\s*(?P<codes2>[A-Za-z]+[0-9]+(?:[\s,]+[A-Za-z]+[0-9]+)*))?)",
    re.IGNORECASE,
)
_QUICK = re.compile(r"amplint\s*:\s*ignore|noqa", re.IGNORECASE)


@dataclasses.dataclass
class Directive:
    line: int
    column: int
    codes: Optional[frozenset[str]]  # None: every rule
    is_noqa: bool
    used: set = dataclasses.field(default_factory=set)
    #: 0-based character columns of the code list on the line (``--add-noqa`` extends it)
    codes_span: Optional[tuple[int, int]] = None

    def covers(self, code: str) -> bool:
        return self.codes is None or code in self.codes


def comments(text: str) -> list[tuple[int, int, str]]:
    """(line, 0-based character column, text) of every comment token: a ``#`` inside a
    string is part of the string.  A text the tokenizer rejects (it parsed, so only in
    odd corners) has its comments found line by line, as before."""
    import io
    import tokenize

    out = []
    try:  # newline=None: CR-only and CRLF files have the tokenizer's line numbers
        for tok in tokenize.generate_tokens(io.StringIO(text, newline=None).readline):
            if tok.type == tokenize.COMMENT:
                out.append((tok.start[0], tok.start[1], tok.string))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        out = []
        for number, line in enumerate(FileContext.split_lines(text), 1):
            at = line.find("#")
            if at >= 0:
                out.append((number, at, line[at:]))
    return out


def _may_suppress(text: str) -> bool:
    """``_QUICK.search(text)``, answered first without the case-insensitive regex (a
    scan of every file, ~2 ms each): no ``noqa`` or ``amplint`` in the lower-case text,
    no directive -- unless it holds U+0130 or U+0131, the only characters beyond ASCII
    that the regex's IGNORECASE takes for one of those letters (for ``i``)."""
    lower = text.lower()
    if "noqa" not in lower and "amplint" not in lower and (
            text.isascii() or ("\u0130" not in text and "\u0131" not in text)):
        return False
    return _QUICK.search(text) is not None


def _directive_comments(ctx: FileContext) -> list[tuple[int, int, str]]:
    """:func:`comments` of the lines a directive can be on (a ``#`` and a ``noqa`` or
    ``amplint: ignore``).  The tokenizer costs ~100 ms on a large file: when no string
    literal reaches those lines, their first ``#`` starts their comment and it is read
    off the line; otherwise (a ``#`` that may sit in a string) the tokenizer decides."""
    import bisect

    text = ctx.source
    if "\r" in text:  # CR line ends: leave the line numbering to the tokenizer
        return comments(text)
    lines = FileContext.split_lines(text)
    wanted = [n for n, line in enumerate(lines, 1) if "#" in line and _QUICK.search(line)]
    if not wanted:
        return []
    for node in ast.walk(ctx.tree):
        kind = node.__class__
        if kind is ast.JoinedStr or kind is ast.Constant and isinstance(node.value, (str, bytes)):
            at = bisect.bisect_left(wanted, node.lineno)
            if at < len(wanted) and wanted[at] <= (node.end_lineno or node.lineno):
                return comments(text)
    return [(n, lines[n - 1].index("#"), lines[n - 1][lines[n - 1].index("#"):]) for n in wanted]


def parse_directives(ctx: FileContext) -> dict[int, Directive]:
    if not _may_suppress(ctx.source):
        return {}
    out: dict[int, Directive] = {}
    for number, start, comment in _directive_comments(ctx):
        if number in out:
            continue
        match = _DIRECTIVE.search(comment)
        if not match:
            continue
        group = "codes1" if match.group("codes1") is not None else "codes2"
        raw = match.group(group)
        if match.group("bracket") is not None or match.group("codes2") is not None:
            codes = frozenset(c.strip().upper() for c in re.split(r"[\s,]+", raw or "") if c.strip())
            span = (start + match.start(group), start + match.end(group))
        else:
            codes, span = None, None
        out[number] = Directive(number, start + match.start() + 1, codes,
                                match.group(0).lower().lstrip("# ").startswith("noqa"), codes_span=span)
    return out


def statement_lines(ctx: FileContext, finding: Finding) -> range:
    """The lines a suppression comment may sit on for ``finding``."""
    node = finding.node
    stmt = ctx.enclosing_statement(node) if node is not None else None
    if stmt is None:
        return range(finding.line, finding.end_line + 1)
    start = min(stmt.lineno, finding.line)
    body = getattr(stmt, "body", None)
    if isinstance(body, list) and body and isinstance(body[0], ast.AST) and body[0].lineno > stmt.lineno:
        end = max(body[0].lineno - 1, finding.end_line) if finding.line < body[0].lineno else finding.end_line
    else:
        end = max(_logical_line_end(ctx, stmt), finding.end_line)
    return range(start, end + 1)


def _logical_line_end(ctx: FileContext, stmt: ast.stmt) -> int:
    """The last line of the logical line ``stmt`` ends: ``b = f(); doc = \"\"\"`` goes on
    to the line that closes the string, and only there can a comment follow it."""
    end = stmt.end_lineno or stmt.lineno
    parent = ctx.parent(stmt)
    for field in ("body", "orelse", "finalbody"):
        siblings = getattr(parent, field, None)
        if not isinstance(siblings, list):
            continue
        at = next((i for i, s in enumerate(siblings) if s is stmt), None)
        if at is None:
            continue
        for following in siblings[at + 1:]:  # `a; b; c`: each starts on the line the one before ends
            if following.lineno != end:
                break
            end = following.end_lineno or following.lineno
        break
    return end


def apply_suppressions(ctx: FileContext, findings: list[Finding]) -> tuple[list[Finding], dict[int, Directive]]:
    """Drop suppressed findings; return the kept ones and the directives (with ``used``)."""
    directives = parse_directives(ctx)
    if not directives:
        return findings, directives
    kept = []
    for finding in findings:
        hit = None
        for line in statement_lines(ctx, finding):
            d = directives.get(line)
            if d is not None and d.covers(finding.code):
                hit = d
                break
        if hit is None:
            kept.append(finding)
        else:
            hit.used.add(finding.code)
    return kept, directives
