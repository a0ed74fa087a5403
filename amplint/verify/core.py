"""The verify pipeline: run the original model, lint its sources, optionally fix temporary
copies and run those, then decide each finding's status."""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import math
import os
import sys
from typing import Callable, Optional

from . import analysis, lintfix
from .capture import CapturedOutput
from .records import Crash, Evidence, LevelRun, Problem, VerifyFinding, VerifyReport
from .runner import ADAM_EPS, LevelRunner, LineTrace, RunConfig, make_loss, optimizer_eps
from .target import (
    Target, TargetError, canonical, factory_from_module, import_file, is_user_file, isolated_import, _package_root,
)

STATUS_CONFIRMED = "confirmed"
STATUS_FIXED = "fixed"
STATUS_NOT_REPRODUCED = "not reproduced"
STATUS_NOT_EXECUTED = "not executed"
STATUS_STILL_FAILS = "fix did not remove it"
STATUS_FP32_CHANGED = "fix changes fp32 results"
#: confirmed, and its fix is one the training script makes (AMP401's registrations): verify
#: made it for its own run, but nothing in the user's files was changed
STATUS_DISPLAY_ONLY = "fix not applied (display only)"
#: the fixed copy crashed where the finding is predicted (or in fp32): nothing is proved
STATUS_FIXED_CRASHED = "fixed run crashed"


def _user_modules(before: set) -> dict[str, str]:
    """Files of user modules imported since ``before`` -> the sys.path root they came from."""
    out = {}
    for name, mod in list(sys.modules.items()):
        if name in before:
            continue
        path = getattr(mod, "__file__", None)
        if not is_user_file(path):
            continue
        path = canonical(path)
        if name.startswith("amplint_verify_target_"):
            out[path] = _package_root(path)[0]
            continue
        depth = name.count(".") + (1 if os.path.basename(path) == "__init__.py" else 0)
        root = os.path.dirname(path)
        for _ in range(depth):
            root = os.path.dirname(root)
        out[path] = root
    return out


def _register(findings: list[VerifyFinding], mapping: dict[str, str]) -> list[str]:
    """Make the registrations the findings' display fixes ask of the training script: the
    verifier is the training script of its runs (it calls ``amp.initialize``).  They last
    until the fixed copy's :func:`isolated_import` ends.  A registration on the finding's own
    module (``from torch import einsum``) goes to that file's fixed copy as the harness
    loaded it, under whatever name.  Returns a warning per module that cannot be found."""
    from amplint import amp

    warnings, done = [], set()
    for f in findings:
        copy = canonical(mapping.get(f.path, f.path))
        for module_name, function, kind in map(tuple, f.registrations):
            if (module_name, function, kind, copy) in done:
                continue
            done.add((module_name, function, kind, copy))
            own = [m for m in list(sys.modules.values()) if canonical(getattr(m, "__file__", "") or "") == copy]
            if own and module_name.rpartition(".")[2] == os.path.splitext(os.path.basename(copy))[0]:
                module = own[0]
            else:
                try:
                    module = sys.modules.get(module_name) or importlib.import_module(module_name)
                except Exception as exc:  # the user's module failing to import: a warning
                    warnings.append(f"could not register {module_name}.{function} for the fixed run: {exc}")
                    continue
            getattr(amp, f"register_{kind}_function")(module, function)
    return warnings


def _run_all(make: Callable, user_files: set, cfg: RunConfig, progress=None, name: Optional[str] = None) -> dict:
    """Every level's run.  With ``name`` (the original code's run) a crash of the fp32
    reference (O0) is a target error: nothing can be judged against it."""
    runner = LevelRunner(make, user_files, cfg, make_loss(cfg.loss))
    runs = {}
    for level in cfg.all_levels():
        if progress:
            progress.start_level(level)
        runs[level] = runner.run_level(level, on_step=progress.step if progress else None)
        _add_class_files(runs[level], user_files)
        if name is not None and level == "O0" and runs[level].crash:
            raise TargetError(reference_failure(name, runs[level].crash))
    return runs, runner.reference.output


