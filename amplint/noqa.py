"""``amplint check --add-noqa``: silence every current finding with a ``# noqa: CODE``
comment, so that a large codebase adopts amplint in one commit.

Each comment goes where :mod:`amplint.suppress` looks for it: on a line of the finding's
statement (the finding's own line when a comment can end it; else the statement's last
such line -- never a line that ends inside a string or with a backslash).  When the
statement already has a ``# noqa: ...`` or ``# amplint: ignore[...]`` with codes, the
new codes are added to it.  Running it twice changes nothing; bytes outside the
inserted text are kept (the fix writer's edits and atomic write).
"""
from __future__ import annotations

import ast
import io
import tokenize
from typing import Iterable

from .baseline import code_digest
from .config import Settings
from .context import FileContext
from .engine import UNUSED_SUPPRESSION, apply_fixes, parse
from .files import FileChangedError, SourceError, check_writable, read_source, write_file
from .rule import Edit, Finding, Fix, Position
from .suppress import parse_directives, statement_lines


def _comment_lines(text: str, count: int) -> set[int]:
    """Lines whose end may take a comment: they end a logical or blank line, outside
    any string and not continued by a backslash."""
    ok: set[int] = set()
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type in (tokenize.NEWLINE, tokenize.NL, tokenize.COMMENT):
                ok.add(tok.start[0])
    except (tokenize.TokenError, SyntaxError):
        return set(range(1, count + 1))
    return ok


def _nodes_by_span(ctx: FileContext) -> dict[tuple[int, int, int, int], ast.AST]:
    """Each node by the span a finding on it reports (1-based character columns);
    the deepest node wins, as ``ast.walk`` goes breadth first."""
    spans = {}
    for node in ast.walk(ctx.tree):
        if getattr(node, "end_lineno", None) is None:
            continue
        spans[(node.lineno, ctx.char_col(node.lineno, node.col_offset) + 1,
               node.end_lineno, ctx.char_col(node.end_lineno, node.end_col_offset) + 1)] = node
    return spans


def add_noqa(path: str, findings: Iterable[Finding], settings: Settings) -> tuple[int, int]:
    """Write ``# noqa`` codes for ``findings`` (all of file ``path``).  Returns
    (codes added, lines changed); ``SourceError`` when the file cannot be read, parsed
    or written."""
    source = read_source(path)
    check_writable(source)
    findings = list(findings)
    lines = FileContext.split_lines(source.text)
    if any(f.fingerprint and code_digest(f, lines) != f.fingerprint.split(":")[0] for f in findings):
        # the findings' lines are those of the bytes the check read: a comment placed by
        # them now would land on the wrong statement
        raise SourceError(path, "changed since amplint checked it; left unchanged (run --add-noqa again)")
    tree = parse(path, source.text)
    ctx = FileContext(path, source.text, tree, settings, None)
    ctx.walk_and_bucket(set())
    spans = _nodes_by_span(ctx)
    directives = parse_directives(ctx)
    commentable = _comment_lines(source.text, len(ctx.lines))
    wanted: dict[int, set[str]] = {}
    for f in findings:
        if f.code == UNUSED_SUPPRESSION:
            continue  # silencing "this suppression is unused" with another one is no fix
        f.node = spans.get((f.line, f.column, f.end_line, f.end_column))
        lines = statement_lines(ctx, f)
        existing = [n for n in lines if n in directives]
        if any(directives[n].codes is None for n in existing):
            continue  # a bare noqa already covers it (the finding cannot be here)
        pending = [n for n in lines if n in wanted]
        if existing or pending:
            target = min(existing + pending)  # one comment per statement: a second would be unused
        elif f.line in commentable:
            target = f.line
        else:
            target = max((n for n in lines if n in commentable), default=f.line)
        wanted.setdefault(target, set()).add(f.code)

    fixes, added = [], 0
    for number, codes in sorted(wanted.items()):
        text = ctx.line_text(number)
        directive = directives.get(number)
        if directive is not None:
            codes = codes - directive.codes
            start, end = directive.codes_span  # in the comment token, never in a string
            current = text[start:end].rstrip()
            merged = (current + ", " if current.strip() else current) + ", ".join(sorted(codes))
            edit = Edit(Position(number, start), Position(number, end), merged)  # character columns, as apply_fixes takes
        else:
            content = text.rstrip(" \t")
            edit = Edit(Position(number, len(content)), Position(number, len(text)),
                        ("  " if content.strip() else "") + f"# noqa: {', '.join(sorted(codes))}")
        if codes:
            fixes.append(Fix([edit], "safe", "add noqa"))
            added += len(codes)
    if not fixes:
        return 0, 0
    new_text, _ = apply_fixes(ctx, fixes)
    try:
        parse(path, new_text)
    except SourceError as exc:  # cannot happen when the lines are chosen right; never write broken code
        raise SourceError(path, f"internal error: --add-noqa produced invalid code ({exc.reason}); file left unchanged",
                          exc.line, exc.col) from None
    try:
        write_file(path, source.encode(new_text), expected=source)
    except FileChangedError as exc:
        raise SourceError(path, exc.strerror) from None
    except OSError as exc:
        raise SourceError(path, f"cannot write: {exc.strerror or exc}") from None
    return added, len(fixes)
