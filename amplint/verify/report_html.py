"""``--report report.html``: one self-contained file (inline CSS and SVG; no script, no network).

Per target, in the order an engineer reads it:

1. the verdict per opt level -- ok, crash at ``file:line``, or the first non-finite value at
   ``file:line`` in ``expr``, with the module path -- for the original code and after the fixes;
2. one card per finding: the rule's message, the runtime evidence before and after the fix,
   and the diff of the fix; then the runtime problems no rule predicted;
3. per failing level, the value range of each module's output on a log scale against the
   dtype's limits, focused on the path to the first failure: the modules that ran just
   before it, the failing module marked (and only it: later modules that carry the inf/NaN
   on are collapsed), the range of the op that made the inf/NaN drawn even when it is not a
   module's output (an overflow crosses the max line), a crash in its own row;
4. loss, loss scale and skipped steps per level, drawn;
5. the tables (levels, findings, every module's range), the model's own output and notes.

Everything is rendered here, in Python, with every value escaped: nothing in the model's
names or messages can become markup.
"""
from __future__ import annotations

import html
import math
import os
import re
from typing import Optional

from amplint.numerics import FORMATS

from .records import Crash, LevelRun, ModuleStats, Origin, Problem, TensorStats, VerifyFinding, VerifyReport
from .report_text import _rel, level_status, num

#: module rows shown right before the first failure; earlier unremarkable ones are collapsed
CONTEXT_ROWS = 4
LEVEL_COLORS = {"O0": "#546e7a", "O1": "#1e88e5", "O2": "#8e24aa", "O3": "#ef6c00"}
STATUS_CLASS = {"confirmed": "warn", "fixed": "good", "not reproduced": "muted", "not executed": "muted",
                "fix not applied (display only)": "warn", "fixed run crashed": "bad",
                "fix did not remove it": "bad", "fix changes fp32 results": "bad"}
_STATUS_ORDER = ["fixed run crashed", "fix did not remove it", "fix changes fp32 results", "confirmed",
                 "fix not applied (display only)", "fixed", "not reproduced", "not executed"]


def e(value) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _where(file, line, column=None) -> str:
    if not file:
        return "?"
    return f"{_rel(file)}:{line}" + (f":{column}" if column else "")


# --- 1. verdicts ------------------------------------------------------------------------------

def _module(run: LevelRun, name: Optional[str]) -> Optional[ModuleStats]:
    return next((m for m in run.modules if m.name == name), None)


def _module_label(run: LevelRun, name: Optional[str]) -> str:
    mod = _module(run, name)
    cls = mod.class_name.rsplit(".", 1)[-1] if mod else ""
    return f"<code>{e(name)}</code>" + (f" ({e(cls)})" if cls else "")


def crash_expression(crash: Crash) -> Optional[str]:
    """The expression that raised (its columns), else the whole source line."""
    import linecache

    if crash.file and crash.column and crash.end_column and crash.end_line == crash.line:
        text = linecache.getline(crash.file, crash.line)
        expr = text[crash.column - 1:crash.end_column - 1].strip()
        if expr:
            return expr
    return crash.code


def level_verdict(run: LevelRun) -> tuple[str, str]:
    """(status, the headline as HTML) of one level's run."""
    from .analysis import mostly_skipped

    status = level_status(run)
    crash = run.crash
    if crash:
        where = _where(crash.file, crash.line)
        expr = crash_expression(crash)
        code = f" in <code>{e(expr)}</code>" if expr else ""
        return status, (f"crash at <code class=\"loc\">{e(where)}</code>{code}: {e(crash.type)}: {e(crash.message)} "
                        f"<span class=\"dim\">({e(crash.phase)}, step {e(crash.step)})</span>")
    origin = run.origin or run.first_nonfinite_site
    module = run.first_nonfinite_module
    if status == "inf/NaN" or (run.level == "O0" and origin):
        parts = []
        if origin:
            expr = f" in <code>{e(origin.expr)}</code>" if origin.expr else ""
            step = f", step {e(origin.step)}" if origin.step else ""
            parts.append(f"first non-finite at <code class=\"loc\">{e(_where(origin.file, origin.line, origin.column))}</code>"
                         f"{expr} <span class=\"dim\">({e(origin.op)}{step})</span>")
        if module:
            parts.append(f"module {_module_label(run, module)}")
        if not parts:
            parts.append("the loss is not finite")
        return status, ", ".join(parts)
    skipped = mostly_skipped(run)
    if skipped:
        return status, e(skipped)
    return status, "ok" if run.level != "O0" else "ok (the fp32 reference)"


def _loss_text(run: LevelRun) -> str:
    losses = run.losses
    return f"{num(losses[0])} → {num(losses[-1])}" if losses else "-"


