"""The one lint pipeline for many files, :func:`lint_project`, and its two front ends:
:func:`run` (the command line's ``check`` / ``fix`` / ``--stdin-filename``: discovery,
each file's settings, the pipeline) and :func:`lint_sources` (text in memory: the language
server, ``verify``, ``verify --fix``, ``fix --verify``).  Each file is linted by
amplint/engine.py.

Check: every file linted once against an empty project index, which gives its summary
and the cross-file questions it asked; the project index built from the summaries; the
files whose questions another file answers linted again against it (the second pass).
Fix: the summaries first, every file fixed against their index, then again while the
fixes change the index (the fix rounds).  A file over LARGE_FILE is linted in pieces.

What varies between front ends is where the text comes from -- read from disk inside the
worker that lints the file (the parent never holds a run's sources), or given (stdin's
bytes, an editor's or verify's text) -- and how it runs: worker processes or this one,
the cache (amplint/cache.py) or not, progress.  Never imports or executes the code it reads.
"""
from __future__ import annotations

import ast
import bisect
import dataclasses
import functools
import gc
import json
import os
import re
from typing import Callable, Iterable, Mapping, Optional, Sequence, Union

from .config import ConfigError, ConfigResolver, Settings
from .context import FileContext
from .engine import (FileResult, _free_earlier_trees, _outgoing, _rules_for, _Rules, check_syntax, fix_text, lint_text,
                     parse, worker_count)
from .files import (FileChangedError, SourceError, SourceFile, _as_typed, check_writable, discover, read_regular,
                    read_source, write_atomic)
from . import engine_detect
from .project import CONFIG_MARKERS, FileSummary, ProjectIndex, defines_constants, summarize
from .rule import Finding

#: below this many files to lint, a process pool costs more than it saves
POOL_THRESHOLD = 8
#: project rounds of ``fix``: a fix in one file can change what another file's fix should
#: be (AMP501 moving a training script from apex to amplint changes which `amp` a model
#: file's decorator may use), so the fixed files are summarised again until nothing changes
_FIX_ROUNDS = 3

#: the source of a path given instead of the file's: bytes are decoded as the file's
#: would be (stdin), text is linted as it is (an editor's buffer, verify's fixed copies)
Given = Union[bytes, str]


# --- the front ends: files on disk, text in memory ------------------------------------------

@dataclasses.dataclass
class RunOptions:
    fix: bool = False
    unsafe_fixes: bool = False
    diff: bool = False
    use_cache: bool = True
    cache_dir: Optional[str] = None
    jobs: int = 0  # 0: one per core
    report_unused_suppressions: bool = False
    progress: Optional[Callable[[int, int], None]] = None  # (done, total)
    #: the source of the one path given, read from stdin (``--stdin-filename``); the
    #: file, if there is one, is neither read nor written
    stdin: Optional[bytes] = None
    respect_gitignore: bool = True  # skip what .gitignore / .ignore files ignore when walking folders
    force_exclude: bool = False  # exclusions apply to explicitly named paths too


@dataclasses.dataclass(frozen=True)
class LintMode:
    """What :func:`lint_sources` does: check, or fix (safe fixes; with ``unsafe`` the
    unsafe ones too)."""

    fix: bool = False
    unsafe: bool = False


CHECK = LintMode()


@dataclasses.dataclass
class SourceResult:
    """One source after :func:`lint_sources`: ``text`` is what the findings are on (the
    fixed text in fix mode, nothing written), ``fixed`` how many fixes were applied."""

    path: str
    text: str
    findings: list[Finding] = dataclasses.field(default_factory=list)
    errors: list[SourceError] = dataclasses.field(default_factory=list)
    fixed: int = 0


def lint_sources(sources: Mapping[str, str], resolver: ConfigResolver, mode: LintMode = CHECK) -> dict[str, SourceResult]:
    """The lint pipeline (:func:`lint_project`, what ``run`` runs) on text in memory, for
    callers that hold it (verify, verify --fix, fix --verify, an editor): each file's
    settings from ``resolver``, then the same passes as ``amplint check`` (or the same fix
    rounds as ``amplint fix``), in this process, without the cache.  Findings are in report coordinates, as ``run`` returns them (character
    columns, fingerprinted).  Nothing is read from or written to disk beyond the
    configuration."""
    out: dict[str, SourceResult] = {}
    files: list[tuple[str, Settings]] = []
    for path, text in sources.items():
        try:
            files.append((path, resolver.for_path(path)))
        except ConfigError as exc:
            out[path] = SourceResult(path, text, errors=[SourceError(exc.path or path, exc.reason, exc.line or 1)])
    options = RunOptions(fix=mode.fix, unsafe_fixes=mode.unsafe, use_cache=False, jobs=1)
    for path, result in lint_project(files, options, 1, {path: sources[path] for path, _ in files}).items():
        text = result.text if result.text is not None else sources[path]
        out[path] = SourceResult(path, text, result.findings, result.errors, result.fixed)
    return {path: out[path] for path in sources}


