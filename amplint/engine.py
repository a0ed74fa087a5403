"""The lint engine: parse each file once, walk it once, run every rule on one shared
context; apply fixes as text edits, re-parse, iterate to a fixpoint; run many files in
a process pool with a content-hash cache.

Never imports or executes the code it reads.
"""
from __future__ import annotations

import ast
import bisect
import dataclasses
import os
import warnings
from typing import Callable, Iterable, Optional, Sequence

from .config import ConfigError, ConfigResolver, Settings
from .context import FileContext
from .files import SourceError, SourceFile, discover, read_regular, read_source, write_atomic
from . import engine_detect
from .project import CONFIG_MARKERS, FileSummary, ProjectIndex, summarize
from .registry import all_rules, select_rules
from .rule import Applicability, Edit, Finding, Fix, Related, Rule, Severity
from .suppress import apply_suppressions

MAX_FIX_ITERATIONS = 10
#: below this many files to lint, a process pool costs more than it saves
POOL_THRESHOLD = 8
UNUSED_SUPPRESSION = "AMP900"


@dataclasses.dataclass
class FileResult:
    path: str
    findings: list[Finding] = dataclasses.field(default_factory=list)
    errors: list[SourceError] = dataclasses.field(default_factory=list)
    fixed: int = 0
    changed: bool = False
    diff: str = ""
    #: first source line of each finding, for the text reporter's frames
    frames: dict[int, str] = dataclasses.field(default_factory=dict)


class _Rules:
    """The selected rules of one settings object, instantiated, with a dispatch table."""

    def __init__(self, rules: Sequence[type[Rule]]):
        self.instances = [cls() for cls in rules]
        self.dispatch: dict[str, list[tuple[Rule, Callable]]] = {}
        for rule in self.instances:
            for node_type, method in type(rule).visitors().items():
                self.dispatch.setdefault(node_type, []).append((rule, getattr(rule, method)))
        markers: set[str] = set()
        self.every_file = False
        for rule in self.instances:
            if rule.markers:
                markers.update(rule.markers)
            else:
                self.every_file = True
        self.markers = tuple(markers)

    @classmethod
    def for_settings(cls, settings: Settings) -> "_Rules":
        key = settings.fingerprint()
        found = _WORKER.rule_sets.get(key)
        if found is None:
            found = _WORKER.rule_sets[key] = cls(_rules_for(settings))
        return found

    def relevant(self, text: str) -> bool:
        return self.every_file or any(m in text for m in self.markers)