_NO_CUDA = ("Torch not compiled with CUDA enabled", "no CUDA GPUs", "Found no NVIDIA driver", "CUDA driver initialization failed")


def reference_failure(name: str, crash: Crash) -> str:
    """One line for a target whose fp32 (O0) run crashed: the harness or the machine, not
    mixed precision (``harness.py::broken raised ValueError: ... (harness.py:33)``)."""
    import torch

    if crash.type == "TargetError" and crash.phase == "build":  # verify's own complaint about what the factory returned
        return f"{name}: {crash.message or 'not a usable target'}"
    where = f" ({os.path.relpath(crash.file)}:{crash.line})" if crash.file and crash.line else ""
    what = f"{crash.type}: {crash.message}" if crash.message else crash.type
    if any(s in (crash.message or "") for s in _NO_CUDA) and not torch.cuda.is_available():
        return f"{name} needs CUDA; use --device cpu or a machine with a GPU ({what}{where})"
    return f"{name} raised {what}{where}"


def _add_class_files(run: LevelRun, user_files: set) -> None:
    for mod in run.modules:
        src = mod.source
        if src and src.file:
            user_files.add(src.file)


def _load(target: Target):
    """Import the target (inside an isolated_import block) -> (factory, user files -> roots)."""
    before = set(sys.modules)
    lines = LineTrace(is_user_file)
    with lines.active():
        module = import_file(target.path)
    make = factory_from_module(module, target.factory, str(target))
    files = _user_modules(before)
    path = canonical(target.path)
    files.setdefault(path, _package_root(path)[0])
    return make, files, lines.by_file()


def _add_import_lines(runs: dict, import_lines: dict) -> None:
    """Module-level code ran once, at import: it ran for every level."""
    for run in runs.values():
        if run.executed is None:
            continue
        for file, lines in import_lines.items():
            run.executed[file] = sorted(set(run.executed.get(file, ())) | set(lines))


def _class_files(make: Callable) -> dict[str, str]:
    """Files that define the model's module classes (for models imported before verify ran)."""
    out = {}
    try:
        from .target import normalize_example

        model, _, _ = normalize_example(make(), "the factory")
    except Exception:
        return out
    for m in model.modules():
        mod = sys.modules.get(type(m).__module__)
        path = getattr(mod, "__file__", None)
        if is_user_file(path):
            path = canonical(path)
            name = type(m).__module__
            root = os.path.dirname(path)
            for _ in range(name.count(".") + (1 if os.path.basename(path) == "__init__.py" else 0)):
                root = os.path.dirname(root)
            out[path] = root
    return out


def verify_target(target: Target, cfg: RunConfig, fix: bool = False, unsafe: bool = False,
                  config: Optional[str] = None, progress=None, lint: bool = True,
                  lint_settings: Optional[lintfix.LintSettings] = None) -> VerifyReport:
    """Everything ``amplint verify PATH::FACTORY`` reports."""
    output = CapturedOutput()
    with isolated_import():
        with output.capturing():
            make, files, import_lines = _load(target)
            for path, root in _class_files(make).items():
                files.setdefault(path, root)
            user_files = set(files)
            before, ref_out = _run_all(make, user_files, cfg, progress, str(target))
        _add_import_lines(before, import_lines)
    for path in user_files:
        if path not in files:
            files[path] = os.path.dirname(path)
    settings = lint_settings or lintfix.LintSettings(config=config)
    return finish(str(target), before, ref_out, files, cfg, fix, unsafe, settings, progress, lint, target, output)


def verify_factory(make: Callable, cfg: RunConfig, name: str = "model", lint: bool = True) -> VerifyReport:
    """Verify a model given as a factory in this process (the pytest plugin)."""
    output = CapturedOutput()
    with output.capturing():
        files = _class_files(make)
        user_files = set(files)
        before, ref_out = _run_all(make, user_files, cfg)
    for path in user_files:
        files.setdefault(path, os.path.dirname(path))
    return finish(name, before, ref_out, files, cfg, False, False, lintfix.LintSettings(), None, lint, None, output)