def run(paths: list[str], resolver: ConfigResolver, options: RunOptions) -> list[FileResult]:
    """Lint (or fix) every Python file under ``paths``: discovery, each file's settings,
    then the pipeline (:func:`lint_project`), the files read from disk in the worker that
    lints them.  Results are in path order; paths that cannot be read
    or parsed come back as results with errors."""
    results: dict[str, FileResult] = {}
    files: list[tuple[str, Settings]] = []

    def settings_for(path: str) -> Optional[Settings]:
        """The file's settings; a broken config is reported once, against the config
        file, and only the files under it are skipped."""
        try:
            return resolver.for_path(path)
        except ConfigError as exc:
            where = exc.path or path
            if where not in results:
                results[where] = FileResult(where, errors=[SourceError(where, exc.reason, exc.line or 1, 1)])
            return None

    def excluded(path: str, parents: bool = True) -> bool:
        settings = settings_for(path)
        return settings is None or settings.is_excluded(path, parents)

    if options.stdin is not None:
        path = _as_typed(paths[0])
        settings = settings_for(path)
        if settings is not None and not (options.force_exclude and settings.is_excluded(path)):
            results.update(lint_project([(path, settings)], options, 1, {path: options.stdin}))
        return [results[p] for p in sorted(results)]
    for path, error in discover(paths, excluded, respect_gitignore=options.respect_gitignore,
                                force_exclude=options.force_exclude):
        if error is not None:
            result = results.setdefault(path, FileResult(path))
            (result.warnings if error.severity == "warning" else result.errors).append(error)
            continue
        settings = settings_for(path)
        if settings is not None:
            files.append((path, settings))
    if files:
        results.update(lint_project(files, options, worker_count(options.jobs, len(files))))
    return [results[p] for p in sorted(results)]


# --- the pipeline ------------------------------------------------------------------------------

def lint_project(files: Sequence[tuple[str, Settings]], options: RunOptions, jobs: int,
                 sources: Optional[Mapping[str, Given]] = None) -> dict[str, FileResult]:
    """Check or fix (``options.fix`` / ``options.diff``) ``files``, each with its settings:
    path -> result.  ``sources`` gives the text of the paths it names (nothing of theirs is
    read from or written to disk; no cache); every other file is read in the worker that
    lints it.  ``jobs``: worker processes (1: this process)."""
    if not files:
        return {}
    if options.fix or options.diff:
        return _fix_rounds(files, options, jobs, dict(sources or {}))
    return _check_passes(files, options, jobs, dict(sources or {}))


def _fix_rounds(files, options: RunOptions, jobs: int, sources: dict[str, Given]) -> dict[str, FileResult]:
    """Fix mode: summaries of every file first (the project index), then fix each file
    against it; when the fixes change the index, another round (at most ``_FIX_ROUNDS``),
    so ``fix`` is a fixpoint across files.  A round after the first reads what the one
    before wrote, or for given text its fixed text.  No cache: fixing always starts from
    the source itself."""
    out: dict[str, FileResult] = {}
    index = None
    for _ in range(_FIX_ROUNDS):
        summaries, failed = [], {}
        for outcome in _map(_summarize_task, files, jobs, (None, sources), None):
            if outcome.summary is not None:
                summaries.append(outcome.summary)
            else:
                failed[outcome.path] = FileResult(outcome.path, errors=[outcome.error])
        now = sorted(summaries, key=lambda d: d["path"])  # summaries come as JSON records
        if index is not None and now == index:
            break  # the fixes written left the index as it was: nothing else to do
        index = now
        # a file that failed (changed while fixing, unreadable) keeps its first answer: a
        # later round never touches a file the user is editing
        tasks = [(path, settings, options) for path, settings in files
                 if path not in failed and not (path in out and out[path].errors)]
        changed = False
        for result in _map(_fix_task, tasks, jobs, (summaries, sources), options.progress):
            # the next round sees this round's fixes: on disk, or (given text) in ``sources``;
            # with --diff or stdin's bytes nothing is kept, and one round says it all
            if result.changed and not options.diff:
                if result.text is not None:
                    sources[result.path] = result.text
                    changed = True
                elif result.output is None:
                    changed = True
            before = out.get(result.path)
            if before is not None:  # a later round: count what every round fixed
                result.fixed += before.fixed
                result.changed = result.changed or before.changed
            out[result.path] = result
        for path, result in failed.items():
            out.setdefault(path, result)
        if not changed:
            break
    return out