def _verdicts(report: VerifyReport) -> str:
    views = [("original code", report.before)] + ([("after the fixes", report.after)] if report.after else [])
    rows = []
    for title, runs in views:
        if len(views) > 1:
            rows.append(f'<tr class="view"><th colspan="4">{e(title)}</th></tr>')
        for level, run in runs.items():
            status, text = level_verdict(run)
            cls = "good" if status == "ok" else "bad"
            err = "reference" if level == "O0" else num(run.output_rel_err)
            rows.append(f'<tr class="level-row {cls}" data-level="{e(level)}" data-view="{e(title)}">'
                        f'<td class="lvl"><span class="swatch" style="background:{LEVEL_COLORS.get(level, "#555")}"></span>{e(level)}</td>'
                        f'<td><span class="pill {cls}">{e(status)}</span></td><td class="headline">{text}</td>'
                        f'<td class="dim nowrap">loss {e(_loss_text(run))}<br>output vs fp32 {e(err)}</td></tr>')
    return f'<table class="verdicts">{"".join(rows)}</table>'


def _result(report: VerifyReport) -> str:
    from .report_text import _why

    from .report_text import _safe_tail

    if report.exit_status == 0:
        return f'<p class="result good">{e("safe at the selected levels" + _safe_tail(report))}</p>'
    return f'<p class="result bad">NOT safe: {e(_why(report))}</p>'


# --- 2. cards ---------------------------------------------------------------------------------

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@")


def diff_hunks(diff: str, start: int, end: int) -> list[list[str]]:
    """The hunks of a unified diff whose original lines overlap ``start..end``."""
    hunks: list[list[str]] = []
    current, covers = None, False
    for line in diff.splitlines():
        m = _HUNK.match(line)
        if m:
            if current is not None and covers:
                hunks.append(current)
            first = int(m.group(1))
            count = int(m.group(2)) if m.group(2) is not None else 1
            current, covers = [line], first <= end and start <= first + max(count, 1) - 1
        elif current is not None:
            current.append(line)
    if current is not None and covers:
        hunks.append(current)
    return hunks


def _diff_html(hunks: list[list[str]]) -> str:
    out = []
    for hunk in hunks:
        for line in hunk:
            cls = "hunk" if line.startswith("@@") else "add" if line.startswith("+") else "del" if line.startswith("-") else "ctx"
            out.append(f'<span class="{cls}">{e(line)}</span>')
    return '<pre class="diff">' + "".join(out) + "</pre>"  # each line is a block


def _evidence_list(items: Optional[list], empty: str) -> str:
    if not items:
        return f'<p class="dim">{e(empty)}</p>'
    return "<ul>" + "".join(f"<li><b>{e(x.level)} {e(x.kind)}</b>: {e(x.detail)}</li>" for x in items) + "</ul>"


def _finding_card(f: VerifyFinding, report: VerifyReport) -> str:
    status = f.status
    cls = STATUS_CLASS.get(status, "muted")
    where = _where(f.path, f.line, f.column)
    body = [f'<p class="message">{e(f.message)}</p>']
    before = "Runtime evidence" + (" (original code)" if report.after else "")
    if f.reached_after_fix:
        before = "Runtime evidence (reached only after the fixes removed an earlier crash)"
    if status == "not executed":
        body.append(f'<h4>{e(before)}</h4><p class="dim">not executed: {e(f.not_executed)}</p>')
    else:
        body.append(f"<h4>{e(before)}</h4>" + _evidence_list(
            f.evidence, "its expression ran; no crash, inf/NaN, underflow or divergence in it with these inputs"))
    if f.after_evidence is not None and not f.reached_after_fix:
        fixed = ("its own fix was applied" if f.fixed_by_lint
                 else "its display fix was made by the verifier for this run only; your files are unchanged"
                 if f.fix == "display" else "no fix was applied to it")
        if f.after_crash:
            fixed += "; the fixed run crashed at " + ", ".join(f.after_crash)
        body.append(f"<h4>After the fixes <span class=\"dim\">({e(fixed)})</span></h4>"
                    + _evidence_list(f.after_evidence, "no failure in this expression"))
    diff = (report.fixed_files or {}).get(f.path)
    hunks = diff_hunks(diff, f.line, f.end_line or f.line) if diff else []
    if hunks:
        body.append("<h4>The fix</h4>" + _diff_html(hunks))
    elif f.fix and f.fix_description:
        body.append(f'<p class="dim">fix ({e(f.fix)}{", not applied" if report.fix else ", not tried: run with --fix"}): '
                    f'{e(f.fix_description)}</p>')
    return (f'<article class="card finding {cls}" data-code="{e(f.code)}" data-status="{e(status)}">'
            f'<header><span class="code">{e(f.code)}</span> {e(f.rule)} <code class="loc">{e(where)}</code>'
            f'<span class="pill {cls}">{e(status)}</span></header>{"".join(body)}</article>')


def _problem_card(p: Problem) -> str:
    where = _where(p.file, p.line, p.column) if p.file else ""
    return (f'<article class="card runtime bad" data-level="{e(p.level)}"><header><span class="code">{e(p.level)}</span> '
            f'{e(p.kind)} <code class="loc">{e(where)}</code><span class="pill bad">no rule predicted it</span></header>'
            f'<p class="message">{e(p.detail)}</p></article>')


