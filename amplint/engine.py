"""The lint engine for one file: parse it once, walk it once, run every rule on one shared
context; apply fixes as text edits, re-parse, iterate to a fixpoint.  Many files (the
project index, the second pass, the fix rounds, the worker pool, the cache, and the front
ends ``run`` and ``lint_sources``) are amplint/pipeline.py, built on this.

Never imports or executes the code it reads.
"""
from __future__ import annotations

import ast
import bisect
import dataclasses
import gc
import os
import warnings
from typing import Callable, Iterable, Optional, Sequence

from .config import Settings
from .context import FileContext
from .files import SourceError
from . import engine_detect
from .project import ProjectIndex
from .registry import UNUSED_SUPPRESSION, select_rules
from .baseline import assign_fingerprints
from .rule import Applicability, Finding, Fix, Rule, Severity
from .suppress import apply_suppressions

MAX_FIX_ITERATIONS = 10


@dataclasses.dataclass
class FileResult:
    path: str
    findings: list[Finding] = dataclasses.field(default_factory=list)
    errors: list[SourceError] = dataclasses.field(default_factory=list)
    #: paths skipped for a harmless reason (a named non-Python file); they do not fail the run
    warnings: list[SourceError] = dataclasses.field(default_factory=list)
    fixed: int = 0
    changed: bool = False
    diff: str = ""
    #: first source line of each finding, for the text reporter's frames
    frames: dict[int, str] = dataclasses.field(default_factory=dict)
    #: ``fix`` of source read from stdin: the fixed bytes, for stdout (nothing is written)
    output: Optional[bytes] = None
    #: a notebook's (marker line, cell number) per code cell: its findings are shown by
    #: cell (amplint/notebook.py); set by the command line before reporting
    cells: list = dataclasses.field(default_factory=list)
    #: ``fix`` of source given as text (``lint_sources``): the fixed text (nothing is written)
    text: Optional[str] = None


class _Rules:
    """The selected rules of one settings object, instantiated, with a dispatch table."""

    def __init__(self, rules: Sequence[type[Rule]]):
        self.instances = [cls() for cls in rules]
        self.dispatch = self._dispatch(self.instances)
        #: the rules that find nothing without one of their markers (``Rule.markers_required``)
        self.gated = [r for r in self.instances if r.markers_required and r.markers]
        #: the rules left out of a file -> (instances, dispatch) for the others
        self._without: dict[tuple, tuple[list[Rule], dict]] = {}
        markers: set[str] = set()
        self.every_file = False
        for rule in self.instances:
            if rule.markers:
                markers.update(rule.markers)
            else:
                self.every_file = True
        self.markers = tuple(markers)

    @classmethod
    def of(cls, rules: Sequence[type[Rule]]) -> "_Rules":
        """The instances for ``rules``, made once per process: one rule instance lints
        many files (rules keep per-file state in ``ctx.state``, never on ``self``)."""
        key = tuple(rules)
        found = _RULES.instances.get(key)
        if found is None:
            found = _RULES.instances[key] = cls(rules)
        return found

    @classmethod
    def for_settings(cls, settings: Settings) -> "_Rules":
        key = settings.fingerprint()
        found = _RULES.rule_sets.get(key)
        if found is None:
            found = _RULES.rule_sets[key] = cls(_rules_for(settings))
        return found

    def relevant(self, text: str) -> bool:
        return self.every_file or any(m in text for m in self.markers)

    @staticmethod
    def _dispatch(instances: Sequence[Rule]) -> dict[str, list[tuple[Rule, Callable]]]:
        dispatch: dict[str, list[tuple[Rule, Callable]]] = {}
        for rule in instances:
            for node_type, method in type(rule).visitors().items():
                dispatch.setdefault(node_type, []).append((rule, getattr(rule, method)))
        return dispatch

    def for_text(self, text: str) -> tuple[list[Rule], dict[str, list[tuple[Rule, Callable]]]]:
        """The rules to run on ``text`` and their dispatch table: all of them, less the
        ones whose required markers it lacks (AMP501 on a file that never says ``apex``
        visited every attribute of it)."""
        skipped = tuple(r for r in self.gated if not any(m in text for m in r.markers))
        if not skipped:
            return self.instances, self.dispatch
        found = self._without.get(skipped)
        if found is None:
            kept = [r for r in self.instances if r not in skipped]
            found = self._without[skipped] = (kept, self._dispatch(kept))
        return found


@dataclasses.dataclass
class RuleCache:
    """The rules one process has selected and instantiated, kept for the process's life
    (a pool worker, the language server's worker): keyed by the settings' fingerprint,
    which covers everything that selects rules, and ``registry.all_rules`` loads each
    set of rule classes once per process anyway."""

    #: settings fingerprint -> the rule classes those settings select
    rule_classes: dict[str, list[type[Rule]]] = dataclasses.field(default_factory=dict)
    #: settings fingerprint -> those rules instantiated, with their dispatch table
    rule_sets: dict[str, _Rules] = dataclasses.field(default_factory=dict)
    #: tuple of rule classes -> their instances (one instance lints many files)
    instances: dict[tuple, _Rules] = dataclasses.field(default_factory=dict)


_RULES = RuleCache()