def finish(name, before, ref_out, files, cfg, fix, unsafe, config, progress, lint, target, output=None) -> VerifyReport:
    """The report on the original code's runs ``before``: its findings linted and judged
    against them; with ``fix``, temporary fixed copies run and each finding judged again."""
    tolerance = cfg.resolved_tolerance()
    selected = [lvl for lvl in cfg.all_levels() if lvl != "O0"]
    report = _new_report(name, cfg, files, before, fix, tolerance, selected)
    lint_files = sorted(p for p in files if p.endswith(".py"))
    findings: list[VerifyFinding] = []
    if lint and lint_files:
        if progress:
            progress.message("linting the model's source files")
        findings, errors = lintfix.lint(lint_files, cfg.dtype, selected or ["O1"], report.device, config)
        report.lint_errors = errors
    _judge_before(findings, before, selected, tolerance)
    after = None
    if fix and target is not None and lint_files:
        if progress:
            progress.message("fixing temporary copies of the sources")
        originals, texts, changed = _fix_copies(report, lint_files, cfg, selected, unsafe, config)
        registers = any(f.registrations for f in findings)
        if report.fixed_files or registers:
            after, ref_out2 = _run_fixed(report, findings, files, texts, originals, target, cfg, progress, output)
            _judge_fp32_change(report, before, after, ref_out, ref_out2)
            remaining = lintfix.remaining({p: texts[p] for p in lint_files}, cfg.dtype, selected or ["O1"],
                                          report.device, config)
            maps = {p: lintfix.LineMap(originals[p], texts[p]) for p in lint_files}
            for f in findings:
                _judge_after(f, after, maps[f.path], remaining, changed, selected, tolerance, report.fp32_change)
    report.findings = findings
    _explain_problems(report, findings, before, tolerance)
    report.failing_levels = analysis.failing({k: v for k, v in before.items()})
    report.failing_levels_after = analysis.failing(after) if after else None
    _note_optimizer_eps(report, cfg, selected)
    report.exit_status = exit_status(report)
    report.model_output = output.tail() if output is not None else ""
    return report


def _new_report(name, cfg, files, before, fix, tolerance, selected) -> VerifyReport:
    """The report before anything is judged."""
    return VerifyReport(name, cfg.resolved_device(), cfg.dtype, selected, cfg.steps, cfg.seed, tolerance, cfg.loss,
                        cfg.optimizer, files=sorted(files), before=before, fix=bool(fix))


def _judge_before(findings: list[VerifyFinding], before: dict, selected: list, tolerance) -> None:
    """Each finding's evidence in the original code's runs, and its status from them."""
    for f in findings:
        f.evidence = []
        for level in selected:
            if level in f.levels:  # only where the finding's own settings predict it
                f.evidence.extend(analysis.evidence(f, level, before[level], tolerance))
        f.status = STATUS_CONFIRMED if f.evidence else STATUS_NOT_REPRODUCED
        f.after_evidence = None
        if not f.evidence:
            why = _not_executed(f, before, selected)
            if why:
                f.status, f.not_executed = STATUS_NOT_EXECUTED, why


def _fix_copies(report: VerifyReport, lint_files: list, cfg, selected: list, unsafe: bool, config):
    """The sources fixed in memory: (original texts, fixed texts, the paths that changed);
    the report gets their diffs and the fix's errors."""
    originals, texts, errors = lintfix.fix(lint_files, cfg.dtype, selected or ["O1"], report.device, unsafe, config)
    report.lint_errors.extend(errors)
    changed = [p for p in lint_files if texts[p] != originals[p]]
    report.fixed_files = {p: lintfix.diff(os.path.relpath(p), originals[p], texts[p]) for p in changed}
    report.lint_errors = sorted(set(report.lint_errors))
    return originals, texts, changed


