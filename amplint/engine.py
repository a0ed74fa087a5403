"""The lint engine: parse each file once, walk it once, run every rule on one shared
context; apply fixes as text edits, re-parse, iterate to a fixpoint; run many files in
a process pool with a content-hash cache.

Never imports or executes the code it reads.
"""
from __future__ import annotations

import ast
import dataclasses
import os
import warnings
from concurrent.futures import ProcessPoolExecutor
from typing import Callable, Iterable, Optional, Sequence

from .config import ConfigResolver, Settings
from .context import FileContext
from .files import SourceError, SourceFile, discover, read_source, write_atomic
from .project import CONFIG_MARKERS, FileSummary, ProjectIndex, summarize
from .registry import all_rules, select_rules
from .rule import Applicability, Edit, Finding, Fix, Related, Rule, Severity
from .suppress import apply_suppressions

MAX_FIX_ITERATIONS = 10
#: below this many files to lint, a process pool costs more than it saves
POOL_THRESHOLD = 8
#: a file that mentions none of these cannot involve torch, apex or amplint
BASE_MARKERS = ("torch", "apex", "amp", "nn.")

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

    def relevant(self, text: str) -> bool:
        return self.every_file or any(m in text for m in self.markers)


def parse(path: str, text: str) -> ast.Module:
    """``ast.parse`` with SyntaxError turned into a SourceError (file:line:col: reason)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escape sequences etc. are not our business
            return ast.parse(text, filename=path)
    except SyntaxError as exc:
        return _raise_syntax(path, exc)
    except (ValueError, RecursionError, MemoryError) as exc:
        raise SourceError(path, f"cannot parse: {exc}") from None


def _raise_syntax(path, exc: SyntaxError):
    reason = f"syntax error: {exc.msg}"
    raise SourceError(path, reason, exc.lineno or 1, exc.offset or 1) from None


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
        if hasattr(rule, "begin_file"):
            guarded(rule, rule.begin_file, ctx)
    for node_type, visitors in selected.dispatch.items():
        for node in buckets.get(node_type, ()):
            for rule, method in visitors:
                guarded(rule, method, node, ctx)
    for rule in selected.instances:
        if hasattr(rule, "end_file"):
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


def apply_fixes(ctx: FileContext, fixes: Iterable[Fix]) -> tuple[str, int]:
    """Apply non-overlapping fixes (a fix is all-or-nothing).  Returns (text, applied)."""
    text = ctx.source
    starts = _line_starts(text)

    def offset(line: int, col: int) -> int:
        line = max(1, min(line, len(starts)))
        return starts[line - 1] + ctx.char_col(line, col)

    accepted: list[tuple[int, int, str]] = []
    applied = 0
    for fix in fixes:
        spans = sorted((offset(e.start.line, e.start.col), offset(e.end.line, e.end.col), e.text) for e in fix.edits)
        if any(a > b for a, b, _ in spans):
            continue
        # overlapping ranges, or two insertions at one point (their order would be arbitrary)
        clash = any((a < d and c < b) or (a == b == c == d) for a, b, _ in spans for c, d, _ in accepted)
        if clash:
            continue
        accepted.extend(spans)
        applied += 1
    newline = ctx.newline
    for start, end, replacement in sorted(accepted, key=lambda s: (s[0], s[1]), reverse=True):
        if newline != "\n":
            replacement = replacement.replace("\r\n", "\n").replace("\n", newline)
        text = text[:start] + replacement + text[end:]
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


# Worker state: set in each pool process by _init_worker (or in-process).
_WORKER: dict = {}


def _init_worker(rule_paths_by_settings: dict, project_json: Optional[list]) -> None:
    _WORKER["project"] = ProjectIndex(FileSummary.from_json(s) for s in project_json) if project_json is not None else None
    _WORKER["rules"] = {}


def _rules_for(settings: Settings) -> list[type[Rule]]:
    cache = _WORKER.setdefault("rules", {})
    key = settings.fingerprint()
    if key not in cache:
        cache[key] = select_rules(all_rules(settings.rule_paths), settings)
    return cache[key]


def _summarize_task(args) -> tuple[str, Optional[dict], Optional[SourceError]]:
    path, settings = args
    try:
        source = read_source(path)
        rules = all_rules(settings.rule_paths)
        wanted = CONFIG_MARKERS + tuple(m for r in rules for m in getattr(r, "collect_markers", ()))
        has_collect = [r for r in rules if hasattr(r, "collect") and not getattr(r, "collect_markers", ())]
        if not has_collect and not any(m in source.text for m in wanted):
            return path, FileSummary(path).to_json(), None
        tree = parse(path, source.text)
        ctx = FileContext(path, source.text, tree, settings, None)
        ctx.walk_and_bucket(set())
        return path, summarize(ctx, rules).to_json(), None
    except SourceError as exc:
        return path, None, exc


def _lint_task(args) -> FileResult:
    path, settings, options = args
    result = FileResult(path)
    try:
        source = read_source(path)
    except SourceError as exc:
        result.errors.append(exc)
        return result
    rules = _rules_for(settings)
    project = _WORKER.get("project")
    try:
        if options.fix or options.diff:
            new_text, fixed, findings, errors = fix_text(path, source.text, settings, rules, project, options.unsafe_fixes)
            result.errors.extend(errors)
            result.fixed = fixed
            if new_text != source.text:
                result.changed = True
                if options.diff:
                    result.diff = _unified_diff(path, source.text, new_text)
                else:
                    write_atomic(path, source.encode(new_text))
                    source = SourceFile(path, new_text, source.encoding, b"")
            if options.diff:  # nothing written: report what is there now
                findings, _, _ = lint_text(path, source.text, settings, rules, project, options.report_unused_suppressions)
            elif options.report_unused_suppressions:
                findings, _, _ = lint_text(path, source.text, settings, rules, project, True)
        else:
            findings, _, errors = lint_text(path, source.text, settings, rules, project, options.report_unused_suppressions)
            result.errors.extend(errors)
    except SourceError as exc:
        result.errors.append(exc)
        return result
    except OSError as exc:
        result.errors.append(SourceError(path, f"cannot write: {exc.strerror or exc}"))
        return result
    lines = None
    for f in findings:
        f.__dict__.pop("node", None)
        if f.line not in result.frames:
            if lines is None:
                lines = FileContext.split_lines(source.text)
            result.frames[f.line] = lines[f.line - 1] if 0 < f.line <= len(lines) else ""
    result.findings = findings
    return result


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
    from .cache import Cache

    jobs = options.jobs or os.cpu_count() or 1
    results: dict[str, FileResult] = {}
    files: list[tuple[str, Settings]] = []
    for path, error in discover(paths, lambda p: resolver.for_path(p).is_excluded(p)):
        if error is not None:
            results[path] = FileResult(path, errors=[error])
        else:
            files.append((path, resolver.for_path(path)))
    if not files:
        return [results[p] for p in sorted(results)]

    # Phase 1: summaries for the project index (cached on file bytes).
    cache = None
    if options.use_cache and not (options.fix or options.diff):
        folder = options.cache_dir or os.path.join(files[0][1].root, ".amplint_cache")
        cache = Cache(folder)
    raw: dict[str, bytes] = {}
    summaries: dict[str, dict] = {}
    todo = []
    for path, settings in files:
        if cache is not None:
            try:
                with open(path, "rb") as fh:
                    raw[path] = fh.read()
            except OSError:
                raw[path] = b""
            hit = cache.get(Cache.key("summary", raw[path], ",".join(settings.rule_paths)))
            if hit is not None:
                summaries[path] = hit
                continue
        todo.append((path, settings))
    for path, summary, error in _map(_summarize_task, todo, jobs, ({}, None), None):
        if summary is not None:
            summaries[path] = summary
            if cache is not None:
                settings = dict(files)[path]
                cache.put(Cache.key("summary", raw[path], ",".join(settings.rule_paths)), summary)
    project_json = [summaries[p] for p in sorted(summaries)]
    project = ProjectIndex(FileSummary.from_json(s) for s in project_json)
    project_fp = project.fingerprint()

    # Phase 2: lint (or fix) with the index.
    todo = []
    keys: dict[str, str] = {}
    for path, settings in files:
        if cache is not None:
            key = Cache.key("lint", raw[path], settings.fingerprint(), project_fp, str(options.report_unused_suppressions))
            keys[path] = key
            hit = cache.get(key)
            if hit is not None:
                results[path] = FileResult(
                    path, [_finding_from_dict(d) for d in hit["findings"]],
                    frames={int(k): v for k, v in hit["frames"].items()},
                )
                continue
        todo.append((path, settings, options))
    for result in _map(_lint_task, todo, jobs, ({}, project_json), options.progress):
        results[result.path] = result
        if cache is not None and not result.errors and result.path in keys:
            cache.put(keys[result.path], {"findings": [f.to_dict() for f in result.findings], "frames": result.frames})
    return [results[p] for p in sorted(results)]