def parse(path: str, text: str) -> ast.Module:
    """``ast.parse`` with SyntaxError turned into a SourceError (file:line:col: reason)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escape sequences etc. are not our business
            return ast.parse(text, filename=path)
    except SyntaxError as exc:
        raise SourceError(path, f"syntax error: {exc.msg}", exc.lineno or 1, exc.offset or 1) from None
    except (ValueError, RecursionError, MemoryError) as exc:
        raise SourceError(path, f"cannot parse: {exc}") from None


def lint_text(
    path: str,
    text: str,
    settings: Settings,
    rules: Sequence[type[Rule]],
    project: Optional[ProjectIndex] = None,
    report_unused_suppressions: bool = False,
) -> tuple[list[Finding], FileContext, list[SourceError]]:
    """Lint one file's text.  Returns findings (suppressions applied), the context and
    internal errors (a rule that raised)."""
    tree = parse(path, text)
    settings = engine_detect.resolve(settings, path, text, tree, project)
    ctx = FileContext(path, text, tree, settings, project)
    selected = _Rules(rules)
    errors: list[SourceError] = []
    if not selected.relevant(text) and not report_unused_suppressions:
        return [], ctx, errors
    buckets = ctx.walk_and_bucket(set(selected.dispatch))

    def guarded(rule: Rule, call: Callable, *args):
        try:
            call(*args)
        except Exception as exc:  # a rule bug is an internal error, not a crash of the run
            node = args[0] if args and isinstance(args[0], ast.AST) else None
            line = getattr(node, "lineno", 1)
            errors.append(SourceError(path, f"internal error in rule {rule.code}: {type(exc).__name__}: {exc}", line))

    for rule in selected.instances:
        guarded(rule, ctx.begin, rule)
    for node_type, visitors in selected.dispatch.items():
        for node in buckets.get(node_type, ()):
            for rule, method in visitors:
                guarded(rule, method, node, ctx)
    for rule in selected.instances:
        guarded(rule, rule.end_file, ctx)

    ignored = settings.ignored_for(path)
    findings = [f for f in ctx.findings if not any(f.code.startswith(c) for c in ignored)]
    findings, directives = apply_suppressions(ctx, findings)
    if report_unused_suppressions:
        findings.extend(_unused_suppressions(ctx, directives, {r.code for r in rules}))
    findings.sort(key=Finding.sort_key)
    return findings, ctx, errors


def _unused_suppressions(ctx: FileContext, directives, known_codes) -> list[Finding]:
    out = []
    for d in directives.values():
        if d.codes is None:
            if d.is_noqa or d.used:
                continue  # a bare noqa may be for another linter
            unused = ["all rules"]
        else:
            unused = sorted(c for c in d.codes if c not in d.used and (c in known_codes or not d.is_noqa))
            if d.is_noqa:
                unused = [c for c in unused if c in known_codes]
        if not unused:
            continue
        what = "suppression" if unused == ["all rules"] else f"suppression of {', '.join(unused)}"
        out.append(Finding(ctx.path, d.line, d.column, d.line, len(ctx.line_text(d.line)) + 1,
                           UNUSED_SUPPRESSION, "unused-suppression", f"Unused {what}: nothing to silence on this statement",
                           Severity.INFO))
    return out


# --- fixes -------------------------------------------------------------------------

def _line_starts(text: str) -> list[int]:
    starts = [0]
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\n":
            starts.append(i + 1)
        elif c == "\r":
            if i + 1 < n and text[i + 1] == "\n":
                i += 1
            starts.append(i + 1)
        i += 1
    return starts


def _clashes(accepted: list[tuple[int, int, str]], a: int, b: int) -> bool:
    """Does [a, b) overlap an accepted span, or is it an insertion at the very point of
    an accepted insertion (their order would be arbitrary)?"""
    i = bisect.bisect_left(accepted, (a, -1))
    for c, d, _ in accepted[max(0, i - 2): i]:  # spans starting before a
        if a < d and c < b:
            return True
    for c, d, _ in accepted[i:]:  # spans starting at or after a
        if c >= b and not (c == a == b):
            break
        if (a < d and c < b) or (a == b == c == d):
            return True
    return False


def apply_fixes(ctx: FileContext, fixes: Iterable[Fix]) -> tuple[str, int]:
    """Apply non-overlapping fixes (a fix is all-or-nothing).  Returns (text, applied)."""
    text = ctx.source
    starts = _line_starts(text)

    def offset(line: int, col: int) -> int:
        line = max(1, min(line, len(starts)))
        return starts[line - 1] + ctx.char_col(line, col)

    # accepted spans, sorted; they never overlap, so a new span can only clash with
    # its neighbours in this order (bisect, not a scan: thousands of fixes in one file)
    accepted: list[tuple[int, int, str]] = []
    applied = 0
    for fix in fixes:
        spans = sorted((offset(e.start.line, e.start.col), offset(e.end.line, e.end.col), e.text) for e in fix.edits)
        if any(a > b for a, b, _ in spans):
            continue
        if any(spans[i][1] > spans[i + 1][0] for i in range(len(spans) - 1)):
            continue  # a fix whose own edits overlap is not applied
        if any(_clashes(accepted, a, b) for a, b, _ in spans):
            continue
        for span in spans:
            bisect.insort(accepted, span)
        applied += 1
    newline = ctx.newline
    pieces: list[str] = []
    pos = 0
    # insertions of one fix at one point: the last in sorted order comes first (as when
    # the edits were applied back to front)
    ordered = sorted(range(len(accepted)), key=lambda k: (accepted[k][0], accepted[k][1], -k))
    for start, end, replacement in (accepted[k] for k in ordered):
        if newline != "\n":
            replacement = replacement.replace("\r\n", "\n").replace("\n", newline)
        pieces.append(text[pos:start])
        pieces.append(replacement)
        pos = end
    pieces.append(text[pos:])
    text = "".join(pieces)
    return text, applied


def fix_text(
    path: str,
    text: str,
    settings: Settings,
    rules: Sequence[type[Rule]],
    project: Optional[ProjectIndex] = None,
    unsafe: bool = False,
) -> tuple[str, int, list[Finding], list[SourceError]]:
    """Fix ``text`` until nothing changes (at most MAX_FIX_ITERATIONS rounds).
    Returns (new text, fixes applied, findings left, errors).  When a round produces
    code that does not parse, the file is left as it was and an error says which rule."""
    allowed = {Applicability.SAFE} | ({Applicability.UNSAFE} if unsafe else set())
    original, total = text, 0
    findings, ctx, errors = lint_text(path, text, settings, rules, project)
    for _ in range(MAX_FIX_ITERATIONS):
        fixes = [f.fix for f in findings if f.fix is not None and f.fix.applicability in allowed]
        if not fixes:
            break
        new_text, applied = apply_fixes(ctx, fixes)
        if new_text == text:
            break
        try:
            parse(path, new_text)
        except SourceError as exc:
            codes = sorted({f.code for f in findings if f.fix is not None and f.fix.applicability in allowed})
            errors.append(SourceError(path, f"internal error: fixes by {', '.join(codes)} produced invalid code "
                                            f"({exc.reason}); file left unchanged", exc.line, exc.col))
            return original, 0, lint_text(path, original, settings, rules, project)[0], errors
        text, total = new_text, total + applied
        findings, ctx, more = lint_text(path, text, settings, rules, project)
        errors.extend(more)
    if text != original and not _libcst_roundtrips(text):
        errors.append(SourceError(path, "internal error: fixed code does not round-trip through libcst; file left unchanged"))
        return original, 0, lint_text(path, original, settings, rules, project)[0], errors
    return text, total, findings, errors


def _libcst_roundtrips(text: str) -> bool:
    """A second, independent parser: the concrete syntax tree must reproduce the text."""
    try:
        import libcst

        return libcst.parse_module(text).code == text
    except Exception:
        return False


# --- running many files --------------------------------------------------------------

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


def _finding_from_dict(d: dict) -> Finding:
    fix = None
    if d["fix"] is not None:
        fix = Fix((), d["fix"]["applicability"], d["fix"]["description"])
    return Finding(
        d["path"], d["line"], d["column"], d["end_line"], d["end_column"], d["code"], d["rule"],
        d["message"], Severity(d["severity"]), fix, [Related(**r) for r in d["related"]],
    )


@dataclasses.dataclass
class WorkerState:
    """What one process (a pool worker, or this one) keeps between files."""

    #: the run's project index; None in the first check pass (each file gets an empty one)
    project: Optional[ProjectIndex] = None
    #: settings fingerprint -> the rule classes those settings select
    rule_classes: dict[str, list[type[Rule]]] = dataclasses.field(default_factory=dict)
    #: settings fingerprint -> those rules instantiated, with their dispatch table
    rule_sets: dict[str, _Rules] = dataclasses.field(default_factory=dict)


# Set in each pool process by _init_worker (or in-process).
_WORKER = WorkerState()


def _init_worker(project_json: Optional[list]) -> None:
    global _WORKER
    project = ProjectIndex(FileSummary.from_json(s) for s in project_json) if project_json is not None else None
    _WORKER = WorkerState(project)


def _rules_for(settings: Settings) -> list[type[Rule]]:
    cache = _WORKER.rule_classes
    key = settings.fingerprint()
    if key not in cache:
        cache[key] = select_rules(all_rules(settings.rule_paths, settings.load_plugins), settings)
    return cache[key]


def _error_dict(e: SourceError) -> dict:
    return {"path": e.path, "reason": e.reason, "line": e.line, "col": e.col}


def _frames(findings: list[Finding], text: str) -> dict[int, str]:
    frames: dict[int, str] = {}
    lines = None
    for f in findings:
        if f.line not in frames:
            if lines is None:
                lines = FileContext.split_lines(text)
            frames[f.line] = lines[f.line - 1] if 0 < f.line <= len(lines) else ""
    return frames


def _check_task(args) -> dict:
    """Lint one file (check mode) and return a JSON-able entry: findings, the source
    lines of their frames, errors, and -- in the first pass, against an empty project
    index -- the file's summary and the cross-file questions it asked."""
    path, settings, unused = args
    entry = {"path": path, "findings": [], "frames": {}, "errors": [], "summary": None, "queries": []}
    try:
        source = read_source(path)
        if not _worth_parsing(source.text, settings, unused):
            entry["summary"] = FileSummary(path).to_json()
            return entry  # cannot involve torch or any selected rule: not even parsed
        given = _WORKER.project
        project = given if given is not None else ProjectIndex()
        findings, ctx, errors = lint_text(path, source.text, settings, _rules_for(settings), project, unused)
        if given is None:
            entry["summary"] = summarize(ctx, all_rules(settings.rule_paths, settings.load_plugins)).to_json()
            entry["queries"] = [list(q) for q in dict.fromkeys(project.queries)]
    except SourceError as exc:
        entry["errors"].append(_error_dict(exc))
        return entry
    for f in findings:
        f.node = None  # ast nodes stay in the worker
    entry["findings"] = [f.to_dict() for f in findings]
    entry["frames"] = _frames(findings, source.text)
    entry["errors"] = [_error_dict(e) for e in errors]
    return entry