def _check_passes(files, options: RunOptions, jobs: int, sources: dict[str, Given]) -> dict[str, FileResult]:
    """Check mode: every file is parsed once against an empty project index; only files
    whose cross-file questions another file answers are linted again with the index.
    Both passes are cached (amplint/cache.py: what the key covers, how entries are
    signed and checked; the second pass is also keyed on the index); given sources are
    not (the cache is keyed on the file's bytes)."""
    cache = None
    if options.use_cache and not sources:
        # imported only here: hmac, secrets and tempfile are a --no-cache run's cost otherwise
        from .cache import Cache, entry_key, valid_entry

        cache = Cache(options.cache_dir or os.path.join(files[0][1].root, ".amplint_cache"), named=bool(options.cache_dir))
    unused = options.report_unused_suppressions
    settings_of = dict(files)
    raw: dict[str, bytes] = {}
    keys: dict[str, str] = {}
    entries: dict[str, CheckEntry] = {}
    todo = []
    for path, settings in files:
        if cache is not None:
            try:
                raw[path] = read_regular(path)
            except OSError:
                raw[path] = b""
            keys[path] = entry_key("check", path, raw[path], settings, unused)
            hit = cache.get(keys[path])
            if valid_entry(hit, path):
                entries[path] = CheckEntry.from_json(hit)
                continue
        todo.append((path, settings, unused))
    sizes = {path: len(sources[path]) if path in sources else _size(path) for path, _, _ in todo}
    large = [(path, settings) for path, settings, _ in todo if sizes[path] > LARGE_FILE]
    if large:  # given sources too (stdin: N26): their pieces are spread over the pool like a file's
        done, whole = _check_large_files(large, unused, options.jobs, options.progress, sources)
        skip = {path for path, _ in large} - {path for path, _ in whole}
        todo = [task for task in todo if task[0] not in skip]
        first_pass = list(done.values())
    else:
        first_pass = []
    if jobs > 1 and len(todo) >= POOL_THRESHOLD:
        _load_before_fork(settings for _, settings, _ in todo)
    for entry in first_pass + _map(_check_task, todo, jobs, (None, sources), options.progress,
                                   [sizes[path] for path, _, _ in todo]):
        entries[entry.path] = entry
        if cache is not None and not entry.errors:
            cache.put(keys[entry.path], entry.to_json())

    project_json = [entries[p].summary for p in sorted(entries) if entries[p].summary]
    index = ProjectIndex(FileSummary.from_json(s) for s in project_json)
    again = [p for p in sorted(entries) if entries[p].queries and index.answers_any(entries[p].queries, p)]
    if again:
        fingerprint = index.fingerprint()
        todo = []
        for path in again:
            if cache is not None:
                keys[path] = entry_key("cross", path, raw[path], settings_of[path], unused, fingerprint)
                hit = cache.get(keys[path])
                if valid_entry(hit, path):
                    entries[path] = _second_pass(entries[path], CheckEntry.from_json(hit))
                    continue
            todo.append((path, settings_of[path], unused))
        for entry in _map(_check_task, todo, jobs, (project_json, sources), None,
                          [sizes.get(path, 0) for path, _, _ in todo]):
            entries[entry.path] = _second_pass(entries[entry.path], entry)
            if cache is not None and not entry.errors:
                cache.put(keys[entry.path], entry.to_json())
    return {path: e.result() for path, e in entries.items()}


def _second_pass(first: CheckEntry, second: CheckEntry) -> CheckEntry:
    """A file's entry after its second pass: the second pass's findings, frames and
    errors, the first pass's summary and queries (the index was built from those)."""
    return dataclasses.replace(first, findings=second.findings, frames=second.frames, errors=second.errors)


@dataclasses.dataclass(frozen=True)
class CheckEntry:
    """One file's result in check mode, as a worker (or a piece of a large file, or the
    cache) gives it back: its findings (report coordinates, fingerprinted), the source
    line of each finding's frame, its errors, and -- in the first pass, against an empty
    project index -- its summary (``FileSummary.to_json``: the project index and its
    fingerprint are built from these records) and the cross-file questions it asked."""

    path: str
    findings: tuple[Finding, ...] = ()
    frames: Mapping[int, str] = dataclasses.field(default_factory=dict)
    errors: tuple[SourceError, ...] = ()
    summary: Optional[dict] = None
    queries: tuple[tuple, ...] = ()

    def to_json(self) -> dict:
        """The cache's record (``cache.valid_entry`` checks its shape)."""
        return {"path": self.path, "findings": [f.to_dict() for f in self.findings],
                "frames": dict(self.frames), "errors": [_error_dict(e) for e in self.errors],
                "summary": self.summary, "queries": [list(q) for q in self.queries]}

    @classmethod
    def from_json(cls, d: dict) -> "CheckEntry":
        return cls(d["path"], tuple(Finding.from_dict(f) for f in d["findings"]),
                   {int(k): v for k, v in d["frames"].items()}, tuple(SourceError(**e) for e in d["errors"]),
                   d["summary"], tuple(tuple(q) for q in d["queries"]))

    def result(self) -> FileResult:
        return FileResult(self.path, list(self.findings), list(self.errors), frames=dict(self.frames))


