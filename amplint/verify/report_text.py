"""Rich tables for ``amplint verify`` (plain text when not on a terminal)."""
from __future__ import annotations

import math
import os
from typing import Optional

from .records import LevelRun, VerifyReport


def _rel(path: Optional[str]) -> str:
    if not path:
        return "?"
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") and len(rel) > len(path) else rel


def num(x) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        if math.isnan(x):
            return "nan"
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
        if x == 0:
            return "0"
        if 1e-3 <= abs(x) < 1e5:
            return f"{x:.4g}"
        return f"{x:.2e}"
    return str(x)


def level_status(run: LevelRun) -> str:
    from .analysis import mostly_skipped

    if run.crash:
        return "CRASH"
    if run.level != "O0" and (run.first_nonfinite_site or run.first_nonfinite_module):
        return "inf/NaN"
    if run.nonfinite_loss:
        return "inf/NaN"
    if mostly_skipped(run):
        return "skipped steps"
    return "ok"


def first_problem(run: LevelRun) -> str:
    """Where a level failed first: the crash, or the first inf/NaN's source line and module."""
    crash = run.crash
    if crash:
        where = f"{_rel(crash.file)}:{crash.line}" if crash.file else f"in {crash.phase}"
        return f"{where} {crash.type}: {crash.message}"
    site = run.origin or run.first_nonfinite_site
    mod = run.first_nonfinite_module
    parts = []
    if site:
        col = f":{site.column}" if site.column else ""
        expr = f" `{site.expr}`" if site.expr else ""
        step = f", step {site.step}" if site.step else ""
        parts.append(f"{_rel(site.file)}:{site.line}{col}{expr} ({site.op}{step})")
    from .analysis import mostly_skipped

    skipped = mostly_skipped(run)
    if skipped and not parts:
        parts.append(skipped)
    if mod:
        parts.append(f"module {mod}{_module_where(run, mod)}")
    return ", ".join(parts) if parts else "-"


def _module_where(run: LevelRun, name: str) -> str:
    """`` (RMSNorm at norm.py:9, forward :15)`` or `` (Linear built at model.py:20)``."""
    for m in run.modules:
        if m.name != name:
            continue
        src, built = m.source, m.constructed
        cls = m.class_name.rsplit(".", 1)[-1]
        if src and src.file:
            fwd = f", forward :{src.forward_line}" if src.forward_line else ""
            return f" ({cls} at {_rel(src.file)}:{src.line}{fwd})"
        if built:
            return f" ({cls} built at {_rel(built.file)}:{built.line})"
        return f" ({cls})"
    return ""


def _levels_table(title: str, runs: dict, box):
    from rich.table import Table

    t = Table(title=title, box=box, title_justify="left", expand=False)
    for col in ("level", "status", "loss first→last", "loss scale", "skipped", "output vs fp32", "first failure (source line)"):
        t.add_column(col, overflow="fold")
    for level, run in runs.items():
        losses = run.losses
        loss = f"{num(losses[0])} → {num(losses[-1])}" if losses else "-"
        scale = loss_scale_text(run)
        err = "reference" if level == "O0" else num(run.output_rel_err)
        status = level_status(run)
        style = {"ok": "green", "CRASH": "bold red", "inf/NaN": "bold red", "skipped steps": "bold red"}[status]
        t.add_row(level, f"[{style}]{status}[/]", loss, scale, str(run.skipped_steps), err, first_problem(run))
    return t


def loss_scale_text(run: LevelRun) -> str:
    """The loss scale's values over the steps, repeats folded: ``65536→32768``."""
    scales = run.loss_scales
    return "→".join(num(s) for s in _dedupe_runs(scales)) if scales else "-"


def _dedupe_runs(values):
    out = []
    for v in values:
        if not out or out[-1] != v:
            out.append(v)
    return out


STATUS_STYLE = {"confirmed": "bold yellow", "fixed": "bold green", "not reproduced": "dim", "not executed": "dim",
                "fix not applied (display only)": "bold yellow", "fixed run crashed": "bold red",
                "fix did not remove it": "bold red", "fix changes fp32 results": "bold red"}


