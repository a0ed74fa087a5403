"""``amplint server``: a language server over stdio (pygls; ``pip install "amplint[lsp]"``).

- diagnostics when a document is opened, changed or saved, from the editor's text (the
  engine's ``--stdin-filename`` path: the config and ``per-file-ignores`` for the file's
  path apply; nothing is read from or written to disk), each with its rule's doc link;
- a quick fix per finding that has one (unsafe ones say so and are not preferred);
- ``source.fixAll.amplint``: every safe fix, as ``amplint fix`` would apply them;
- hover over a finding: its rule's code, name and summary.

Like ``check``, it never imports or runs the code it reads, and loads local rules and
plugins only with ``--allow-local-rules`` (or ``AMPLINT_ALLOW_LOCAL_RULES=1``).
"""
from __future__ import annotations

import os
from typing import Optional

from lsprotocol import types
from pygls.lsp.server import LanguageServer

from . import __version__
from .config import ConfigResolver
from .engine import FileResult, RunOptions, run
from .reporters.sarif import rule_help_uri
from .rule import Applicability

FIX_ALL = f"{types.CodeActionKind.SourceFixAll.value}.amplint"
_SEVERITY = {"error": types.DiagnosticSeverity.Error, "warning": types.DiagnosticSeverity.Warning,
             "info": types.DiagnosticSeverity.Information}


class AmplintServer(LanguageServer):
    def __init__(self, allow_local_rules: bool = False):
        super().__init__("amplint", __version__)
        self.allow_local_rules = allow_local_rules
        #: uri -> the last lint of that document (findings with their fixes' edits)
        self.results: dict[str, FileResult] = {}

    def lint(self, uri: str, fix: bool = False) -> Optional[FileResult]:
        document = self.workspace.get_text_document(uri)
        path = document.path if uri.startswith("file:") else os.path.join(self.workspace.root_path or os.getcwd(), "untitled.py")
        resolver = ConfigResolver({}, None, allow_local_rules=self.allow_local_rules)  # re-read: pyproject.toml may have changed
        options = RunOptions(fix=fix, use_cache=False, jobs=1, stdin=document.source.encode("utf-8", "surrogatepass"))
        results = run([path], resolver, options)
        return results[0] if results else None

    def publish(self, uri: str) -> None:
        result = self.lint(uri)
        self.results[uri] = result
        lines = self.workspace.get_text_document(uri).lines
        diagnostics = []
        if result is not None:
            diagnostics = [_diagnostic(f, lines) for f in result.findings]
            diagnostics += [types.Diagnostic(range=_range(lines, e.line, e.col, e.line, e.col), message=e.reason,
                                             severity=types.DiagnosticSeverity.Error, source="amplint") for e in result.errors]
        self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=diagnostics))


def _utf16(lines: list[str], line: int, column: int) -> types.Position:
    """A 1-based line and character column as an LSP position (UTF-16 code units)."""
    text = lines[line - 1] if 0 < line <= len(lines) else ""
    return types.Position(line=max(line - 1, 0), character=len(text[: column - 1].encode("utf-16-le")) // 2)


def _range(lines, line, column, end_line, end_column) -> types.Range:
    return types.Range(start=_utf16(lines, line, column), end=_utf16(lines, end_line, end_column))


def _diagnostic(f, lines) -> types.Diagnostic:
    return types.Diagnostic(
        range=_range(lines, f.line, f.column, f.end_line, f.end_column),
        message=f.message,
        severity=_SEVERITY[f.severity.value],
        code=f.code,
        code_description=types.CodeDescription(href=rule_help_uri(f.code)),
        source="amplint",
        related_information=[
            types.DiagnosticRelatedInformation(
                location=types.Location(uri=_uri(r.path), range=_range([], r.line, 1, r.line, 1)), message=r.note)
            for r in f.related
        ] or None,
    )


def _uri(path: str) -> str:
    import pathlib

    return pathlib.Path(os.path.abspath(path)).as_uri()


def _overlaps(f, start: types.Position, end: types.Position) -> bool:
    return (f.line - 1, f.column - 1) <= (end.line, end.character) and (start.line, start.character) <= (f.end_line - 1, f.end_column - 1)


def build(allow_local_rules: bool = False) -> AmplintServer:
    server = AmplintServer(allow_local_rules)

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: AmplintServer, params: types.DidOpenTextDocumentParams):
        ls.publish(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: AmplintServer, params: types.DidChangeTextDocumentParams):
        ls.publish(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls: AmplintServer, params: types.DidSaveTextDocumentParams):
        ls.publish(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: AmplintServer, params: types.DidCloseTextDocumentParams):
        ls.results.pop(params.text_document.uri, None)
        ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=params.text_document.uri, diagnostics=[]))

    @server.feature(
        types.TEXT_DOCUMENT_CODE_ACTION,
        types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix, FIX_ALL], resolve_provider=False),
    )
    def code_action(ls: AmplintServer, params: types.CodeActionParams):
        uri = params.text_document.uri
        only = params.context.only
        actions = []
        wants = (lambda kind: not only or any(kind == k or kind.startswith(f"{k}.") for k in only))
        if wants(types.CodeActionKind.QuickFix):
            result = ls.results.get(uri) or ls.lint(uri)
            lines = ls.workspace.get_text_document(uri).lines
            for f in (result.findings if result else []):
                if f.fix is None or not f.fix.edits or not _overlaps(f, params.range.start, params.range.end):
                    continue
                safe = f.fix.applicability is Applicability.SAFE
                edits = [types.TextEdit(range=_range(lines, e.start.line, e.start.col + 1, e.end.line, e.end.col + 1), new_text=e.text)
                         for e in f.fix.edits]
                actions.append(types.CodeAction(
                    title=f"{f.code}: {f.fix.description}" + ("" if safe else " (unsafe fix)"),
                    kind=types.CodeActionKind.QuickFix,
                    diagnostics=[_diagnostic(f, lines)],
                    is_preferred=safe,
                    edit=types.WorkspaceEdit(changes={uri: edits}),
                ))
        if wants(FIX_ALL):
            document = ls.workspace.get_text_document(uri)
            result = ls.lint(uri, fix=True)
            fixed = result.output.decode("utf-8", "surrogatepass") if result is not None and result.output else None
            if fixed is not None and fixed != document.source and not result.errors:
                lines = document.lines
                whole = types.Range(start=types.Position(line=0, character=0),
                                    end=types.Position(line=len(lines), character=0))
                actions.append(types.CodeAction(
                    title="amplint: apply every safe fix", kind=FIX_ALL,
                    edit=types.WorkspaceEdit(changes={uri: [types.TextEdit(range=whole, new_text=fixed)]}),
                ))
        return actions

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    def hover(ls: AmplintServer, params: types.HoverParams):
        from .registry import all_rules

        result = ls.results.get(params.text_document.uri)
        if result is None:
            return None
        here = [f for f in result.findings if _overlaps(f, params.position, params.position)]
        if not here:
            return None
        rules = {r.code: r for r in all_rules((), ls.allow_local_rules)}
        parts = []
        for f in here:
            rule = rules.get(f.code)
            summary = f" ({rule.name}): {rule.summary}" if rule else ""
            parts.append(f"**{f.code}**{summary} [docs]({rule_help_uri(f.code)})\n\n{f.message}")
        return types.Hover(contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value="\n\n---\n\n".join(parts)))

    return server


def main(allow_local_rules: bool = False) -> int:
    build(allow_local_rules).start_io()
    return 0
