"""The verify pipeline: run the original model, lint its sources, optionally fix temporary
copies and run those, then decide each finding's status."""
from __future__ import annotations

import math
import os
import sys
from typing import Callable, Optional

from . import analysis
from .runner import LevelRunner, RunConfig, make_loss
from .target import (
    Target, TargetError, factory_from_module, import_file, is_user_file, isolated_import, _package_root,
)

STATUS_CONFIRMED = "confirmed"
STATUS_FIXED = "fixed"
STATUS_NOT_REPRODUCED = "not reproduced"
STATUS_STILL_FAILS = "fix did not remove it"
STATUS_FP32_CHANGED = "fix changes fp32 results"


def _user_modules(before: set) -> dict[str, str]:
    """Files of user modules imported since ``before`` -> the sys.path root they came from."""
    out = {}
    for name, mod in list(sys.modules.items()):
        if name in before:
            continue
        path = getattr(mod, "__file__", None)
        if not is_user_file(path):
            continue
        path = os.path.abspath(path)
        if name.startswith("amplint_verify_target_"):
            out[path] = _package_root(path)[0]
            continue
        depth = name.count(".") + (1 if os.path.basename(path) == "__init__.py" else 0)
        root = os.path.dirname(path)
        for _ in range(depth):
            root = os.path.dirname(root)
        out[path] = root
    return out


def _run_all(make: Callable, user_files: set, cfg: RunConfig, progress=None) -> dict:
    runner = LevelRunner(make, user_files, cfg, make_loss(cfg.loss))
    runs = {}
    for level in cfg.all_levels():
        if progress:
            progress.start_level(level)
        runs[level] = runner.run_level(level, on_step=progress.step if progress else None)
        _add_class_files(runs[level], user_files)
    return runs, runner.reference.output


def _add_class_files(run: dict, user_files: set) -> None:
    for mod in run.get("modules", ()):
        src = mod.get("source")
        if src and src.get("file"):
            user_files.add(src["file"])


def _load(target: Target):
    """Import the target (inside an isolated_import block) -> (factory, user files -> roots)."""
    before = set(sys.modules)
    module = import_file(target.path)
    make = factory_from_module(module, target.factory, str(target))
    files = _user_modules(before)
    files.setdefault(target.path, _package_root(target.path)[0])
    return make, files


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
            path = os.path.abspath(path)
            name = type(m).__module__
            root = os.path.dirname(path)
            for _ in range(name.count(".") + (1 if os.path.basename(path) == "__init__.py" else 0)):
                root = os.path.dirname(root)
            out[path] = root
    return out


def verify_target(target: Target, cfg: RunConfig, fix: bool = False, unsafe: bool = False,
                  config: Optional[str] = None, progress=None, lint: bool = True) -> dict:
    """Everything ``amplint verify PATH::FACTORY`` reports, as plain data."""
    with isolated_import():
        make, files = _load(target)
        for path, root in _class_files(make).items():
            files.setdefault(path, root)
        user_files = set(files)
        before, ref_out = _run_all(make, user_files, cfg, progress)
    for path in user_files:
        if path not in files:
            files[path] = os.path.dirname(path)
    return finish(str(target), before, ref_out, files, cfg, fix, unsafe, config, progress, lint, target)


def verify_factory(make: Callable, cfg: RunConfig, name: str = "model", lint: bool = True) -> dict:
    """Verify a model given as a factory in this process (the pytest plugin)."""
    files = _class_files(make)
    user_files = set(files)
    before, ref_out = _run_all(make, user_files, cfg)
    for path in user_files:
        files.setdefault(path, os.path.dirname(path))
    return finish(name, before, ref_out, files, cfg, False, False, None, None, lint, None)