def render(reports: list[VerifyReport], out, color: bool = False, width: Optional[int] = None) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    console = Console(file=out, force_terminal=color, no_color=not color, width=width or (None if color else 140),
                      highlight=False, soft_wrap=False)
    b = box.SIMPLE_HEAD
    for report in reports:
        console.print(f"[bold]amplint verify {report.target}[/]  ({report.device}, {report.dtype}, "
                      f"{' '.join(report.levels) or 'O0 only'} against O0, {report.steps} steps, seed {report.seed}, "
                      f"tolerance {report.tolerance:g})")
        console.print(_levels_table("Opt levels" + (" (original code)" if report.after else ""), report.before, b))
        if report.after:
            console.print(_levels_table("Opt levels after the fixes (temporary copies)", report.after, b))
        findings = report.findings or []
        if findings:
            t = Table(title="Static findings checked at runtime", box=b, title_justify="left")
            for col in ("finding", "location", "fix", "status", "evidence"):
                t.add_column(col, overflow="fold")
            for f in findings:
                ev = f.evidence or []
                text = "; ".join(f"{e.level} {e.kind}: {e.detail}" for e in ev[:3]) or (
                    f.not_executed or "ran: no crash, inf/NaN, underflow or divergence in this expression")
                if f.reached_after_fix:
                    text = "reached only after the fixes removed an earlier crash: " + text
                if f.after_evidence:
                    text += " | after fix: " + "; ".join(f"{e.level} {e.kind}" for e in f.after_evidence[:3])
                style = STATUS_STYLE.get(f.status, "")
                t.add_row(f"{f.code} {f.rule}", f"{_rel(f.path)}:{f.line}", f.fix or "-",
                          f"[{style}]{f.status}[/]", text)
            console.print(t)
        elif report.files:
            console.print("No static findings in the model's source files.")
        runtime = report.runtime_only or []
        if runtime:
            t = Table(title="Runtime problems no rule predicted", box=b, title_justify="left")
            for col in ("level", "kind", "location", "detail"):
                t.add_column(col, overflow="fold")
            for p in runtime:
                loc = f"{_rel(p.file)}:{p.line}" if p.file else "-"
                t.add_row(p.level, p.kind, loc, p.detail)
            console.print(t)
        if report.fix and report.fp32_repaired:
            console.print("fp32 (O0) run: it failed with the original code and the fixes repaired it")
        elif report.fix and report.after:
            change = report.fp32_change
            console.print(f"fp32 (O0) results after the fixes: max relative change {num(change)} "
                          f"({'within' if change is not None and change <= report.tolerance else 'BEYOND'} tolerance {report.tolerance:g})")
        if report.fix:
            for path, d in (report.fixed_files or {}).items():
                console.print(f"[dim]{d.rstrip()}[/]", markup=True, highlight=False)
            if not report.fixed_files:
                console.print("No fixes to apply.")
        printed = (report.model_output or "").rstrip()
        if printed:
            lines = printed.splitlines()
            shown = lines[-40:]
            more = f", the last {len(shown)} of {len(lines)} lines" if len(lines) > len(shown) else ""
            console.print(f"[bold]Model output[/] (its stdout and stderr while imported, built and trained{more}):")
            for line in shown:
                console.print("  | " + line, markup=False, highlight=False)
        for note in report.notes or []:
            console.print(f"[cyan]note:[/] {note}")
        for warning in report.warnings or []:
            console.print(f"[yellow]warning:[/] {warning}")
        for err in report.lint_errors or []:
            console.print(f"[yellow]lint:[/] {err}")
        status = report.exit_status
        if status == 0:
            console.print("[bold green]Result: safe at the selected levels[/]" + _safe_tail(report))
        else:
            console.print("[bold red]Result: NOT safe[/]: " + _why(report))
        console.print()


def failures(runs: dict, levels) -> str:
    """What happened at each failing level, by name: ``O1 inf/NaN, O2 crash``."""
    return ", ".join(f"{level} {level_status(runs[level]).replace('CRASH', 'crash')}" for level in levels if level in runs)


def _safe_tail(report: VerifyReport) -> str:
    """`` after the fixes``, naming what the original code did when it failed."""
    if not report.after:
        return ""
    bad = report.failing_levels or []
    return " after the fixes" + (f" (the original code: {failures(report.before, bad)})" if bad else "")


def _why(report: VerifyReport) -> str:
    """The failures that happened, the original code first: ``original code: O2 crash; after
    the fixes: O2 inf/NaN``."""
    parts = []
    before_bad = report.failing_levels or []
    if report.after is not None:
        if before_bad:
            parts.append(f"original code: {failures(report.before, before_bad)}")
        after_bad = report.failing_levels_after or []
        if after_bad:
            parts.append(f"after the fixes: {failures(report.after, after_bad)}")
        change = report.fp32_change
        if change is not None and change > report.tolerance:
            parts.append(f"the fixes change fp32 results by {num(change)}")
    elif before_bad:
        parts.append(failures(report.before, before_bad))
    return "; ".join(parts) or "see above"