def _fix_task(args) -> FileResult:
    path, settings, options = args
    result = FileResult(path)
    try:
        source = read_source(path)
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
            else:
                write_atomic(path, source.encode(new_text))
            # the findings (written or, with --diff, that would be) left after the fixes
            source = SourceFile(path, new_text, source.encoding, b"")
        if options.report_unused_suppressions and not options.diff:
            findings, _, _ = lint_text(path, source.text, settings, rules, project, True)
    except SourceError as exc:
        result.errors.append(exc)
        return result
    except OSError as exc:
        result.errors.append(SourceError(path, f"cannot write: {exc.strerror or exc}"))
        return result
    for f in findings:
        f.node = None  # ast nodes stay in the worker
    result.findings = findings
    result.frames = _frames(findings, source.text)
    return result


def _summary_markers(settings: Settings) -> tuple[str, ...]:
    collecting = [r for r in all_rules(settings.rule_paths, settings.load_plugins) if r.collects()]
    if any(not r.collect_markers for r in collecting):
        return ("",)  # a rule collects from every file
    return CONFIG_MARKERS + engine_detect.MARKERS + tuple(m for r in collecting for m in r.collect_markers)


def _worth_parsing(text: str, settings: Settings, unused: bool) -> bool:
    """Whether a selected rule or the project summary can find anything in ``text``."""
    if unused or _Rules.for_settings(settings).relevant(text):
        return True
    return any(m in text for m in _summary_markers(settings))