def _cards(report: VerifyReport) -> str:
    findings = sorted(report.findings or [], key=lambda f: (
        _STATUS_ORDER.index(f.status) if f.status in _STATUS_ORDER else 9, f.path, f.line))
    shown = [f for f in findings if f.status not in ("not reproduced", "not executed")]
    quiet = [f for f in findings if f.status in ("not reproduced", "not executed")]
    out = [_finding_card(f, report) for f in shown]
    out += [_problem_card(p) for p in report.runtime_only or []]
    if quiet:
        out.append(f'<details class="quiet-findings"><summary>{len(quiet)} finding{"s" if len(quiet) != 1 else ""} '
                   f'not reproduced or not executed</summary>{"".join(_finding_card(f, report) for f in quiet)}</details>')
    if not out:
        return '<p class="dim">No static findings in the model\'s source files, and no runtime problems.</p>'
    return "".join(out)


# --- 3. the range chart -----------------------------------------------------------------------

class _Scale:
    """log10 positions, in percent of a track's width."""

    def __init__(self, limits: dict, values: list[float]):
        lo = math.log10(limits["subnormal"]) - 1
        hi = math.log10(limits["max"]) + 1
        for v in values:
            if _finite(v) and v > 0:
                lo, hi = min(lo, math.floor(math.log10(v))), max(hi, math.ceil(math.log10(v)))
        self.lo, self.hi = max(lo, -45), min(hi, 40)

    def x(self, v: float) -> float:
        if not _finite(v) or v <= 0:
            return 0.0
        return min(100.0, max(0.0, (math.log10(v) - self.lo) / (self.hi - self.lo) * 100))

    def ticks(self) -> list[int]:
        step = max(1, round((self.hi - self.lo) / 8))
        return list(range(math.ceil(self.lo), math.floor(self.hi) + 1, step))


def _track(stats, scale: _Scale, limits: dict, color: str) -> str:
    """``stats``: a :class:`TensorStats` or an :class:`OutputRange`."""
    parts = [f'<span class="limit {cls}" style="left:{scale.x(v):.2f}%"></span>'
             for cls, v in (("max", limits["max"]), ("normal", limits["normal"]), ("subnormal", limits["subnormal"]))]
    top, low = stats.absmax, stats.min_nonzero
    nonfinite = (stats.inf or 0) + (stats.nan or 0)
    if _finite(top) and top > 0:
        x1, x2 = scale.x(low if _finite(low) and low > 0 else top), scale.x(top)
        if stats.inf:  # values overflowed: the bar crosses the max line to the edge
            x2 = 100.0
        parts.append(f'<span class="bar" style="left:{x1:.2f}%;width:{max(0.6, x2 - x1):.2f}%;background:{color}"></span>')
    if nonfinite:
        label = " ".join(x for x in (f"{stats.inf} inf" if stats.inf else "", f"{stats.nan} NaN" if stats.nan else "") if x)
        parts.append(f'<span class="overflow">{e(label)}</span>')
    return '<div class="track">' + "".join(parts) + "</div>"


def _range_text(stats) -> str:
    text = f"{num(stats.min_nonzero)} … {num(stats.absmax)}"
    return e(text)


def _notable(stats: TensorStats, limits: dict, tolerance: float) -> list[str]:
    """Why a module's output deserves a row even away from the failure."""
    why = []
    top, low = stats.absmax, stats.min_nonzero
    if _finite(top) and top > limits["max"] / 8:
        why.append("near max")
    if _finite(low) and 0 < low < limits["normal"]:
        why.append("subnormal")
    if (stats.underflow or 0) >= 0.01:
        why.append(f"{stats.underflow:.0%} underflow")
    err = stats.rel_err
    if _finite(err) and err > tolerance:
        why.append(f"err {num(err)}")
    return why


def _module_row(mod: ModuleStats, table: str, scale, limits, color, classes: str = "", tags: tuple = ()) -> str:
    stats = getattr(mod, table)
    cls = mod.class_name.rsplit(".", 1)[-1]
    tag_html = "".join(f'<span class="tag {t_cls}">{e(t)}</span>' for t_cls, t in tags)
    return (f'<div class="row {classes}" data-module="{e(mod.name)}"><div class="label" title="{e(mod.class_name)}">'
            f'<span class="name">{e(mod.name)}</span> <span class="cls">{e(cls)}</span>{tag_html}</div>'
            f'{_track(stats, scale, limits, color)}<div class="value">{_range_text(stats)}</div></div>')


def _collapsed(rows: list[str], summary: str, cls: str) -> str:
    if not rows:
        return ""
    return f'<details class="collapsed {cls}"><summary>{e(summary)}</summary>{"".join(rows)}</details>'