@dataclasses.dataclass(frozen=True)
class SummaryOutcome:
    """A file's summary for the project index (``FileSummary.to_json``), or why not."""

    path: str
    summary: Optional[dict] = None
    error: Optional[SourceError] = None


@dataclasses.dataclass(frozen=True)
class PieceOutcome:
    """One pool task on a piece of a large file (:func:`_piece_task`): the statements
    later pieces are given (``preamble`` kind) or the piece's result (``lint`` kind);
    neither when the piece does not parse (the file is then linted whole) or the file
    cannot be read (``error``)."""

    path: str
    first: int
    preamble: Optional[list] = None
    part: Optional[CheckEntry] = None
    error: Optional[SourceError] = None


@dataclasses.dataclass
class WorkerState:
    """What one process (a pool worker, or this one) keeps between the files of one
    ``_map`` (the rules it keeps for its whole life: ``engine.RuleCache``)."""

    #: the run's project index; None in the first check pass (each file gets an empty one)
    project: Optional[ProjectIndex] = None
    #: the large file whose pieces this worker is linting: (path, sha256, lines, identity)
    large_file: Optional[tuple] = None
    #: path -> the source to lint instead of the file's (stdin's bytes, given text)
    sources: dict[str, Given] = dataclasses.field(default_factory=dict)


# Set in each pool process by _init_worker (or in-process).
_WORKER = WorkerState()


def _init_worker(project_json: Optional[list], sources: Optional[dict] = None) -> None:
    global _WORKER
    project = ProjectIndex(FileSummary.from_json(s) for s in project_json) if project_json is not None else None
    _WORKER = WorkerState(project, sources=dict(sources or {}))


def _read_source(path: str) -> SourceFile:
    return _source_of(path, _WORKER.sources.get(path))


def _source_of(path: str, given: Optional[Given]) -> SourceFile:
    """The source of ``path``: given text as it is, given bytes (stdin) decoded as the
    file's would be, else the file read from disk."""
    if isinstance(given, str):
        return SourceFile(path, given, "utf-8", given.encode("utf-8", "surrogatepass"))
    return read_source(path, given)


def _error_dict(e: SourceError) -> dict:
    return {"path": e.path, "reason": e.reason, "line": e.line, "col": e.col}


def _frames(findings: list[Finding], text: str, lines: Optional[list[str]] = None) -> dict[int, str]:
    frames: dict[int, str] = {}
    for f in findings:
        if f.line not in frames:
            if lines is None:
                lines = FileContext.split_lines(text)
            frames[f.line] = lines[f.line - 1] if 0 < f.line <= len(lines) else ""
    return frames


def _check_task(args) -> CheckEntry:
    """Lint one file (check mode): its :class:`CheckEntry`."""
    path, settings, unused = args
    try:
        source = _read_source(path)
        if not _worth_parsing(source.text, settings, unused):
            check_syntax(path, source.text)
            # cannot involve torch or any selected rule: checked for syntax errors only
            return CheckEntry(path, summary=FileSummary(path).to_json())
        given = _WORKER.project
        if given is not None and len(source.text) > LARGE_FILE:  # (the first pass: _check_large_files)
            pieces = _check_in_pieces(path, source.text, settings, unused, given)
            if pieces is not None:
                return pieces
        project = given if given is not None else ProjectIndex()
        findings, ctx, errors = lint_text(path, source.text, settings, _rules_for(settings), project, unused)
        summary, queries = None, ()
        if given is None:
            summary = summarize(ctx, settings.rules()).to_json()
            queries = tuple(dict.fromkeys(project.queries))
    except SourceError as exc:
        return CheckEntry(path, errors=(exc,))
    lines = ctx.lines if findings else None  # split once for the fingerprints and the frames
    return CheckEntry(path, tuple(_outgoing(findings, source.text, lines)), _frames(findings, source.text, lines),
                      tuple(errors), summary, queries)


# --- very large files -------------------------------------------------------------------

