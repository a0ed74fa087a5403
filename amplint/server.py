"""``amplint server``: a language server over stdio (pygls; ``pip install "amplint[lsp]"``).

- diagnostics when a document is opened, changed or saved, from the editor's text as the
  editor holds it (never re-encoded to guess a codec; nothing is read from or written to
  disk; the config and ``per-file-ignores`` for the file's path apply), each with its
  rule's doc link;
- a quick fix per finding that has one (unsafe ones say so and are not preferred);
- ``source.fixAll.amplint``: every safe fix, as ``amplint fix`` would apply them, as one
  edit of the changed region only;
- hover over a finding: its rule's code, name and summary.

Positions are in the encoding negotiated at ``initialize`` (UTF-8, UTF-16 or UTF-32:
``positionEncoding``), for diagnostics, code-action ranges and edits alike.  Edits are
versioned (``documentChanges`` with the document's version) when the client supports
it, so a client refuses one made for an older text.

Linting runs on one thread of its own, never on the thread that reads the client's
messages: a change is linted at once, or -- while a lint of it runs -- right after it
(a burst of keystrokes is one lint of the latest text); a result is published only for
the version it was made from, and every request is answered --
invalid params with an LSP error, never a traceback in the reply.  A document over
``MAX_DOCUMENT_CHARS`` gets one diagnostic saying so instead of a lint that would hold
the server for minutes; its results are dropped on ``didClose``.

Like ``check``, it never imports or runs the code it reads, and loads local rules and
plugins only with ``--allow-local-rules`` (or ``AMPLINT_ALLOW_LOCAL_RULES=1``).
"""
from __future__ import annotations

import asyncio
import functools
import gc
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Optional

from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcInternalError, JsonRpcInvalidParams
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol

from . import __version__
from .context import FileContext
from .files import SourceError
from .lsp_lint import MAX_DOCUMENT_CHARS, DocumentLinter, Linted, init_worker, lint_in_worker
from .rule import Applicability, Finding

FIX_ALL = f"{types.CodeActionKind.SourceFixAll.value}.amplint"
_SEVERITY = {"error": types.DiagnosticSeverity.Error, "warning": types.DiagnosticSeverity.Warning,
             "info": types.DiagnosticSeverity.Information}
#: seconds of quiet after the fast pass before the whole document is linted again
WHOLE_AFTER_S = 0.3


class _Protocol(LanguageServerProtocol):
    """pygls' protocol, answering a request whose params do not parse with an
    InvalidParams error (pygls logs it and leaves the client waiting)."""

    def structure_message(self, data):
        try:
            return super().structure_message(data)
        except JsonRpcException as exc:
            if isinstance(data, dict) and "id" in data and "method" in data:
                error = JsonRpcInvalidParams(f"invalid params for {data.get('method')}") \
                    if isinstance(exc, JsonRpcInvalidParams) else JsonRpcInternalError("cannot read the request")
                self._send_response(data["id"], None, error.to_response_error())
            raise