def _run_fixed(report: VerifyReport, findings: list, files: dict, texts: dict, originals: dict, target: Target, cfg,
               progress, output):
    """Every level's run of the fixed copies (written to a temporary folder, imported in
    isolation, the findings' registrations made): (runs in the original files' terms, the
    fp32 output)."""
    tmp, mapping, roots = lintfix.mirror(files, texts)
    try:
        with isolated_import(tuple(roots)):
            copy_target = Target(mapping[canonical(target.path)], target.factory)
            with output.capturing() if output is not None else contextlib.nullcontext():
                make2, _, import_lines2 = _load(copy_target)
                report.warnings.extend(_register(findings, mapping))
            stale = sorted({canonical(getattr(m, "__file__", "") or "") for m in list(sys.modules.values())} & set(files))
            if stale:
                report.warnings.append(
                    "the fixed copy imported the original " + ", ".join(os.path.relpath(p) for p in stale)
                    + " (an absolute sys.path entry in the harness?); the fix proof may not cover those files")
            # the originals too: a harness that imports them anyway must show up as such
            user_files2 = set(mapping.values()) | set(files)
            with output.capturing() if output is not None else contextlib.nullcontext():
                after, ref_out2 = _run_all(make2, user_files2, cfg, progress)
            _add_import_lines(after, import_lines2)
            # the after run's paths are the originals again; its lines are those of the fixed
            # text, hence the line maps of the judging
            report.after = _rename_paths(after, {v: k for k, v in mapping.items()}, texts, originals)
    finally:
        lintfix.cleanup(tmp)
    return after, ref_out2


def _judge_fp32_change(report: VerifyReport, before: dict, after: dict, ref_out, ref_out2) -> None:
    """How much the fixes changed the fp32 (O0) run."""
    report.fp32_change = _fp32_change(before["O0"], after["O0"], ref_out, ref_out2)
    if analysis.failing({"O0": before["O0"]}) and not analysis.failing({"O0": after["O0"]}):
        # the fp32 run itself crashed or produced inf/NaN and the fixes repaired it: that is
        # not a change of working fp32 results
        report.fp32_repaired = True
        report.fp32_change = None


def _judge_after(f: VerifyFinding, after: dict, line_map, remaining, changed: list, selected: list, tolerance,
                 fp32_change) -> None:
    """A finding's status once the fixed copies ran."""
    start, end = line_map.range(f.line, f.end_line)
    ev = []
    for level in selected:
        if level in f.levels:
            # the after run is in the original files' lines already (_rename_paths)
            ev.extend(analysis.evidence(f, level, after[level], tolerance))
    f.after_evidence = ev
    # gone from the fixed text (its own fix, or another fix on the same lines); a display
    # fix (registrations the verifier made as the training script) changed no file
    f.fixed_by_lint = f.path in changed and not any(
        (f.path, f.code, line) in remaining for line in range(start, end + 1))
    if f.status == STATUS_NOT_EXECUTED and not _not_executed(f, after, selected):
        # the fixes removed the crash that kept this line from running: judge it now
        _judge_reached(f, ev)
        return
    if f.status != STATUS_CONFIRMED:
        return
    if f.fix == "display" and not f.fixed_by_lint:
        f.status = STATUS_DISPLAY_ONLY
        return
    if not f.fixed_by_lint:
        return
    # the failure that manifested before (same level, same kind) is what must be gone;
    # the fp32 results are checked on their own below
    seen = {(e.level, e.kind) for e in f.evidence}
    crashed = [lvl for lvl in ["O0", *f.levels] if lvl in after and after[lvl].crash]
    if any((e.level, e.kind) in seen for e in ev):
        f.status = STATUS_STILL_FAILS
    elif crashed:  # a crash is never a fix: the line may simply not have been reached
        f.status, f.after_crash = STATUS_FIXED_CRASHED, crashed
    elif fp32_change is not None and fp32_change > tolerance:
        f.status = STATUS_FP32_CHANGED
    else:
        f.status = STATUS_FIXED