#: above this many bytes ``check`` lints a file in pieces of about PIECE characters:
#: Python's AST costs ~200 bytes of memory per byte of source, so a 20 MB generated file
#: parsed whole needs ~4 GB; in pieces memory stays bounded whatever the file's size, and
#: the pieces are spread over the worker processes like files
LARGE_FILE = 4 * 1024 * 1024
PIECE = 1024 * 1024
#: module-level statements (imports, constants, config classes) each piece is given from
#: the pieces before it, so that aliases, constants and config defaults resolve; larger
#: ones are left out.  What else a piece cannot see (a helper function in an earlier piece
#: called from a ``forward``) is the price of bounded memory, only in files this large.
PREAMBLE_STATEMENT = 4096
PREAMBLE_TOTAL = 256 * 1024
#: lines at column 0 where a top-level statement may start (not a clause of the one before)
_TOP_LEVEL_START = re.compile(r"^(?!(?:else|elif|except|finally)\b)[A-Za-z_@]", re.M)
_LINE_END = re.compile(r"\r\n|\r|\n")


class _Lines:
    """A large text's line offsets (line numbers are 1-based) and its pieces."""

    def __init__(self, text: str):
        from array import array

        self.text = text
        self.starts = array("q", [0])
        self.starts.extend(m.end() for m in _LINE_END.finditer(text))

    def offset(self, line: int) -> int:
        return self.starts[line - 1] if line <= len(self.starts) else len(self.text)

    def span(self, first: int, end: int) -> str:
        """Lines [first, end) with their line endings."""
        return self.text[self.offset(first): self.offset(end)]

    def line(self, number: int) -> str:
        return _LINE_END.split(self.span(number, number + 1), 1)[0]

    def pieces(self) -> list[tuple[int, int]]:
        """Line ranges [first, end) of about PIECE characters, cut only before a line that
        starts a statement at column 0 (not right after a decorator).  A cut inside a
        string or brackets makes the piece before it fail to parse, which sends the file
        back to being linted whole."""
        cuts, last, text = [1], 0, self.text
        for m in _TOP_LEVEL_START.finditer(text):
            if m.start() - last >= PIECE:
                line = bisect.bisect_right(self.starts, m.start())
                if self.starts[line - 1] == m.start() and not (line > 1 and text.startswith("@", self.starts[line - 2])):
                    cuts.append(line)
                    last = m.start()
        cuts.append(len(self.starts) + 1)
        return list(zip(cuts, cuts[1:]))

    def piece_source(self, first: int, end: int, preamble: Sequence[tuple[int, int]] = ()) -> str:
        """Lines [first, end) and the ``preamble`` ranges before them at their own line
        numbers, every other line blank: positions in the piece are positions in the file."""
        parts, line = [], 1
        for a, b in [*(r for r in preamble if r[1] <= first), (first, end)]:
            parts.append("\n" * (a - line))
            body = self.span(a, b)
            parts.append(body)
            line = b
            if not body.endswith(("\n", "\r")):
                parts.append("\n")
                line += 1
        return "".join(parts)

    def preamble_of(self, tree: ast.Module, first: int) -> list[tuple[int, int, int]]:
        """(first line, end line, size) of the statements of ``tree`` from line ``first``
        on that later pieces are given."""
        from .evaluate import is_config_class

        out = []
        for node in tree.body:
            if node.lineno < first:
                continue
            if isinstance(node, (ast.Import, ast.ImportFrom, ast.Assign, ast.AnnAssign)) or (
                    isinstance(node, ast.ClassDef) and is_config_class(node)):
                size = self.offset(node.end_lineno + 1) - self.offset(node.lineno)
                if size <= PREAMBLE_STATEMENT:
                    out.append((node.lineno, node.end_lineno + 1, size))
        return out


def _preamble_before(found: Sequence[Sequence[tuple[int, int, int]]]) -> list[tuple[int, int]]:
    """The preamble for the piece after the pieces whose candidates are ``found``."""
    out, total = [], 0
    for candidates in found:
        for a, b, size in candidates:
            if total + size <= PREAMBLE_TOTAL:
                out.append((a, b))
                total += size
    return out


def _merge_facts(into: dict, more: dict) -> None:
    for key, value in more.items():
        have = into.get(key)
        if isinstance(have, dict) and isinstance(value, dict):
            _merge_facts(have, value)
        elif isinstance(have, list) and isinstance(value, list):
            seen = {json.dumps(v, sort_keys=True, default=str) for v in have}
            have.extend(v for v in value if json.dumps(v, sort_keys=True, default=str) not in seen)
        else:
            into[key] = value