def _summarize_task(args) -> tuple[str, Optional[dict], Optional[SourceError]]:
    path, settings = args
    try:
        source = read_source(path)
        if not any(m in source.text for m in _summary_markers(settings)):
            return path, FileSummary(path).to_json(), None
        tree = parse(path, source.text)
        ctx = FileContext(path, source.text, tree, settings, None)
        ctx.walk_and_bucket(set())
        return path, summarize(ctx, all_rules(settings.rule_paths, settings.load_plugins)).to_json(), None
    except SourceError as exc:
        return path, None, exc


def _unified_diff(path: str, old: str, new: str) -> str:
    import difflib

    return "".join(difflib.unified_diff(
        old.splitlines(keepends=True), new.splitlines(keepends=True), fromfile=path, tofile=path, n=3,
    ))


def _map(func, tasks: list, jobs: int, init_args: tuple, progress) -> list:
    total = len(tasks)
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
    out = []
    with ProcessPoolExecutor(max_workers=jobs, mp_context=mp_context, initializer=_init_worker, initargs=init_args) as pool:
        chunk = max(1, min(16, total // (jobs * 4)))
        for i, item in enumerate(pool.map(func, tasks, chunksize=chunk), 1):
            out.append(item)
            if progress:
                progress(i, total)
    return out


def run(paths: list[str], resolver: ConfigResolver, options: RunOptions) -> list[FileResult]:
    """Lint (or fix) every Python file under ``paths``.  Results are in path order;
    paths that cannot be read or parsed come back as results with errors."""
    jobs = options.jobs or os.cpu_count() or 1
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

    def excluded(path: str) -> bool:
        settings = settings_for(path)
        return settings is None or settings.is_excluded(path)

    for path, error in discover(paths, excluded):
        if error is not None:
            results[path] = FileResult(path, errors=[error])
            continue
        settings = settings_for(path)
        if settings is not None:
            files.append((path, settings))
    if files:
        runner = _run_fix if (options.fix or options.diff) else _run_check
        results.update(runner(files, options, jobs))
    return [results[p] for p in sorted(results)]


def _run_fix(files, options: RunOptions, jobs: int) -> dict[str, FileResult]:
    """Fix mode: summaries of every file first (the project index), then fix each file
    against it.  No cache: fixing always starts from the bytes on disk."""
    summaries, out = [], {}
    for path, summary, error in _map(_summarize_task, files, jobs, (None,), None):
        if summary is not None:
            summaries.append(summary)
        else:
            out[path] = FileResult(path, errors=[error])
    tasks = [(path, settings, options) for path, settings in files if path not in out]
    for result in _map(_fix_task, tasks, jobs, (summaries,), options.progress):
        out[result.path] = result
    return out


def _run_check(files, options: RunOptions, jobs: int) -> dict[str, FileResult]:
    """Check mode: every file is parsed once against an empty project index; only files
    whose cross-file questions another file answers are linted again with the index.
    Both passes are cached (amplint/cache.py: what the key covers, how entries are
    signed and checked; the second pass is also keyed on the index)."""
    from .cache import Cache, entry_key, valid_entry

    cache = None
    if options.use_cache:
        cache = Cache(options.cache_dir or os.path.join(files[0][1].root, ".amplint_cache"))
    unused = options.report_unused_suppressions
    settings_of = dict(files)
    raw: dict[str, bytes] = {}
    keys: dict[str, str] = {}
    entries: dict[str, dict] = {}
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
                entries[path] = hit
                continue
        todo.append((path, settings, unused))
    for entry in _map(_check_task, todo, jobs, (None,), options.progress):
        entries[entry["path"]] = entry
        if cache is not None and not entry["errors"]:
            cache.put(keys[entry["path"]], entry)

    project_json = [entries[p]["summary"] for p in sorted(entries) if entries[p]["summary"]]
    index = ProjectIndex(FileSummary.from_json(s) for s in project_json)
    again = [p for p in sorted(entries) if entries[p]["queries"] and index.answers_any(entries[p]["queries"], p)]
    if again:
        fingerprint = index.fingerprint()
        todo = []
        for path in again:
            if cache is not None:
                keys[path] = entry_key("cross", path, raw[path], settings_of[path], unused, fingerprint)
                hit = cache.get(keys[path])
                if valid_entry(hit, path):
                    entries[path].update(findings=hit["findings"], frames=hit["frames"], errors=hit["errors"])
                    continue
            todo.append((path, settings_of[path], unused))
        for entry in _map(_check_task, todo, jobs, (project_json,), None):
            entries[entry["path"]].update(findings=entry["findings"], frames=entry["frames"], errors=entry["errors"])
            if cache is not None and not entry["errors"]:
                cache.put(keys[entry["path"]], entry)
    return {
        path: FileResult(
            path,
            [_finding_from_dict(d) for d in e["findings"]],
            [SourceError(**d) for d in e["errors"]],
            frames={int(k): v for k, v in e["frames"].items()},
        )
        for path, e in entries.items()
    }