def _explain_problems(report: VerifyReport, findings: list, before: dict, tolerance) -> None:
    """The run-time problems of the original code, each with the findings that predicted
    it; the ones no finding predicted."""
    probs = analysis.problems(before, tolerance)
    for p in probs:
        p.explained_by = [f"{f.code}:{os.path.relpath(f.path)}:{f.line}" for f in findings
                          if any(e.level == p.level and _matches(p, e) for e in f.evidence)]
    report.problems = probs
    report.runtime_only = [p for p in probs if not p.explained_by]


def _note_optimizer_eps(report: VerifyReport, cfg, selected: list) -> None:
    eps = optimizer_eps(cfg, "O3") if "O3" in selected else None
    if eps is not None and eps != ADAM_EPS:
        report.notes.append(
            f"optimizer eps below the {cfg.dtype} range: at O3 the optimizer state is {cfg.dtype} (no fp32 master "
            f"weights) and Adam's eps={ADAM_EPS:g} is 0 there, so every update where a gradient underflowed is 0/0 = "
            f"NaN from the first step, in any model. The verifier's {cfg.optimizer} used eps={eps:.3g} at O3; "
            f"train at O3 with eps >= {eps:.3g} (e.g. torch.optim.AdamW(..., eps={eps:.3g})), or use O2")


def _ran(finding: VerifyFinding, run: LevelRun) -> Optional[bool]:
    """Whether any line of the finding ran in ``run`` (None: lines were not traced)."""
    executed = run.executed
    if executed is None:
        return None
    lines = executed.get(finding.path, ())
    body = _method_lines(finding.path).get(finding.line) if finding.line == finding.end_line else None
    if body is not None:
        # a finding at a class line (AMP401's custom Function) is about what its methods do; the
        # class statement itself ran at import whether or not the model ever used the class
        return not body.isdisjoint(lines)
    return any(finding.line <= n <= finding.end_line for n in lines)


def _method_lines(path: str) -> dict:
    """Class header line -> the lines of its methods' bodies, for the classes of ``path``."""
    try:
        st = os.stat(path)
    except OSError:
        return {}
    return _method_lines_of(path, st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=64)
def _method_lines_of(path: str, mtime_ns: int, size: int) -> dict:
    import ast

    from amplint.files import read_source

    try:
        tree = ast.parse(read_source(path).text)
    except Exception:  # unreadable or not Python: lines are judged as written
        return {}
    out = {}
    for cls in ast.walk(tree):
        if isinstance(cls, ast.ClassDef):
            out[cls.lineno] = frozenset(
                node.lineno for fn in cls.body if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
                for stmt in fn.body for node in ast.walk(stmt) if isinstance(node, ast.stmt))
    return out


def _not_executed(finding: VerifyFinding, runs: dict, selected: list) -> Optional[str]:
    """Why none of the finding's lines ran at any of its levels, or None when one did (or
    when lines were not traced)."""
    levels = [lvl for lvl in selected if lvl in finding.levels and lvl in runs]
    if not levels:
        return None
    reasons = []
    for level in levels:
        ran = _ran(finding, runs[level])
        if ran is None or ran:
            return None
        crash = runs[level].crash
        where = f" at {os.path.relpath(crash.file)}:{crash.line}" if crash and crash.file else ""
        if crash and crash.file == finding.path and crash.line and finding.end_line < crash.line \
                and crash.step == 0:
            # above the crash in the same file: passed over on the way to it
            reasons.append(f"never ran at {level} (a branch not taken; the level then crashed{where})")
        elif crash:
            reasons.append(f"{level} crashed{where} ({crash.phase}, step {crash.step}) before reaching it")
        else:
            reasons.append(f"never ran at {level} (a branch not taken, or code the model does not call)")
    return "; ".join(dict.fromkeys(reasons))


