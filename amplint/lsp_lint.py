"""What the language server lints with: one document's text, as ``amplint check`` and
``amplint fix`` would see that file (its config, ``per-file-ignores``), never read from
or written to disk.  No pygls here: the server's worker process imports only this."""
from __future__ import annotations

import dataclasses
import os
from typing import Optional

from .config import ConfigError, ConfigResolver
from .context import FileContext
from .files import SourceError
from .rule import Finding

#: the largest document linted in the editor (about 50,000 lines); larger ones take
#: ``amplint check``, which splits them across processes
MAX_DOCUMENT_CHARS = 2_000_000


@dataclasses.dataclass
class Linted:
    """One lint of one version of a document."""

    version: Optional[int]
    text: str
    findings: list[Finding]
    errors: list[SourceError]
    #: a lint of the whole document (False: the fast pass over the edited statements,
    #: amplint/incremental.py, which a whole lint follows)
    whole: bool = True

    @property
    def lines(self) -> list[str]:
        return FileContext.split_lines(self.text)


class DocumentLinter:
    """Lints editor documents of one workspace (``root``: where an untitled document lives)."""

    def __init__(self, allow_local_rules: bool = False, root: Optional[str] = None):
        self.allow_local_rules = allow_local_rules
        self.root = root

    def _selected(self, settings) -> list:
        from .engine import _rules_for

        return _rules_for(settings)  # the engine's cache of selected rules (Settings.rules)

    def path_of(self, uri: str) -> str:
        if uri.startswith("file:"):
            from pygls.uris import to_fs_path

            return to_fs_path(uri) or uri
        return os.path.join(self.root or os.getcwd(), "untitled.py")

    def lint_text(self, uri: str, text: str, version: Optional[int]) -> Linted:
        """The findings of ``text`` (the editor's text of ``uri``), as ``amplint check``
        reports them for that path: the in-memory front end of the lint pipeline (``pipeline.lint_sources``)."""
        from .pipeline import lint_sources

        path = self.path_of(uri)
        if len(text) > MAX_DOCUMENT_CHARS:
            return Linted(version, text, [], [SourceError(
                path, f"not linted in the editor: {len(text):,} characters is over the server's limit of "
                      f"{MAX_DOCUMENT_CHARS:,}; run `amplint check` on it", severity="info")])
        result = lint_sources({path: text}, self._resolver())[path]
        return Linted(version, text, result.findings, result.errors)

    def lint_fast(self, uri: str, text: str, version: Optional[int], base: Linted) -> Linted:
        """The fast pass after an edit: the edited top-level statements linted alone,
        the previous whole lint elsewhere (amplint/incremental.py); the whole document
        when that is not possible."""
        from .engine import _outgoing, lint_text
        from .incremental import relint
        from .project import ProjectIndex

        path = self.path_of(uri)
        if base.errors or len(text) > MAX_DOCUMENT_CHARS:
            return self.lint_text(uri, text, version)
        try:
            settings = self._settings(path)
        except ConfigError:
            return self.lint_text(uri, text, version)
        rules = self._selected(settings)

        def lint_piece(source: str):
            found, _, errors = lint_text(path, source, settings, rules, ProjectIndex(), False)
            return _outgoing(found, source), errors

        out = relint(base.text, base.findings, text, lint_piece)
        if out is None:
            return self.lint_text(uri, text, version)
        return Linted(version, text, out[0], out[1], whole=False)

    def fix_text(self, uri: str, text: str) -> Optional[str]:
        """``text`` with every safe fix applied, as ``amplint fix`` would (None: nothing
        to fix, or the text cannot be fixed)."""
        from .pipeline import LintMode, lint_sources

        path = self.path_of(uri)
        if len(text) > MAX_DOCUMENT_CHARS:
            return None
        result = lint_sources({path: text}, self._resolver(), LintMode(fix=True))[path]
        return result.text if result.text != text and not result.errors else None

    def _resolver(self) -> ConfigResolver:
        # a resolver per lint: pyproject.toml may have changed since the last one
        return ConfigResolver({}, None, allow_local_rules=self.allow_local_rules)

    def _settings(self, path: str):
        # a resolver per lint: pyproject.toml may have changed since the last one
        return ConfigResolver({}, None, allow_local_rules=self.allow_local_rules).for_path(path)


_LINTER: Optional[DocumentLinter] = None


def init_worker(parent_pid: int, allow_local_rules: bool, root: Optional[str]) -> None:
    """The server's worker process: dies with the server, lints with its own linter."""
    from .procs import die_with_parent

    global _LINTER
    die_with_parent(parent_pid)
    _LINTER = DocumentLinter(allow_local_rules, root)


def lint_in_worker(uri: str, text: str, version: Optional[int]) -> Linted:
    return _LINTER.lint_text(uri, text, version)