def _lint_piece(path: str, lines: _Lines, first: int, end: int, preamble, settings: Settings, unused: bool,
                given: Optional[ProjectIndex]) -> tuple[CheckEntry, list]:
    """Lint one piece: its entry (findings with frames, errors, summary, queries) and the
    statements later pieces are given.  SourceError when it does not parse."""
    project = given if given is not None else ProjectIndex()
    piece = lines.piece_source(first, end, preamble)
    found, ctx, errors = lint_text(path, piece, settings, _rules_for(settings), project, unused)
    # without their nodes right away: a Finding's node would keep the piece's whole tree
    # alive; the piece keeps the file's line numbers, so fingerprints and columns are the
    # file's (occurrence numbers are made file-wide by _join_pieces)
    findings = tuple(_outgoing([f for f in found if first <= f.line < end], piece))
    summary = None
    if given is None:
        summary = summarize(ctx, settings.rules())
        summary.configs = [c for c in summary.configs if first <= c.line < end]
        summary = summary.to_json()
    part = CheckEntry(path, findings, {f.line: lines.line(f.line) for f in findings},
                      tuple(e for e in errors if first <= e.line < end), summary, tuple(dict.fromkeys(project.queries)))
    return part, lines.preamble_of(ctx.tree, first)


def _join_pieces(path: str, parts: Sequence[CheckEntry]) -> CheckEntry:
    """One file's entry from its pieces' (in order)."""
    findings, frames, errors, queries = [], {}, [], []
    summary = None
    for part in parts:
        findings.extend(part.findings)
        frames.update(part.frames)
        errors.extend(part.errors)
        queries.extend(q for q in part.queries if q not in queries)
        if part.summary is not None:
            if summary is None:
                summary = {"path": path, "configs": [], "facts": {}}
            summary["configs"].extend(part.summary["configs"])
            _merge_facts(summary["facts"], part.summary["facts"])
    _renumber_fingerprints(findings)
    return CheckEntry(path, tuple(findings), frames, tuple(errors), summary, tuple(queries))


def _renumber_fingerprints(findings: list[Finding]) -> None:
    """Pieces number repeated fingerprints (``digest:n``) each from 0; number them over
    the whole file, in the order :func:`amplint.baseline.assign_fingerprints` uses."""
    seen: dict[str, int] = {}
    for f in sorted(findings, key=Finding.sort_key):
        digest = f.fingerprint.split(":")[0]
        f.fingerprint = f"{digest}:{seen.get(digest, 0)}"
        seen[digest] = seen.get(digest, 0) + 1


def _check_in_pieces(path: str, text: str, settings: Settings, unused: bool,
                     given: Optional[ProjectIndex]) -> Optional[CheckEntry]:
    """Lint a very large file piece by piece, in this process (see :func:`_check_passes` for
    the pieces spread over the pool).  None when a piece does not parse: the file is then
    linted whole, which also reports a real syntax error where it is."""
    lines = _Lines(text)
    parts, found = [], []
    for first, end in lines.pieces():
        _free_earlier_trees()
        try:
            part, preamble = _lint_piece(path, lines, first, end, _preamble_before(found), settings, unused, given)
        except SourceError:
            return None
        found.append(preamble)
        parts.append(part)
    return _join_pieces(path, parts)


def _piece_task(args) -> PieceOutcome:
    """Pool task for one piece of a large file: ``("preamble", ...)`` parses the piece
    alone for what later pieces are given; ``("lint", ...)`` lints it with its preamble.  The worker reads the file itself (a
    piece is small, the file is not) and checks that it is what the parent read."""
    kind, path, digest, first, end, preamble, settings, unused = args
    try:
        lines = _large_file_lines(path, digest)
    except SourceError as exc:
        return PieceOutcome(path, first, error=exc)
    try:
        if kind == "preamble":
            tree = parse(path, lines.piece_source(first, end))
            return PieceOutcome(path, first, preamble=lines.preamble_of(tree, first))
        return PieceOutcome(path, first, part=_lint_piece(path, lines, first, end, preamble, settings, unused, None)[0])
    except SourceError:
        return PieceOutcome(path, first)


def _large_file_lines(path: str, digest: str) -> _Lines:
    """The lines of the large file the parent read (hash ``digest``).  A worker keeps the
    last one: its pieces come one after another, and reading and decoding 20 MB for each
    would cost as much as linting a piece.  A kept copy is used only while the file's
    inode, size and modification time are unchanged."""
    kept = _WORKER.large_file
    stdin = path in _WORKER.sources  # a given source (stdin's bytes, text): what every worker was given
    if kept is not None and kept[0] == path and kept[1] == digest:
        try:
            st = None if stdin else os.stat(path)
        except OSError:
            st = False
        identity = kept[3]
        if stdin or st and (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) == (
                identity.device, identity.inode, identity.size, identity.mtime_ns):
            return kept[2]
    _WORKER.large_file = None
    source = _read_source(path)
    if _digest_of(source) != digest:
        raise SourceError(path, "changed while amplint was reading it")
    lines = _Lines(source.text)
    _WORKER.large_file = (path, digest, lines, source.identity)
    return lines