def finish(name, before, ref_out, files, cfg, fix, unsafe, config, progress, lint, target) -> dict:
    from . import lintfix

    tolerance = cfg.resolved_tolerance()
    device = cfg.resolved_device()
    selected = [lvl for lvl in cfg.all_levels() if lvl != "O0"]
    report = {
        "target": name, "device": device, "dtype": cfg.dtype, "levels": selected, "steps": cfg.steps,
        "seed": cfg.seed, "tolerance": tolerance, "loss": cfg.loss, "optimizer": cfg.optimizer,
        "files": sorted(files), "before": before, "after": None, "findings": [], "problems": [],
        "runtime_only": [], "fp32_change": None, "fixed_files": {}, "lint_errors": [], "fix": bool(fix), "warnings": [],
    }
    lint_files = sorted(p for p in files if p.endswith(".py"))
    findings: list[dict] = []
    if lint and lint_files:
        if progress:
            progress.message("linting the model's source files")
        findings, errors = lintfix.lint(lint_files, cfg.dtype, selected or ["O1"], device, config)
        report["lint_errors"] = errors
    for f in findings:
        f["evidence"] = []
        for level in selected:
            if level in f["levels"]:  # only where the finding's own settings predict it
                f["evidence"].extend(analysis.evidence(f["code"], f["path"], f["line"], f["end_line"], level, before[level], tolerance, f["message"]))
        f["status"] = STATUS_CONFIRMED if f["evidence"] else STATUS_NOT_REPRODUCED
        f["after_evidence"] = None
    after = None
    if fix and target is not None and lint_files:
        if progress:
            progress.message("fixing temporary copies of the sources")
        originals, texts, errors = lintfix.fix(lint_files, cfg.dtype, selected or ["O1"], device, unsafe, config)
        report["lint_errors"].extend(errors)
        changed = [p for p in lint_files if texts[p] != originals[p]]
        report["fixed_files"] = {p: lintfix.diff(os.path.relpath(p), originals[p], texts[p]) for p in changed}
        report["lint_errors"] = sorted(set(report["lint_errors"]))
    if fix and target is not None and lint_files and report["fixed_files"]:
        tmp, mapping, roots = lintfix.mirror(files, texts)
        try:
            with isolated_import(tuple(roots)):
                copy_target = Target(mapping[target.path], target.factory)
                make2, _ = _load(copy_target)
                stale = sorted({os.path.abspath(getattr(m, "__file__", "") or "") for m in list(sys.modules.values())} & set(files))
                if stale:
                    report["warnings"].append(
                        "the fixed copy imported the original " + ", ".join(os.path.relpath(p) for p in stale)
                        + " (an absolute sys.path entry in the harness?); the fix proof may not cover those files")
                # the originals too: a harness that imports them anyway must show up as such
                user_files2 = set(mapping.values()) | set(files)
                after, ref_out2 = _run_all(make2, user_files2, cfg, progress)
                report["after"] = _rename_paths(after, {v: k for k, v in mapping.items()}, texts, originals)
        finally:
            lintfix.cleanup(tmp)
        # the after run's paths are the originals again (_rename_paths); its lines are those of
        # the fixed text, hence the line maps below
        report["fp32_change"] = _fp32_change(before["O0"], after["O0"], ref_out, ref_out2)
        if analysis.failing({"O0": before["O0"]}) and not analysis.failing({"O0": after["O0"]}):
            # the fp32 run itself crashed or produced inf/NaN and the fixes repaired it: that is
            # not a change of working fp32 results
            report["fp32_repaired"] = True
            report["fp32_change"] = None
        maps = {p: lintfix.LineMap(originals[p], texts[p]) for p in lint_files}
        remaining = _remaining(lint_files, texts, cfg, selected, device, config, mapping)
        for f in findings:
            start, end = maps[f["path"]].range(f["line"], f["end_line"])
            ev = []
            for level in selected:
                if level in f["levels"]:
                    ev.extend(analysis.evidence(f["code"], f["path"], start, end, level, after[level], tolerance, f["message"]))
            f["after_evidence"] = ev
            # gone from the fixed text (its own fix, or another fix on the same lines)
            f["fixed_by_lint"] = f["path"] in changed and not any(
                (f["path"], f["code"], line) in remaining for line in range(start, end + 1))
            if f["status"] != STATUS_CONFIRMED:
                continue
            if not f["fixed_by_lint"]:
                continue
            # the failure that manifested before (same level, same kind) is what must be gone;
            # the fp32 results are checked on their own below
            seen = {(e["level"], e["kind"]) for e in f["evidence"]}
            if any((e["level"], e["kind"]) in seen for e in ev):
                f["status"] = STATUS_STILL_FAILS
            elif report["fp32_change"] is not None and report["fp32_change"] > tolerance:
                f["status"] = STATUS_FP32_CHANGED
            else:
                f["status"] = STATUS_FIXED
    report["findings"] = findings
    probs = analysis.problems(before, tolerance)
    for p in probs:
        p["explained_by"] = [f"{f['code']}:{os.path.relpath(f['path'])}:{f['line']}" for f in findings
                             if any(e["level"] == p["level"] and _matches(p, e, f) for e in f["evidence"])]
    report["problems"] = probs
    report["runtime_only"] = [p for p in probs if not p["explained_by"]]
    report["failing_levels"] = analysis.failing({k: v for k, v in before.items()})
    report["failing_levels_after"] = analysis.failing(after) if after else None
    report["exit_status"] = exit_status(report)
    return report