def _axis(scale: _Scale, limits: dict) -> str:
    ticks = "".join(f'<span class="tick" style="left:{scale.x(10.0 ** d):.2f}%">1e{d}</span>' for d in scale.ticks())
    names = "".join(f'<span class="limit-name {cls}" style="left:{scale.x(v):.2f}%">{e(name)}</span>' for cls, name, v in (
        ("max", f"max {num(limits['max'])}", limits["max"]), ("normal", "smallest normal", limits["normal"]),
        ("subnormal", "smallest subnormal", limits["subnormal"])))
    return (f'<div class="row axis"><div class="label dim">module output (forward), |x|</div>'
            f'<div class="track axis-track">{names}{ticks}</div><div class="value dim">smallest non-zero … max</div></div>')


def range_chart(run: LevelRun, limits: dict, tolerance: float, title: str) -> str:
    """One level's chart, focused on its first failure (see the module docstring)."""
    level = run.level
    color = LEVEL_COLORS.get(level, "#555")
    table = "forward"
    mods = [m for m in run.modules if m.forward.calls]
    failing = run.first_nonfinite_module
    origin = run.origin
    crash = run.crash
    grad_failure = None
    if not crash and not failing and not origin:
        # a finite forward whose gradients overflowed (the loss scaler skipped the steps)
        bad = [m for m in run.modules if m.grad.calls and m.grad.first_new_nonfinite is not None]
        if bad and level != "O0":
            table = "grad"
            mods = [m for m in run.modules if m.grad.calls]
            grad_failure = min(bad, key=lambda m: tuple(m.grad.first_new_nonfinite)).name
            failing = grad_failure
    values = [v for m in mods for v in (getattr(m, table).absmax, getattr(m, table).min_nonzero)]
    if origin and origin.output:
        values += [origin.output.absmax, origin.output.min_nonzero]
    scale = _Scale(limits, values)
    if table == "grad":  # gradients flow back: the first to overflow is reached last in forward order
        mods = sorted(mods, key=lambda m: tuple(m.grad.first_new_nonfinite or (math.inf, math.inf)))
    else:  # in the order they first returned
        order = {m.name: (m.forward.order if m.forward.order is not None else i) for i, m in enumerate(mods)}
        mods = sorted(mods, key=lambda m: order[m.name])
    rows, before, after = [], [], []
    names = [m.name for m in mods]
    index = names.index(failing) if failing in names else (len(mods) if crash else None)
    first_failure_marked = False
    for i, mod in enumerate(mods):
        stats = getattr(mod, table)
        why = _notable(stats, limits, tolerance)
        tags = tuple(("note", w) for w in why)
        if index is None:  # no failure at this level: the notable rows, the rest collapsed
            (rows if why else before).append(_module_row(mod, table, scale, limits, color, "", tags))
            continue
        if i < index:
            keep = why or i >= index - CONTEXT_ROWS
            (rows if keep else before).append(_module_row(mod, table, scale, limits, color, "", tags))
        elif i == index:
            what = "first inf/NaN in the gradients" if table == "grad" else "first inf/NaN"
            rows.append(_module_row(mod, table, scale, limits, color, "first-failure", (("first", what),) + tags))
            first_failure_marked = True
            if origin and table == "forward":
                rows.append(_origin_row(origin, scale, limits, color))
        else:
            carried = (stats.inf or 0) + (stats.nan or 0) > 0
            after.append(_module_row(mod, table, scale, limits, color, "propagated" if carried else "",
                                     (("carried", "inf/NaN carried on"),) if carried else tags))
    if origin and not first_failure_marked and table == "forward":
        rows.append(_origin_row(origin, scale, limits, color, first=True))
        first_failure_marked = True
    if crash:
        where = _where(crash.file, crash.line)
        expr = crash_expression(crash)
        code = f" <code>{e(expr)}</code>" if expr else ""
        rows.append(f'<div class="row first-failure crash"><div class="label"><span class="name">crash</span>'
                    f'<span class="tag first">{e(crash.phase)}, step {e(crash.step)}</span></div>'
                    f'<div class="crash-text"><code class="loc">{e(where)}</code>{code}<br>{e(crash.type)}: {e(crash.message)}</div></div>')
    head = [_axis(scale, limits)]
    if table == "grad":
        head[0] = head[0].replace("module output (forward), |x|", "module output gradient, |g|")
    earlier = _collapsed(before, f"{len(before)} {'earlier ' if index is not None else ''}module{'s' if len(before) != 1 else ''}"
                         f" with nothing notable", "earlier")
    later = _collapsed(after, f"{len(after)} later module{'s' if len(after) != 1 else ''}"
                       + (" (the inf/NaN carried on from the first failure)" if any("propagated" in r for r in after) else ""), "later")
    return (f'<div class="range-chart" data-level="{e(level)}" data-view="{e(title)}" data-table="{table}">'
            f'{"".join(head)}{earlier}{"".join(rows)}{later}</div>')