def _digest_of(source: SourceFile) -> str:
    import hashlib

    return source.identity.sha256 if source.identity is not None else hashlib.sha256(source.raw).hexdigest()


def _check_large_files(large: Sequence[tuple[str, Settings]], unused: bool, requested_jobs: int, progress,
                       sources: Optional[dict] = None) -> tuple[dict[str, CheckEntry], list]:
    """Check mode for files over LARGE_FILE: every piece of every such file is a pool task
    (first parsed alone for the statements later pieces need, then linted).  Returns the
    entries of the files done so, and the (path, settings) of the files to lint whole
    (a piece that does not parse)."""
    plans, whole = {}, []
    for path, settings in large:
        try:
            source = _source_of(path, (sources or {}).get(path))
        except SourceError:
            whole.append((path, settings))  # the ordinary task reports it
            continue
        if not _worth_parsing(source.text, settings, unused):
            whole.append((path, settings))
            continue
        plans[path] = (settings, _digest_of(source), _Lines(source.text).pieces())
        del source
    tasks = [("preamble", path, digest, a, b, None, settings, unused)
             for path, (settings, digest, pieces) in plans.items() for a, b in pieces]
    jobs = worker_count(requested_jobs, len(tasks))
    found: dict[str, dict[int, list]] = {}
    failed: dict[str, Optional[SourceError]] = {}
    for outcome in _map(_piece_task, tasks, jobs, (None, sources), None):
        if outcome.preamble is None:
            failed.setdefault(outcome.path, outcome.error)
        else:
            found.setdefault(outcome.path, {})[outcome.first] = outcome.preamble
    entries = {}
    for path, error in failed.items():
        settings = plans.pop(path)[0]
        if error is None:
            whole.append((path, settings))  # a piece does not parse
        else:
            entries[path] = CheckEntry(path, errors=(error,))
    tasks = []
    for path, (settings, digest, pieces) in plans.items():
        before = [found[path][a] for a, _ in pieces]
        tasks.extend(("lint", path, digest, a, b, _preamble_before(before[:i]), settings, unused)
                     for i, (a, b) in enumerate(pieces))
    parts: dict[str, dict[int, CheckEntry]] = {}
    failed = {}
    for outcome in _map(_piece_task, tasks, jobs, (None, sources), progress):
        if outcome.part is None:
            failed.setdefault(outcome.path, outcome.error)
        else:
            parts.setdefault(outcome.path, {})[outcome.first] = outcome.part
    for path, (settings, digest, pieces) in plans.items():
        if path not in failed:
            entries[path] = _join_pieces(path, [parts[path][a] for a, _ in pieces])
        elif failed[path] is None:
            whole.append((path, settings))
        else:
            entries[path] = CheckEntry(path, errors=(failed[path],))
    return entries, whole


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _fix_task(args) -> FileResult:
    path, settings, options = args
    result = FileResult(path)
    given = _WORKER.sources.get(path)
    try:
        source = _read_source(path)
        if not options.diff and not isinstance(given, str):  # stdin too: its fixed bytes go back into the editor's buffer
            check_writable(source)
    except SourceError as exc:
        result.errors.append(exc)
        return result
    rules = _rules_for(settings)
    project = _WORKER.project
    try:
        new_text, fixed, findings, errors = fix_text(path, source.text, settings, rules, project, options.unsafe_fixes)
        result.errors.extend(errors)
        result.fixed = fixed
        if new_text != source.text:
            result.changed = True
            if options.diff:
                result.diff = _unified_diff(path, source.text, new_text)
            elif given is None:
                write_atomic(path, source.encode(new_text), expected=source)
            # the findings (written or, with --diff, that would be) left after the fixes
            read, source = source, SourceFile(path, new_text, source.encoding, b"")
        else:
            read = source
        if isinstance(given, str):
            result.text = new_text
        elif given is not None:
            result.output = read.encode(new_text)  # the file as read encodes it (a notebook: its JSON)
        if options.report_unused_suppressions and not options.diff:
            findings, _, _ = lint_text(path, source.text, settings, rules, project, True)
    except SourceError as exc:
        result.errors.append(exc)
        return result
    except FileChangedError as exc:
        result.errors.append(SourceError(path, exc.strerror))
        result.fixed, result.changed = 0, False
        return result
    except OSError as exc:
        result.errors.append(SourceError(path, f"cannot write: {exc.strerror or exc}"))
        result.fixed, result.changed = 0, False  # nothing was written: the summary must not count them
        return result
    result.findings = _outgoing(findings, source.text)
    result.frames = _frames(findings, source.text)
    return result