def _rules_for(settings: Settings) -> list[type[Rule]]:
    cache = _RULES.rule_classes
    key = settings.fingerprint()
    if key not in cache:
        cache[key] = select_rules(settings.rules(), settings)
    return cache[key]


def parse(path: str, text: str) -> ast.Module:
    """``ast.parse`` with SyntaxError turned into a SourceError (file:line:col: reason)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escape sequences etc. are not our business
            return ast.parse(text, filename=path)
    except SyntaxError as exc:
        raise SourceError(path, f"syntax error: {exc.msg}", exc.lineno or 1, exc.offset or 1) from None
    except (ValueError, RecursionError, MemoryError) as exc:
        # an exception object is true even when its message is empty (100,000 unary minus
        # signs: a bare MemoryError from the parser's stack): name the reason then (A5)
        reason = str(exc) or ("Python's parser ran out of memory (nested too deeply, or too large)"
                              if isinstance(exc, MemoryError) else type(exc).__name__)
        raise SourceError(path, f"cannot parse: {reason}") from None


def check_syntax(path: str, text: str) -> None:
    """Raise the SourceError :func:`parse` would, for a file the prefilter lets skip the
    rules: a broken file must be reported whatever it mentions.  (No cheaper check
    exists: ``symtable`` and ``compile`` run the same parser and cost as much or more;
    the cost on a corpus of such files is in bench/RESULTS.md.)"""
    parse(path, text)


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
    ctx = FileContext(path, text, tree, settings, project)  # (which resolves the settings for this file)
    settings = ctx.settings
    selected = _Rules.of(rules)
    errors: list[SourceError] = []
    # AMP900's findings come from the suppressions, after the other rules: selecting it
    # is the same as --report-unused-suppressions
    report_unused_suppressions = report_unused_suppressions or any(r.code == UNUSED_SUPPRESSION for r in rules)
    if not selected.relevant(text) and not report_unused_suppressions:
        return [], ctx, errors
    buckets = ctx.walk_and_bucket(set(selected.dispatch))  # (every selected rule's node types: analyses read them too)
    instances, dispatch = selected.for_text(text)

    def failed(rule: Rule, exc: Exception, node=None):  # a rule bug is an internal error, not a crash of the run
        line = getattr(node, "lineno", 1)
        errors.append(SourceError(path, f"internal error in rule {rule.code}: {type(exc).__name__}: {exc}", line))

    for rule in instances:
        try:
            ctx.begin(rule)
        except Exception as exc:
            failed(rule, exc)
    # the visitor calls inline, not through a helper: they are hundreds of thousands
    # (every rule's visit_Call sees every call) and a try costs nothing when nothing raises
    for node_type, visitors in dispatch.items():
        for node in buckets.get(node_type, ()):
            for rule, method in visitors:
                try:
                    method(node, ctx)
                except Exception as exc:
                    failed(rule, exc, node)
    for rule in instances:
        try:
            rule.end_file(ctx)
        except Exception as exc:
            failed(rule, exc)

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
                           Severity.WARNING))  # the severity rules/amp900_unused_suppression.py declares
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

    def offset(line: int, col: int) -> int:  # a reported fix's columns are characters
        line = max(1, min(line, len(starts)))
        return starts[line - 1] + col

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
        del findings, ctx
        _free_earlier_trees()
        findings, ctx, more = lint_text(path, text, settings, rules, project)
        errors.extend(more)
    # a file libcst itself cannot round-trip (2,000 terms on a line exceed its recursion,
    # A6) gives this second parser nothing to compare: the ast check above stands alone
    if text != original and not _libcst_roundtrips(text) and _libcst_roundtrips(original):
        errors.append(SourceError(path, "internal error: fixed code does not round-trip through libcst; file left unchanged"))
        return original, 0, lint_text(path, original, settings, rules, project)[0], errors
    return text, total, findings, errors


def _libcst_roundtrips(text: str) -> bool:
    """A second, independent parser: the concrete syntax tree must reproduce the text."""
    try:
        import libcst

        code = libcst.parse_module(text).code
    except Exception:
        return False
    # libcst 1.x drops a file's final lone "\r" (CR-only endings, A3/N22), whatever the fix:
    # that one character is its quirk, not a change the fix made
    return code == text or (text.endswith("\r") and not text.endswith("\r\n") and code == text[:-1])


# --- shared with the pipeline -------------------------------------------------------------

def _outgoing(findings: list[Finding], text: str, lines: Optional[list[str]] = None) -> list[Finding]:
    """Findings of one file as they leave the worker: fingerprinted, without their ast
    node (it would keep the file's whole tree alive, and cross the pool with it).
    ``lines``: ``text`` split already (``FileContext.lines``)."""
    assign_fingerprints(findings, text, lines)
    for f in findings:
        f.node = None
    return findings


def _free_earlier_trees() -> None:
    """Within a task run by the pipeline (``pipeline._collected``), free the trees of the
    rounds before (fix rounds, pieces of a large file): one task must not keep them all
    until it ends."""
    if not gc.isenabled():
        gc.collect(0)


def worker_count(requested: int, files: int) -> int:
    """Worker processes for ``files`` files: ``requested`` (0: one per core), never more
    than the files or twice the cores (``-j 1000`` must not start 1000 processes)."""
    cores = os.cpu_count() or 1
    return max(1, min(requested or cores, files, 2 * cores))