class AmplintServer(LanguageServer):
    def __init__(self, allow_local_rules: bool = False):
        super().__init__("amplint", __version__, protocol_cls=_Protocol)
        self.allow_local_rules = allow_local_rules
        #: uri -> the last lint of that document
        self.results: dict[str, Linted] = {}
        self._rules: Optional[dict] = None
        self._rule_sets: dict[str, list] = {}
        self._lint_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="amplint-lint")
        self._linter: Optional[DocumentLinter] = None
        self._worker = None  # the process of the whole-document lints (started at `initialized`)
        #: documents being linted (fast pass or first lint), and those changed meanwhile
        self._running: set[str] = set()
        self._dirty: set[str] = set()
        self._help: dict[str, Optional[str]] = {}
        #: uri -> the last lint of the whole document (the fast pass starts from it)
        self.whole_lints: dict[str, Linted] = {}
        self._whole_timers: dict[str, asyncio.TimerHandle] = {}

    # --- rules and settings ---------------------------------------------------------------

    def rule(self, code: str):
        """The rule class of ``code`` (None for an unknown one)."""
        if self._rules is None:
            from .registry import all_rules

            self._rules = {r.code: r for r in all_rules((), self.allow_local_rules)}
        return self._rules.get(code)

    def help_uri(self, code: str) -> Optional[str]:
        """The rule's documentation page (docs/rules/<CODE>.md for a bundled rule)."""
        if code not in self._help:
            from .rule_docs import help_uri

            rule = self.rule(code)
            self._help[code] = help_uri(rule) if rule is not None else None
        return self._help[code]

    # --- scheduling (on the event loop) -------------------------------------------------

    def snapshot(self, uri: str) -> Optional[tuple[str, Optional[int]]]:
        """The open document's text and version; None for a document not open."""
        from urllib.parse import unquote

        documents = self.workspace.text_documents  # pygls keys them by the unquoted uri
        document = documents.get(uri) or documents.get(unquote(uri))
        if document is None:
            return None
        return document.source, document.version

    def schedule(self, uri: str) -> None:
        """Lint ``uri`` now, or -- while a lint of it runs -- once that one is done: a
        burst of keystrokes is one lint of the latest text, and the first keystroke
        after a pause waits for nothing."""
        if uri in self._running:
            self._dirty.add(uri)
            return
        self._start_lint(uri, asyncio.get_running_loop())

    def _start_lint(self, uri: str, loop, whole: bool = False) -> None:
        if whole:
            self._whole_timers.pop(uri, None)
        snap = self.snapshot(uri)
        if snap is None:
            return
        if not whole:
            self._running.add(uri)
        text, version = snap
        base = self.whole_lints.get(uri)
        if base is not None and base.text == text:  # an undo back to the linted text
            job = functools.partial(Linted, version, text, base.findings, base.errors)
        elif whole or base is None:
            job = functools.partial(self.linter.lint_text, uri, text, version)
        else:
            job = functools.partial(self.linter.lint_fast, uri, text, version, base)

        def done(future) -> None:
            try:
                linted = future.result()
            except Exception as exc:  # a bug must not silence the document: say so
                linted = Linted(version, text, [], [SourceError(self.linter.path_of(uri), f"internal error: {type(exc).__name__}: {exc}")])
            try:
                loop.call_soon_threadsafe(self._publish, uri, linted, whole)
            except RuntimeError:  # the loop closed: the server is exiting
                pass

        if whole:
            self._submit_whole(uri, text, version).add_done_callback(done)
        else:
            self._lint_thread.submit(job).add_done_callback(done)

    def _submit_whole(self, uri: str, text: str, version: Optional[int]):
        """The whole-document lint that follows a fast pass, in a worker process: on a
        thread it would hold the interpreter lock against the next keystroke's fast pass."""
        from concurrent.futures.process import BrokenProcessPool

        try:
            return self.worker.submit(lint_in_worker, uri, text, version)
        except (BrokenProcessPool, OSError, RuntimeError):
            return self._lint_thread.submit(self.linter.lint_text, uri, text, version)

    def _start_worker(self) -> None:
        try:
            self.worker.submit(int)
        except (OSError, RuntimeError):
            pass

    @property
    def linter(self) -> DocumentLinter:
        if self._linter is None:
            try:
                root = self.workspace.root_path
            except RuntimeError:  # not initialized yet
                root = None
            self._linter = DocumentLinter(self.allow_local_rules, root)
        return self._linter

    @property
    def worker(self):
        if self._worker is None:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            self._worker = ProcessPoolExecutor(
                max_workers=1, mp_context=multiprocessing.get_context("spawn"), initializer=init_worker,
                initargs=(os.getpid(), self.allow_local_rules, self.linter.root))
        return self._worker

    def _publish(self, uri: str, linted: Linted, whole: bool = False) -> None:
        if not whole:
            self._running.discard(uri)
            if uri in self._dirty:  # changed while it was linted: lint the latest text
                self._dirty.discard(uri)
                self._start_lint(uri, asyncio.get_running_loop())
        snap = self.snapshot(uri)
        if snap is None or snap[1] != linted.version:
            return  # closed, or changed since: the newer version's lint publishes
        if self._worker is None:  # after the first lint, not competing with it: ready by the first pause in typing
            self._start_worker()
        if linted.whole:
            self.whole_lints[uri] = linted
        else:  # the whole lint follows once typing pauses
            timer = self._whole_timers.pop(uri, None)
            if timer is not None:
                timer.cancel()
            loop = asyncio.get_running_loop()
            self._whole_timers[uri] = loop.call_later(WHOLE_AFTER_S, self._start_lint, uri, loop, True)
        self.results[uri] = linted
        self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(
            uri=uri, version=linted.version, diagnostics=self.diagnostics(linted)))

    async def current(self, uri: str) -> Optional[Linted]:
        """The lint of the document's current version (linted now when there is none)."""
        snap = self.snapshot(uri)
        if snap is None:
            return None
        found = self.results.get(uri)
        if found is not None and found.version == snap[1] and found.text == snap[0]:
            return found
        return await asyncio.get_running_loop().run_in_executor(self._lint_thread, self.linter.lint_text, uri, *snap)

    # --- positions in the negotiated encoding -------------------------------------------

    def position(self, lines: list[str], line: int, column: int) -> types.Position:
        """A 1-based line and character column as an LSP position."""
        text = lines[line - 1] if 0 < line <= len(lines) else ""
        units = self.workspace.position_codec.client_num_units(text[: max(column - 1, 0)])
        return types.Position(line=max(line - 1, 0), character=units)

    def range(self, lines, line, column, end_line, end_column) -> types.Range:
        return types.Range(start=self.position(lines, line, column), end=self.position(lines, end_line, end_column))

    def column(self, lines: list[str], position: types.Position) -> int:
        """The 0-based character column of an LSP position."""
        text = lines[position.line] if 0 <= position.line < len(lines) else ""
        codec = self.workspace.position_codec.impl
        units = 0
        for index, char in enumerate(text):
            if units >= position.character:
                return index
            units += codec.code_units_for_char(char)
        return len(text)

    def diagnostics(self, linted: Linted) -> list[types.Diagnostic]:
        lines = linted.lines
        out = [self.diagnostic(f, lines) for f in linted.findings]
        out += [types.Diagnostic(range=self.range(lines, e.line, e.col, e.line, e.col), message=e.reason,
                                 severity=_SEVERITY.get(e.severity, types.DiagnosticSeverity.Error), source="amplint")
                for e in linted.errors]
        return out

    def diagnostic(self, f: Finding, lines: list[str]) -> types.Diagnostic:
        help_uri = self.help_uri(f.code)
        return types.Diagnostic(
            range=self.range(lines, f.line, f.column, f.end_line, f.end_column),
            message=f.message,
            severity=_SEVERITY[f.severity.value],
            code=f.code,
            code_description=types.CodeDescription(href=help_uri) if help_uri else None,
            source="amplint",
            related_information=[
                types.DiagnosticRelatedInformation(
                    location=types.Location(uri=_uri(r.path), range=types.Range(
                        start=types.Position(line=max(r.line - 1, 0), character=0),
                        end=types.Position(line=max(r.line - 1, 0), character=0))), message=r.note)
                for r in f.related
            ] or None,
        )

    def workspace_edit(self, uri: str, version: Optional[int], edits: list[types.TextEdit]) -> types.WorkspaceEdit:
        """Versioned (``documentChanges``) when the client takes it: a client refuses an
        edit made for a version it no longer has."""
        capabilities = self.client_capabilities
        versioned = bool(capabilities and capabilities.workspace and capabilities.workspace.workspace_edit
                         and capabilities.workspace.workspace_edit.document_changes)
        if versioned:
            return types.WorkspaceEdit(document_changes=[types.TextDocumentEdit(
                text_document=types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=version), edits=edits)])
        return types.WorkspaceEdit(changes={uri: edits})