def _summary_markers(settings: Settings) -> tuple[str, ...]:
    collecting = [r for r in settings.rules() if r.collects()]
    if any(not r.collect_markers for r in collecting):
        return ("",)  # a rule collects from every file
    from .fp8.setup import MARKERS as FP8_MARKERS

    return CONFIG_MARKERS + engine_detect.MARKERS + FP8_MARKERS + tuple(m for r in collecting for m in r.collect_markers)


def _worth_parsing(text: str, settings: Settings, unused: bool) -> bool:
    """Whether a selected rule or the project summary can find anything in ``text``."""
    if unused or _Rules.for_settings(settings).relevant(text):
        return True
    return any(m in text for m in _summary_markers(settings)) or defines_constants(text)


def _summary_of(path: str, text: str, settings: Settings) -> FileSummary:
    """What ``path`` tells the project index (SourceError when it does not parse): the
    one place summaries are made (``fix``'s rounds).  A
    file that mentions nothing a summary collects is only checked for syntax."""
    if not any(m in text for m in _summary_markers(settings)) and not defines_constants(text):
        check_syntax(path, text)
        return FileSummary(path)
    tree = parse(path, text)
    ctx = FileContext(path, text, tree, settings, None)
    ctx.walk_and_bucket(set())
    return summarize(ctx, settings.rules())


def _summarize_task(args) -> SummaryOutcome:
    path, settings = args
    try:
        source = _read_source(path)
        return SummaryOutcome(path, _summary_of(path, source.text, settings).to_json())
    except SourceError as exc:
        return SummaryOutcome(path, error=exc)


def _unified_diff(path: str, old: str, new: str) -> str:
    import difflib

    return "".join(difflib.unified_diff(
        old.splitlines(keepends=True), new.splitlines(keepends=True), fromfile=path, tofile=path, n=3,
    ))


def _collected(func, task):
    """``func(task)`` with the cyclic garbage collector paused, then one collection of
    the youngest generation.  A file's tree is cyclic (parent links) and lives through
    the whole task: the collector's automatic passes would traverse it again and again
    and promote it into the oldest generation, whose full passes then cost a quarter of
    a run (bench/RESULTS.md).  Collected at the end it is traversed once and freed."""
    if not gc.isenabled():
        return func(task)
    gc.disable()
    try:
        return func(task)
    finally:
        gc.enable()
        gc.collect(0)


def _map(func, tasks: list, jobs: int, init_args: tuple, progress, sizes: Optional[Sequence[int]] = None) -> list:
    """``func`` of every task, in the tasks' order: in this process, or spread over a pool
    of ``jobs`` workers.  ``sizes`` (of each task's file): the pool is handed the largest
    first, in small chunks, so that no worker is left with a large file at the end while
    the other waits (the results still come back in the tasks' order)."""
    total = len(tasks)
    func = functools.partial(_collected, func)
    if jobs <= 1 or total < POOL_THRESHOLD:
        _init_worker(*init_args)
        out = []
        for i, task in enumerate(tasks, 1):
            out.append(func(task))
            if progress:
                progress(i, total)
        return out
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else None
    mp_context = multiprocessing.get_context(method) if method else None
    order = sorted(range(total), key=lambda i: -sizes[i]) if sizes is not None else range(total)
    out: list = [None] * total
    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=mp_context, initializer=_init_pool_worker,
                               initargs=(os.getpid(), *init_args))
    try:
        chunk = max(1, min(16, total // (jobs * (16 if sizes is not None else 4))))
        for i, (index, item) in enumerate(zip(order, pool.map(func, [tasks[j] for j in order], chunksize=chunk)), 1):
            out[index] = item
            if progress:
                progress(i, total)
    except BaseException:  # Ctrl-C, SIGTERM turned into SystemExit, a worker's crash: end the workers now
        _end_pool(pool)
        raise
    pool.shutdown()
    return out


def _load_before_fork(settings: Iterable[Settings]) -> None:
    """Import the rules these settings select, and the modules a file's summary uses,
    in this process before the pool forks its workers: each worker then starts with
    them loaded instead of importing them again (~50 ms of CPU a worker)."""
    from . import evaluate  # noqa: F401  (what summarize imports on first use)
    from .fp8 import setup  # noqa: F401
    from .semantic import configs, facts  # noqa: F401

    for one in {s.fingerprint(): s for s in settings}.values():
        _rules_for(one)


def _init_pool_worker(parent_pid: int, *init_args) -> None:
    from .procs import die_with_parent

    die_with_parent(parent_pid)
    _init_worker(*init_args)


def _end_pool(pool) -> None:
    """Stop a pool without waiting for its queued work: kill its workers, then reap them."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        try:
            process.kill()
        except (OSError, AttributeError):
            pass
    for process in processes:
        try:
            process.join(5)
        except (OSError, AssertionError, AttributeError):
            pass