def _origin_row(origin: Origin, scale, limits, color, first: bool = False) -> str:
    stats = origin.output
    expr = origin.expr or origin.op
    made = "made the first inf/NaN" if origin.inputs_finite else "first inf/NaN seen here"
    where = f"line {origin.line}" + (f":{origin.column}" if origin.column else "")
    classes = "op origin" + (" first-failure" if first else "")
    track = _track(stats, scale, limits, color) if stats else '<div class="track"></div>'
    return (f'<div class="row {classes}" data-op="{e(origin.op)}"><div class="label" title="{e(expr)}">'
            f'<span class="name">↳ {e(origin.op)}</span> <code class="loc">{e(where)}</code>'
            f'<span class="tag first">{e(made)}</span></div>{track}'
            f'<div class="value">{_range_text(stats) if stats else ""}</div></div>')


def _charts(report: VerifyReport, limits: dict) -> str:
    out = []
    tolerance = report.tolerance
    views = [("original code", report.before)] + ([("after the fixes", report.after)] if report.after else [])
    for title, runs in views:
        for level, run in runs.items():
            status = level_status(run)
            chart = range_chart(run, limits, tolerance, title)
            heading = f"{level} ({title}): {status}"
            if status == "ok":
                out.append(f'<details class="chart ok"><summary>{e(heading)} — value ranges</summary>{chart}</details>')
            else:
                out.append(f'<section class="chart bad"><h4>{e(heading)}</h4>{chart}</section>')
    return "".join(out)


# --- 4. loss, loss scale, skipped steps --------------------------------------------------------

def _polyline(points: list[tuple[float, float]]) -> str:
    return " ".join(f"{x:.1f},{y:.1f}" for x, y in points)


def training_chart(level: str, runs: list[tuple[str, LevelRun]]) -> str:
    """Loss per step (top) and loss scale per step with skipped steps ringed (bottom) for one
    level; ``runs``: (view, run) pairs drawn solid (original code) and dashed (after the fixes)."""
    w, left, right, plot_h = 330, 62, 14, 62
    color = LEVEL_COLORS.get(level, "#555")
    steps = max([len(r.losses) for _, r in runs] + [len(r.loss_scales) for _, r in runs] + [1])

    def sx(i):
        return left + (i / max(steps - 1, 1)) * (w - left - right)

    def panel(top: int, title: str, series: list, log2: bool, empty: str) -> list[str]:
        """series: (dashed, values, ringed step indices)."""
        out = [f'<text x="4" y="{top + 11}" class="ttl">{e(title)}</text>']
        y0, y1 = top + 20, top + 20 + plot_h
        out.append(f'<line x1="{left}" x2="{w - right}" y1="{y1}" y2="{y1}" class="axis"/>')
        values = [v for _, vs, _ in series for v in vs if _finite(v) and (v > 0 or not log2)]
        if not values:
            out.append(f'<text x="{left}" y="{(y0 + y1) / 2:.0f}" class="ax">{e(empty)}</text>')
            return out
        f = (lambda v: math.log2(v)) if log2 else (lambda v: v)
        lo, hi = f(min(values)), f(max(values))
        if hi - lo < (1.0 if log2 else 1e-9 * max(1.0, abs(hi))):
            pad = 1.0 if log2 else 0.5 * max(abs(hi), 1e-3)
            lo, hi = lo - pad, hi + pad

        def sy(v):
            return y0 + (1 - (f(v) - lo) / (hi - lo)) * (y1 - y0)

        label = (lambda t: str(int(round(2.0 ** t))) if t >= 0 else num(2.0 ** t)) if log2 else num
        out.append(f'<text x="{left - 5}" y="{y0 + 4}" class="ax" text-anchor="end">{e(label(hi))}</text>')
        out.append(f'<text x="{left - 5}" y="{y1 + 3}" class="ax" text-anchor="end">{e(label(lo))}</text>')
        for dashed, vs, ringed in series:
            dash = ' stroke-dasharray="5 3"' if dashed else ""
            pts = [(sx(i), sy(v)) for i, v in enumerate(vs) if _finite(v) and (v > 0 or not log2)]
            if len(pts) > 1:
                out.append(f'<polyline points="{_polyline(pts)}" fill="none" stroke="{color}" stroke-width="2"{dash}/>')
            for x, y in pts:
                out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="{color}"/>')
            for i, v in enumerate(vs):
                if not _finite(v):  # at the bottom, clear of the axis labels
                    out.append(f'<text x="{max(sx(i), left + 16):.1f}" y="{y1 - 5}" class="nonfinite-loss" '
                               f'text-anchor="middle">× {e(num(v))}</text>')
                elif i in ringed:
                    out.append(f'<circle cx="{sx(i):.1f}" cy="{sy(v):.1f}" r="5.5" class="skipped"/>')
        return out

    loss_series = [(view != "original code", run.losses, ()) for view, run in runs]
    scale_series = []
    for view, run in runs:
        scales = run.loss_scales
        # the dynamic scaler halves the scale on each skipped step: those are the steps it fell at
        ringed = {i for i, v in enumerate(scales) if (i and v < scales[i - 1]) or (not i and run.skipped_steps and v < 65536)}
        scale_series.append((view != "original code", scales, ringed))
    fixed_scale = level == "O0" or all(v == 1 for _, vs, _ in scale_series for v in vs)
    svg = [f'<svg class="train" data-level="{e(level)}" width="{w}" height="{2 * (plot_h + 34) + 20}" role="img" '
           f'aria-label="loss and loss scale at {e(level)}">']
    # name what happened: a crash before any loss, or losses that were all inf/NaN
    crashed = any(run.crash and not run.losses for _, run in runs)
    svg += panel(0, f"{level} · loss", loss_series, False, "no loss (crashed before it)" if crashed else "no finite loss (inf/NaN)")
    if fixed_scale:
        svg += panel(plot_h + 34, "loss scale", [], True, "none: the fp32 reference" if level == "O0" else "static (1)")
    else:
        svg += panel(plot_h + 34, "loss scale (log) · skipped steps ringed", scale_series, True, "no optimizer steps")
    svg.append(f'<text x="{left}" y="{2 * (plot_h + 34) + 16}" class="ax">step 0</text>'
               f'<text x="{w - right}" y="{2 * (plot_h + 34) + 16}" class="ax" text-anchor="end">step {steps - 1}</text>')
    svg.append("</svg>")
    captions = []
    for view, run in runs:
        prefix = "after the fixes: " if view != "original code" else ""
        crash = run.crash
        if crash:
            captions.append(f"{prefix}crashed ({crash.phase}, step {crash.step})")
        else:
            captions.append(f"{prefix}{run.skipped_steps} of {len(run.loss_scales)} steps skipped")
    return f'<figure class="train-panel"><figcaption>{e(" · ".join(captions))}</figcaption>{"".join(svg)}</figure>'