def _uri(path: str) -> str:
    import pathlib

    return pathlib.Path(os.path.abspath(path)).as_uri()


def _overlaps(f: Finding, start: tuple[int, int], end: tuple[int, int]) -> bool:
    """Whether ``f`` overlaps the 0-based (line, character column) range ``start``-``end``."""
    return (f.line - 1, f.column - 1) <= end and start <= (f.end_line - 1, f.end_column - 1)


def _changed_region(old: str, new: str) -> tuple[int, int, str]:
    """(start, end, replacement) in ``old``: the one region where ``new`` differs."""
    start = 0
    limit = min(len(old), len(new))
    while start < limit and old[start] == new[start]:
        start += 1
    end_old, end_new = len(old), len(new)
    while end_old > start and end_new > start and old[end_old - 1] == new[end_new - 1]:
        end_old, end_new = end_old - 1, end_new - 1
    return start, end_old, new[start:end_new]


def _line_col(text: str, offset: int) -> tuple[int, int]:
    """1-based line and character column of ``offset`` in ``text`` (the tokenizer's lines)."""
    before = FileContext.split_lines(text[:offset])
    return len(before), len(before[-1]) + 1


def _guarded(handler):
    """A handler whose unexpected exception becomes an LSP error with a one-line message
    (pygls would put the Python traceback in the reply)."""
    import functools
    import inspect

    if inspect.iscoroutinefunction(handler):
        @functools.wraps(handler)
        async def run_async(ls, params):
            try:
                return await handler(ls, params)
            except JsonRpcException:
                raise
            except Exception as exc:
                raise JsonRpcInternalError(f"amplint: {type(exc).__name__}: {exc}") from None
        return run_async

    @functools.wraps(handler)
    def run(ls, params):
        try:
            return handler(ls, params)
        except JsonRpcException:
            raise
        except Exception as exc:
            raise JsonRpcInternalError(f"amplint: {type(exc).__name__}: {exc}") from None
    return run