def _matches(problem: dict, ev: dict, finding: dict) -> bool:
    kind = problem["kind"]
    if kind == "crash":
        return ev["kind"] == "crash"
    if kind == "inf/NaN":
        return ev["kind"] == "inf/NaN"
    if kind == "underflow":
        return ev["kind"] == "underflow"
    if kind == "divergence":
        return ev["kind"] in ("divergence", "inf/NaN", "underflow")
    return False


def _remaining(files, texts, cfg, selected, device, config, mapping) -> set:
    """(original path, code, line in the fixed text) of findings still reported on the fixed text."""
    from amplint.config import ConfigResolver
    from amplint.engine import lint_text
    from amplint.registry import all_rules, select_rules

    out = set()
    for level in selected or ["O1"]:
        resolver = ConfigResolver({"target": cfg.dtype, "opt_level": level, "device": device if device in ("cpu", "cuda") else None}, config)
        for path in files:
            settings = resolver.for_path(path)
            rules = select_rules(all_rules(settings.rule_paths), settings)
            try:
                findings, _, _ = lint_text(path, texts[path], settings, rules, None)
            except Exception:
                continue
            for f in findings:
                out.add((path, f.code, f.line))
    return out


def _rename_paths(runs: dict, back: dict, texts: dict, originals: dict) -> dict:
    """Copies' paths -> original paths in a run (lines stay those of the fixed text)."""
    for run in runs.values():
        crash = run.get("crash")
        if crash and crash.get("file") in back:
            crash["file_copy"] = crash["file"]
            crash["file"] = back[crash["file"]]
        for site in run.get("sites", ()):
            site["file"] = back.get(site["file"], site["file"])
        if run.get("first_nonfinite_site"):
            s = run["first_nonfinite_site"]
            s["file"] = back.get(s["file"], s["file"])
        for mod in run.get("modules", ()):
            for k in ("source", "constructed"):
                if mod.get(k) and mod[k].get("file") in back:
                    mod[k]["file"] = back[mod[k]["file"]]
    return runs


def _fp32_change(a: dict, b: dict, out_a, out_b) -> Optional[float]:
    """How much the fixes changed the fp32 (O0) run: loss trajectory and step-0 output."""
    if a.get("crash") or b.get("crash"):
        return None if a.get("crash") and b.get("crash") else math.inf
    errs = []
    for x, y in zip(a["losses"], b["losses"]):
        if not (math.isfinite(x) and math.isfinite(y)):
            errs.append(0.0 if (math.isnan(x) and math.isnan(y)) or x == y else math.inf)
        else:
            errs.append(abs(x - y) / abs(x) if x else abs(y))
    from .runner import _relative_error

    if out_a is not None and out_b is not None:
        err = _relative_error(out_b, out_a)
        errs.append(math.inf if err is None else err)
    return max(errs) if errs else None


def exit_status(report: dict) -> int:
    """1 when a selected level crashes or produces inf/NaN (after the fixes, with --fix), or a
    fix changes fp32 results beyond the tolerance; else 0."""
    if report.get("after") is not None:
        bad = report["failing_levels_after"]
        change = report.get("fp32_change")
        if bad or (change is not None and change > report["tolerance"]):
            return 1
        return 0
    return 1 if report["failing_levels"] else 0