def _judge_reached(finding: VerifyFinding, after_evidence: list) -> None:
    """A finding first reached after the fixes removed an earlier crash."""
    if finding.fixed_by_lint or finding.fix == "display":
        # only its fixed form ran (a display fix: the registrations verify made for the run):
        # whether the original would have failed is unknown
        finding.not_executed += "; after the fixes it ran in its fixed form" + (
            ", which still fails" if after_evidence else " without failures")
        if after_evidence:
            finding.status = STATUS_STILL_FAILS
        return
    finding.reached_after_fix = True
    finding.evidence = list(after_evidence)
    finding.status = STATUS_CONFIRMED if after_evidence else STATUS_NOT_REPRODUCED


def _matches(problem: Problem, ev: Evidence) -> bool:
    kind = problem.kind
    if kind == "crash":
        return ev.kind == "crash"
    if kind == "inf/NaN":
        return ev.kind == "inf/NaN"
    if kind == "underflow":
        return ev.kind == "underflow"
    if kind == "divergence":
        return ev.kind in ("divergence", "inf/NaN", "underflow")
    return False


def _rename_paths(runs: dict, back: dict, texts: dict, originals: dict) -> dict:
    """A run of the fixed copies -> the same run in the original files' terms: the copies'
    paths become the originals' and their lines the original lines (``LineMap.back``), so
    that every location shown next to an original path is a line of that file.  On lines a
    fix changed, columns are dropped (they are the fixed text's)."""
    from .lintfix import LineMap

    maps: dict = {}

    def line_map(path):
        if path not in maps:
            maps[path] = LineMap(originals[path], texts[path]) if path in originals and texts.get(path) != originals[path] else None
        return maps[path]

    def remap(item, line_keys=("line", "end_line")):
        """A record with a place (a crash, site, origin, class source...), in place."""
        if not item or item.file not in back:
            return
        item.file = path = back[item.file]
        m = line_map(path)
        if m is None:
            return
        exact = True
        names = {field.name for field in dataclasses.fields(item)}
        for key in line_keys:
            if key in names and getattr(item, key) is not None:
                line, same = m.back(getattr(item, key))
                setattr(item, key, line)
                exact = exact and same
        if not exact:
            for key in ("column", "end_column"):
                if key in names:
                    setattr(item, key, None)

    for run in runs.values():
        crash = run.crash
        if crash and crash.file in back:
            crash.file_copy = crash.file
        remap(crash)
        for site in run.sites:
            remap(site)
        remap(run.first_nonfinite_site)
        remap(run.origin)
        for mod in run.modules:
            remap(mod.source, line_keys=("line", "forward_line", "end_line"))
            remap(mod.constructed)
        executed = run.executed
        if executed:
            renamed = {}
            for file, lines in executed.items():
                path = back.get(file, file)
                m = line_map(path) if file in back else None
                mapped = {m.back(n)[0] for n in lines} if m else set(lines)
                renamed[path] = sorted(set(renamed.get(path, ())) | mapped)
            run.executed = renamed
    return runs


def _fp32_change(a: LevelRun, b: LevelRun, out_a, out_b) -> Optional[float]:
    """How much the fixes changed the fp32 (O0) run: loss trajectory and step-0 output."""
    if a.crash or b.crash:
        return None if a.crash and b.crash else math.inf
    errs = []
    for x, y in zip(a.losses, b.losses):
        if not (math.isfinite(x) and math.isfinite(y)):
            errs.append(0.0 if (math.isnan(x) and math.isnan(y)) or x == y else math.inf)
        else:
            errs.append(abs(x - y) / abs(x) if x else abs(y))
    from .runner import _relative_error

    if out_a is not None and out_b is not None:
        err = _relative_error(out_b, out_a)
        errs.append(math.inf if err is None else err)
    return max(errs) if errs else None


def exit_status(report: VerifyReport) -> int:
    """1 when a selected level crashes or produces inf/NaN (after the fixes, with --fix), or a
    fix changes fp32 results beyond the tolerance; else 0."""
    if report.after is not None:
        bad = report.failing_levels_after
        change = report.fp32_change
        if bad or (change is not None and change > report.tolerance):
            return 1
        return 0
    return 1 if report.failing_levels else 0