def build(allow_local_rules: bool = False) -> AmplintServer:
    server = AmplintServer(allow_local_rules)

    @server.feature(types.INITIALIZED)
    def initialized(ls: AmplintServer, params: types.InitializedParams):
        # warm what the first lint needs (the rules, the engine) while the editor opens the file
        ls._lint_thread.submit(lambda: (ls.rule("AMP101"), __import__("amplint.engine")))

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    @_guarded
    def did_open(ls: AmplintServer, params: types.DidOpenTextDocumentParams):
        ls.schedule(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    @_guarded
    def did_change(ls: AmplintServer, params: types.DidChangeTextDocumentParams):
        ls.schedule(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    @_guarded
    def did_save(ls: AmplintServer, params: types.DidSaveTextDocumentParams):
        ls.schedule(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    @_guarded
    def did_close(ls: AmplintServer, params: types.DidCloseTextDocumentParams):
        uri = params.text_document.uri
        timer = ls._whole_timers.pop(uri, None)
        if timer is not None:
            timer.cancel()
        ls._dirty.discard(uri)
        ls.results.pop(uri, None)
        ls.whole_lints.pop(uri, None)
        ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))
        gc.collect()  # a huge document's findings go now, not at some later collection

    @server.feature(
        types.TEXT_DOCUMENT_CODE_ACTION,
        types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix, FIX_ALL], resolve_provider=False),
    )
    @_guarded
    async def code_action(ls: AmplintServer, params: types.CodeActionParams):
        uri = params.text_document.uri
        snap = ls.snapshot(uri)
        if snap is None:
            return []  # not open: there is no editor text to act on
        text, version = snap
        only = params.context.only
        actions = []
        wants = (lambda kind: not only or any(kind == k or kind.startswith(f"{k}.") for k in only))
        if wants(types.CodeActionKind.QuickFix):
            linted = await ls.current(uri)
            if linted is not None and linted.version == version:
                lines = linted.lines
                start = (params.range.start.line, ls.column(lines, params.range.start))
                end = (params.range.end.line, ls.column(lines, params.range.end))
                for f in linted.findings:
                    if f.fix is None or not f.fix.edits or not _overlaps(f, start, end):
                        continue
                    safe = f.fix.applicability is Applicability.SAFE
                    edits = [types.TextEdit(range=ls.range(lines, e.start.line, e.start.col + 1, e.end.line, e.end.col + 1),
                                            new_text=e.text) for e in f.fix.edits]
                    actions.append(types.CodeAction(
                        title=f"{f.code}: {f.fix.description}" + ("" if safe else " (unsafe fix)"),
                        kind=types.CodeActionKind.QuickFix,
                        diagnostics=[ls.diagnostic(f, lines)],
                        is_preferred=safe,
                        edit=ls.workspace_edit(uri, version, edits),
                    ))
        if wants(FIX_ALL):
            fixed = await asyncio.get_running_loop().run_in_executor(ls._lint_thread, ls.linter.fix_text, uri, text)
            if fixed is not None:
                start, end, replacement = _changed_region(text, fixed)
                lines = FileContext.split_lines(text)
                edit = types.TextEdit(range=ls.range(lines, *_line_col(text, start), *_line_col(text, end)),
                                      new_text=replacement)
                actions.append(types.CodeAction(title="amplint: apply every safe fix", kind=FIX_ALL,
                                                edit=ls.workspace_edit(uri, version, [edit])))
        return actions

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    @_guarded
    def hover(ls: AmplintServer, params: types.HoverParams):
        linted = ls.results.get(params.text_document.uri)
        snap = ls.snapshot(params.text_document.uri)
        if linted is None or snap is None or snap[1] != linted.version:
            return None
        here_at = (params.position.line, ls.column(linted.lines, params.position))
        here = [f for f in linted.findings if _overlaps(f, here_at, here_at)]
        if not here:
            return None
        parts = []
        for f in here:
            rule = ls.rule(f.code)
            summary = f" ({rule.name}): {rule.summary}" if rule else ""
            uri = ls.help_uri(f.code)
            link = f" [docs]({uri})" if uri else ""
            parts.append(f"**{f.code}**{summary}{link}\n\n{f.message}")
        return types.Hover(contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value="\n\n---\n\n".join(parts)))

    return server


def main(allow_local_rules: bool = False) -> int:
    server = build(allow_local_rules)
    try:
        server.start_io()
    finally:
        if server._worker is not None:
            server._worker.shutdown(wait=False, cancel_futures=True)
    # the spec: exit code 0 after a shutdown request, 1 when `exit` (or the end of the
    # stream) comes without one
    return 0 if getattr(server.protocol, "_shutdown", False) else 1