def _training(report: VerifyReport) -> str:
    panels = []
    for level in report.before:
        runs = [("original code", report.before[level])]
        if report.after and level in report.after:
            runs.append(("after the fixes", report.after[level]))
        panels.append(training_chart(level, runs))
    legend = ' <span class="dim">(solid: original code; dashed: after the fixes)</span>' if report.after else ""
    return f'<p class="dim">Loss per training step, and the loss scale (log scale).{legend}</p><div class="panels">{"".join(panels)}</div>'


# --- 5. tables --------------------------------------------------------------------------------

def _table(cls: str, headers: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><tr>{head}</tr>{body}</table>'


def _tables(report: VerifyReport) -> str:
    from .report_text import first_problem, loss_scale_text

    out = []
    for title, runs in [("Opt levels (original code)", report.before)] + (
            [("Opt levels after the fixes", report.after)] if report.after else []):
        rows = []
        for level, run in runs.items():
            st = level_status(run)
            rows.append([e(level), f'<span class="{"good" if st == "ok" else "bad"}">{e(st)}</span>', e(_loss_text(run)),
                         e(loss_scale_text(run)), e(run.skipped_steps),
                         e("reference" if level == "O0" else num(run.output_rel_err)), e(first_problem(run)),
                         e(f"{run.seconds:.2f} s")])
        out.append(f"<h4>{e(title)}</h4>" + _table("levels", ["level", "status", "loss first→last", "loss scale", "skipped",
                                                             "output vs fp32", "first failure", "time"], rows))
    findings = report.findings or []
    if findings:
        rows = [[e(f.code), e(f.rule), e(_where(f.path, f.line)), e(f.fix or "-"),
                 f'<span class="{STATUS_CLASS.get(f.status, "")}">{e(f.status)}</span>',
                 e("; ".join(f"{x.level} {x.kind}" for x in f.evidence or []) or f.not_executed or "-")]
                for f in findings]
        out.append("<h4>Static findings</h4>" + _table("findings", ["code", "rule", "where", "fix", "status", "evidence"], rows))
    runtime = report.runtime_only or []
    if runtime:
        rows = [[e(p.level), e(p.kind), e(_where(p.file, p.line) if p.file else "-"), e(p.detail)]
                for p in runtime]
        out.append("<h4>Runtime problems no rule predicted</h4>" + _table("runtime-only", ["level", "kind", "where", "detail"], rows))
    levels = list(report.before)
    names, seen = [], {}
    for run in report.before.values():
        for m in run.modules:
            if m.name not in seen:
                seen[m.name] = m
                names.append(m.name)
    rows = []
    for name in names:
        row = [e(name), e(seen[name].class_name)]
        for level in levels:
            m = _module(report.before[level], name)
            if not m or not m.forward.calls:
                row.append("-")
                continue
            f, g = m.forward, m.grad
            bad = f.inf + f.nan
            cell = e(f"{num(f.min_nonzero)} … {num(f.absmax)}") + (f' <span class="bad">{bad} inf/NaN</span>' if bad else "")
            if g.calls:
                cell += f'<br><span class="dim">grad {e(num(g.min_nonzero))} … {e(num(g.absmax))}</span>'
                if g.inf + g.nan:
                    cell += f' <span class="bad">{g.inf + g.nan} inf/NaN</span>'
            row.append(cell)
        rows.append(row)
    out.append(f'<details class="module-table"><summary>Every module\'s output range (original code)</summary>'
               f'{_table("modules", ["module", "class"] + levels, rows)}</details>')
    return "".join(out)


def _extras(report: VerifyReport) -> str:
    out = []
    for note in report.notes or []:
        out.append(f'<p class="note"><b>note:</b> {e(note)}</p>')
    for warning in report.warnings or []:
        out.append(f'<p class="note warn"><b>warning:</b> {e(warning)}</p>')
    for err in report.lint_errors or []:
        out.append(f'<p class="note warn"><b>lint:</b> {e(err)}</p>')
    printed = (report.model_output or "").rstrip()
    if printed:
        out.append(f'<details class="model-output"><summary>Model output (its stdout and stderr while imported, built and '
                   f'trained)</summary><pre>{e(printed)}</pre></details>')
    return "".join(out)


# --- the page ---------------------------------------------------------------------------------

def _target(report: VerifyReport) -> str:
    fmt = FORMATS[report.dtype]
    limits = {"max": fmt.max, "normal": fmt.smallest_normal, "subnormal": fmt.smallest_subnormal}
    meta = (f"{report.device} · {report.dtype} (max {num(fmt.max)}, smallest normal {num(fmt.smallest_normal)}) · "
            f"{' '.join(report.levels) or 'O0 only'} against O0 · {report.steps} steps · seed {report.seed} · "
            f"tolerance {report.tolerance:g}")
    return (f'<section class="target" data-target="{e(report.target)}"><h2>{e(report.target)}</h2>'
            f'<p class="meta">{e(meta)}</p>{_result(report)}'
            f'<h3>Verdict per opt level</h3>{_verdicts(report)}'
            f'<h3>Findings</h3><div class="cards">{_cards(report)}</div>'
            f'<h3>Value ranges on the way to the first failure</h3>'
            f'<p class="dim">Per module, in the order the modules returned: smallest non-zero |x| to largest, log scale, '
            f'against the {e(report.dtype)} limits (red: max; amber: smallest normal; brown: smallest subnormal).</p>'
            f'{_charts(report, limits)}'
            f'<h3>Loss, loss scale and skipped steps</h3>{_training(report)}'
            f'<h3>Tables</h3>{_tables(report)}{_extras(report)}</section>')


def render(reports: list[VerifyReport]) -> str:
    title = "amplint verify: " + ", ".join(r.target for r in reports)
    body = "".join(_target(r) for r in reports)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{e(title)}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>{_CSS}</style></head><body>
<header class="page"><h1>amplint verify</h1>
<p class="dim">Mixed-precision run of each model at O0 (the fp32 reference) and the selected opt levels. Self-contained: no script, no network.</p></header>
{body}
</body></html>
"""


_CSS = """
:root{--bad:#c62828;--bad-bg:#fdecea;--good:#1b7f3b;--good-bg:#e6f4ea;--warn:#a15c00;--warn-bg:#fff4e0;--muted:#6b7280;
--line:#d9dde6;--first:#ffd54f;--first-bg:#fff3c4;--carried-bg:#f4f4f6}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d2330;background:#f6f7fb}
header.page{padding:18px 28px 4px}h1{font-size:21px;margin:0 0 2px}
section.target{background:#fff;margin:16px 28px;padding:18px 24px 24px;border:1px solid var(--line);border-radius:10px}
h2{font-size:18px;margin:0}h3{font-size:15px;margin:24px 0 8px;padding-bottom:4px;border-bottom:1px solid var(--line)}
h4{font-size:13px;margin:12px 0 4px}
.meta,.dim{color:var(--muted)}.nowrap{white-space:nowrap}
code{font:12.5px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;background:#f1f3f8;padding:1px 4px;border-radius:4px}
code.loc{background:none;padding:0;color:#264a9c}
.result{font-weight:600;padding:8px 12px;border-radius:6px;margin:10px 0}
.result.bad{background:var(--bad-bg);color:var(--bad)}.result.good{background:var(--good-bg);color:var(--good)}
table{border-collapse:collapse;margin:6px 0;width:100%}
td,th{border-bottom:1px solid var(--line);padding:5px 8px;text-align:left;vertical-align:top}
th{background:#f1f3f8;font-weight:600}
table.verdicts td.lvl{font-weight:700;white-space:nowrap;width:56px}
table.verdicts tr.view th{background:none;border-bottom:none;padding-top:10px;color:var(--muted);font-weight:600}
table.verdicts td.headline{width:70%}
.swatch{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:6px}
.pill{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12px;font-weight:600;white-space:nowrap}
.pill.bad{background:var(--bad-bg);color:var(--bad)}.pill.good{background:var(--good-bg);color:var(--good)}
.pill.warn{background:var(--warn-bg);color:var(--warn)}.pill.muted{background:#eef0f4;color:var(--muted)}
span.bad{color:var(--bad);font-weight:600}span.good{color:var(--good)}span.warn{color:var(--warn)}span.muted{color:var(--muted)}
.cards{display:grid;grid-template-columns:1fr;gap:12px;max-width:1000px}
.card{border:1px solid var(--line);border-left:5px solid var(--muted);border-radius:8px;padding:10px 14px;background:#fff}
.card.bad{border-left-color:var(--bad)}.card.warn{border-left-color:#f0a500}.card.good{border-left-color:var(--good)}
.card header{display:flex;gap:8px;align-items:baseline;flex-wrap:wrap}.card header .pill{margin-left:auto}
.card .code{font-weight:700}.card .message{margin:6px 0}.card ul{margin:2px 0;padding-left:18px}
details.quiet-findings{grid-column:1/-1}details.quiet-findings .card{margin-top:8px}
pre.diff{background:#f7f8fb;border:1px solid var(--line);border-radius:6px;padding:6px 8px;overflow-x:auto;font-size:12px;margin:4px 0}
pre.diff .add{color:#116329;background:#e6ffec;display:block}pre.diff .del{color:#82071e;background:#ffebe9;display:block}
pre.diff .hunk{color:#6e40c9;display:block}pre.diff .ctx{display:block;color:#444}
.chart{margin:10px 0}.chart h4{margin:14px 0 6px}details.chart>summary{cursor:pointer;color:var(--muted);padding:4px 0}
.range-chart{border:1px solid var(--line);border-radius:8px;padding:4px 0;background:#fff}
.range-chart .row{display:grid;grid-template-columns:300px 1fr 170px;align-items:center;min-height:24px;padding:0 10px;border-left:6px solid transparent}
.range-chart .row .label{overflow:hidden;white-space:nowrap;text-overflow:ellipsis;font-size:12.5px}
.range-chart .row .cls{color:var(--muted);font-size:11.5px}
.range-chart .row .value{font:11.5px ui-monospace,monospace;color:#444;text-align:right}
.range-chart .row.first-failure{background:var(--first-bg);border-left-color:var(--first)}
.range-chart .row.op .label{padding-left:20px}.range-chart .row.op .name{font-weight:600}
.range-chart .row.propagated .name{color:var(--muted)}
.range-chart .row.crash{grid-template-columns:300px 1fr;padding-top:6px;padding-bottom:6px}
.range-chart .crash-text{color:var(--bad);font-size:12.5px}
.track{position:relative;height:20px;margin:0 8px}
.track .limit{position:absolute;top:-2px;bottom:-2px;width:0;border-left:1.5px dashed}
.limit.max{border-color:var(--bad)}.limit.normal{border-color:#f0a500}.limit.subnormal{border-color:#795548}
.track .bar{position:absolute;top:6px;height:8px;border-radius:3px;opacity:.9}
.track .overflow{position:absolute;right:0;top:2px;font-size:11px;font-weight:700;color:#fff;background:var(--bad);padding:0 4px;border-radius:3px}
.row.axis{min-height:34px;border-bottom:1px solid var(--line)}
.axis-track{height:30px}.axis-track .tick{position:absolute;bottom:0;font-size:10.5px;color:var(--muted);transform:translateX(-50%)}
.axis-track .limit-name{position:absolute;top:0;font-size:10.5px;font-weight:600;transform:translateX(-50%);white-space:nowrap}
.limit-name.max{color:var(--bad)}.limit-name.normal{color:var(--warn)}.limit-name.subnormal{color:#795548}
.tag{display:inline-block;margin-left:6px;padding:0 6px;border-radius:8px;font-size:11px;font-weight:600;line-height:16px;white-space:nowrap}
.tag.first{background:var(--bad);color:#fff}.tag.note{background:var(--warn-bg);color:var(--warn)}
.tag.carried{background:#e6e8ee;color:var(--muted)}
details.collapsed>summary{cursor:pointer;color:var(--muted);font-size:12.5px;padding:3px 16px;list-style-position:inside}
details.collapsed .row{opacity:.85}
.panels{display:flex;flex-wrap:wrap;gap:14px}
figure.train-panel{margin:0;border:1px solid var(--line);border-radius:8px;padding:6px 8px;background:#fff}
figure.train-panel figcaption{font-size:12px;color:var(--muted)}
svg.train text{font:11px system-ui,sans-serif}svg.train .ttl{font-weight:600}svg.train .ax{fill:var(--muted)}
svg.train line.axis{stroke:var(--line)}svg.train circle.skipped{fill:none;stroke:var(--bad);stroke-width:2}
svg.train .nonfinite-loss{fill:var(--bad);font-weight:700}
details.module-table>summary{cursor:pointer;margin-top:10px}
.note{background:#eef4ff;border-radius:6px;padding:6px 10px}.note.warn{background:var(--warn-bg)}
details.model-output pre{background:#1d2330;color:#e8eaf0;padding:8px 10px;border-radius:6px;overflow-x:auto}
"""
