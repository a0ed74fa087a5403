"""Which static findings came true at runtime, which fixes removed them, and what the rules
missed.

Evidence for a finding at one opt level comes only from what happened *inside the finding's
own expression* (its line and column span; the per-expression trace records the span of
every torch call), and only of the finding's kind:

* ``crash``      the level crashed and the innermost user frame's expression overlaps it;
* ``inf/NaN``    the *origin* of the level's first inf/NaN -- the first torch call whose
                 inputs were finite and whose output has inf/NaN the fp32 run has not -- lies
                 in it.  Calls that only propagate inf/NaN made elsewhere never count;
* ``underflow``  values that are non-zero in fp32 are zero here (at least 1 % of them);
* ``divergence`` the call's result differs from fp32 by more than the tolerance (neither
                 counts for a call that got an inf/NaN input: ``x / (std + eps)`` is 0 when
                 ``std`` overflowed, whatever the epsilon);
* ``fp32 path``  (AMP4xx: op coverage) the call ran in fp32 at a level that should run it in half;
* ``slow path``  (AMP201: alignment) a layer built on those lines ran a half GEMM with a
                 dimension that is not a multiple of 8.

A finding whose span is itself the hazardous call (a softmax or reduction in half, a
hand-written softmax, an uncovered op) is confirmed only by that op: the ``/`` that divides
by a vanished epsilon on the same line is not the ``.pow()`` finding's overflow.  Findings on
a literal (an overflowing constant, an epsilon) are confirmed by the calls that contain it
(an origin or a crash), or by the underflow or divergence of the innermost of them, the call
the literal is an operand of: ``(x - mean) / (std + eps) * g`` -- the ``+``, whose zeros or
errors are the epsilon's, not the ``*`` that carries a division by an overflowed ``std`` on.
"""
from __future__ import annotations

import math
import re
from typing import Optional

from .records import (Evidence, LevelRun, ModuleProblem, ModuleStats, OriginEvidence, OriginProblem, Problem,
                      ReferenceProblem, Site)
from .runner import UNDERFLOW_FRACTION

HALF_DTYPES = ("float16", "bfloat16")
#: codes whose span is the hazardous call itself: only that op's own results are evidence
_OP_CODES = ("AMP301", "AMP302", "AMP303", "AMP4")
#: torch names of one operation -> the name findings use
_OP_ALIASES = {"truediv": "div", "true_divide": "div", "rtruediv": "div", "matmul": "matmul", "rmatmul": "matmul",
               "_softmax": "softmax", "special_softmax": "softmax", "linalg_vector_norm": "norm", "vector_norm": "norm"}


def op_name(name: str) -> str:
    """``__truediv__`` -> div, ``__pow__`` -> pow, ``torch.softmax`` -> softmax."""
    name = name.rsplit(".", 1)[-1].strip("_")
    if name.startswith("r") and name[1:] in ("add", "sub", "mul", "truediv", "pow", "matmul"):
        name = name[1:]
    if name.startswith("i") and name[1:] in ("add", "sub", "mul", "truediv", "pow"):
        name = name[1:]
    name = name.rstrip("_")
    return _OP_ALIASES.get(name, name)


def named_op(code: str, message: str) -> Optional[str]:
    """The op a finding is about, for findings whose span is that op (`torch.einsum`, `.pow()`)."""
    if not code.startswith(_OP_CODES):
        return None
    m = re.search(r"`\.?([A-Za-z_][\w.]*)(?:\(.*?\))?`", message or "")
    return op_name(m.group(1)) if m else None


def span_of(finding) -> tuple:  # a VerifyFinding
    """(path, line, column, end_line, end_column) of a finding; columns may be None."""
    return (finding.path, finding.line, finding.column, finding.end_line or finding.line,
            finding.end_column)


def overlaps(item, span: tuple, columns: bool = True) -> bool:
    """Whether a trace item (a :class:`Site`, :class:`Crash` or :class:`Origin`) lies in, or
    contains, the span.

    Columns are used when both sides have them (1-based, end exclusive); else lines."""
    path, line, col, end_line, end_col = span
    if item.file != path or item.line is None:
        return False
    i_line, i_end = item.line, item.end_line or item.line
    i_col, i_end_col = item.column, item.end_column
    if not columns or None in (col, end_col, i_col, i_end_col):
        return i_line <= end_line and line <= i_end
    return (i_line, i_col) < (end_line, end_col) and (line, col) < (i_end, i_end_col)


def _contains(item, span: tuple, columns: bool = True) -> bool:
    """Whether a trace item's span holds all of ``span`` (by lines when either side has
    no columns)."""
    path, line, col, end_line, end_col = span
    i_line, i_end = item.line, item.end_line or item.line
    i_col, i_end_col = item.column, item.end_column
    if not columns or None in (col, end_col, i_col, i_end_col):
        return i_line <= line and end_line <= i_end
    return (i_line, i_col) <= (line, col) and (end_line, end_col) <= (i_end, i_end_col)


def _own_op(item_op: Optional[str], named: Optional[str]) -> bool:
    return named is None or (item_op is not None and op_name(item_op) == named)


def evidence(finding, level: str, run: LevelRun, tolerance: float, columns: bool = True) -> list[Evidence]:
    """Evidence that ``finding`` (a :class:`~amplint.verify.records.VerifyFinding`)
    manifested in ``run``.  ``columns=False`` matches by lines only (a fixed
    copy, whose columns differ from the original's on the lines a fix changed)."""
    code, message = finding.code, finding.message
    span = span_of(finding)
    path, start, _, end, _ = span
    out: list[Evidence] = []
    named = named_op(code, message)
    if named and code.startswith("AMP4") and not any(
            op_name(s.op) == named and overlaps(s, span, columns) for s in run.sites):
        named = None  # the op is reached through a wrapper on the finding's line
    crash = run.crash
    if crash and overlaps(crash, span, columns) and (not code.startswith(_OP_CODES) or _contains(crash, span, columns)):
        # an op finding (softmax in half) is shown by a crash of that op, not by one of an
        # expression inside it: torch.softmax(s.masked_fill(m, -1e9), -1) crashing in
        # masked_fill is AMP101's evidence, not AMP301's
        out.append(Evidence(level, "crash", f"{crash.type}: {crash.message}", crash.line))
    origin = run.origin
    if origin and overlaps(origin, span, columns) and _own_op(origin.op, named):
        expr = f" `{origin.expr}`" if origin.expr else ""
        out.append(OriginEvidence(level, "inf/NaN", f"first inf/NaN made by {origin.op}{expr} at line {origin.line} (inputs finite)"
                                  if origin.inputs_finite else f"first new inf/NaN in {origin.op}{expr} at line {origin.line}",
                                  origin.line))
    traced = bool(run.sites) or origin is not None
    sites = [s for s in run.sites if overlaps(s, span, columns) and _own_op(s.op, named)]
    if named is None and not code.startswith("AMP4"):
        sites = _innermost(sites)
    for site in sites:
        where = f"{site.op} at line {site.line}"
        if site.inputs_nonfinite and not code.startswith("AMP4"):
            # an inf/NaN input (made elsewhere, e.g. a variance that overflowed): x / inf is 0
            # whatever the epsilon beside it, so these zeros and errors are not this finding's
            continue
        if site.underflow is not None and site.underflow >= UNDERFLOW_FRACTION:
            out.append(Evidence(level, "underflow", f"{where}: {site.underflow:.1%} of values are 0 here but not in fp32", site.line))
        if site.rel_err is not None and site.rel_err > tolerance and not site.new_nonfinite:
            out.append(Evidence(level, "divergence", f"{where}: relative error {_num(site.rel_err)} > {tolerance:g}", site.line))
        if code.startswith("AMP4") and level != "O0" and "float32" in site.dtypes and site.op not in ("to", "float"):
            out.append(Evidence(level, "fp32 path", f"{where} ran in float32 at {level}", site.line))
    for mod in run.modules:
        built = mod.constructed
        if not built or not (built.file == path and start <= built.line <= end):
            continue
        fwd = mod.forward
        fwd_dtypes = fwd.dtypes
        if not traced and fwd.first_new_nonfinite is not None:
            # no per-expression trace (--no-trace): the module built here is all there is
            out.append(Evidence(level, "inf/NaN", f"module {mod.name} output: {fwd.inf} inf, {fwd.nan} NaN", built.line))
        # dimensions of 8 or more that are not multiples of 8 (a 1-wide head is a GEMV anyway)
        unaligned = [n for n in (mod.weight_shape or [])[:2] if n >= 8 and n % 8]
        if code == "AMP201" and unaligned and any(d in HALF_DTYPES for d in fwd_dtypes):
            out.append(Evidence(level, "slow path", f"{mod.name} ({mod.class_name}) ran in {'/'.join(d for d in fwd_dtypes if d in HALF_DTYPES)} with weight {mod.weight_shape} ({', '.join(map(str, unaligned))} not a multiple of 8)", built.line))
    # without the trace: the first module with new inf/NaN, when its class spans the finding
    first = run.first_nonfinite_module
    if first and not traced and not any(e.kind == "inf/NaN" for e in out):
        for mod in run.modules:
            src = mod.source
            if mod.name == first and src and src.file == path and src.line <= start <= (src.end_line or src.line):
                out.append(Evidence(level, "inf/NaN", f"first inf/NaN in module {first} ({mod.class_name})", start))
    return _dedupe(out)


def _innermost(sites: list[Site]) -> list[Site]:
    """The calls a literal is a direct operand of: of the calls containing it, those that
    contain no other.  ``(x - mean) / (std + eps) * g``: the ``+``, not the ``/`` or the
    ``*`` that only carry its result on (and whatever else went wrong on the line)."""
    def bounds(s):
        if s.column is None or s.end_column is None:
            return None
        return (s.line, s.column), (s.end_line or s.line, s.end_column)

    spans = [bounds(s) for s in sites]
    out = []
    for s, b in zip(sites, spans):
        if b is None or not any(o is not None and o != b and b[0] <= o[0] and o[1] <= b[1] for o in spans):
            out.append(s)
    return out


def _dedupe(items: list[Evidence]) -> list[Evidence]:
    seen, out = set(), []
    for e in items:
        key = (e.level, e.kind)
        if key not in seen:
            seen.add(key)
            out.append(e)
    return out


def _num(x: Optional[float]) -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and math.isinf(x):
        return "inf"
    return f"{x:.3g}"


def problems(runs: dict[str, LevelRun], tolerance: float) -> list[Problem]:
    """Runtime problems at each non-reference level (and an O0 that itself fails)."""
    out: list[Problem] = []
    for level, run in runs.items():
        crash = run.crash
        if crash:
            out.append(Problem(level, "crash", crash.file, crash.line,
                               f"{crash.type}: {crash.message} (during {crash.phase}, step {crash.step})"))
            continue
        origin = run.origin
        if level == "O0":
            site = origin or run.first_nonfinite_site
            if run.nonfinite_loss or site:
                where = f" (first NaN: {_expr(site)} at line {site.line})" if site else ""
                out.append(ReferenceProblem(level, "inf/NaN", site.file if site else None, site.line if site else None,
                                            f"NaN in the fp32 (O0) run itself{where}: not a mixed-precision problem",
                                            origin=origin))
            continue
        site = run.first_nonfinite_site
        module = run.first_nonfinite_module
        if origin:
            made = "made by" if origin.inputs_finite else "first seen in"
            where = f" (module {module})" if module and module != "(model)" else ""
            step = f" (step {origin.step}; step 0 was clean)" if origin.step else ""  # counted as crashes are
            out.append(OriginProblem(level, "inf/NaN", origin.file, origin.line,
                                     f"first inf/NaN {made} {_expr(origin)} at line {origin.line}{step}{where}",
                                     column=origin.column, module=module, origin=origin))
        elif site or module:
            where = f"first in module {module}" if module else ""
            if site:
                where += (", " if where else "") + f"{site.op} at line {site.line}"
            out.append(ModuleProblem(level, "inf/NaN", site.file if site else _module_file(run, module),
                                     site.line if site else _module_line(run, module),
                                     f"inf/NaN in the forward pass ({where})", module=module))
        elif run.nonfinite_loss:
            out.append(Problem(level, "inf/NaN", None, None, "the loss is not finite"))
        skipped = mostly_skipped(run)
        if skipped and not any(p.level == level for p in out):  # not when inf/NaN already explain it
            out.append(Problem(level, "skipped steps", None, None, skipped))
        err = run.output_rel_err
        if err is not None and err > tolerance and not (site or module or origin):
            out.append(Problem(level, "divergence", None, None,
                               f"model output differs from fp32 by {_num(err)} (tolerance {tolerance:g})"))
        made = _origin_order(run) if origin and origin.inputs_finite else None
        for mod in run.modules:
            uf = mod.forward.underflow
            if made is not None and tuple(mod.forward.first_order or (0, 0)) > made:
                continue  # zeros after the first inf/NaN: x / inf, carried on from the origin
            if uf is not None and uf >= UNDERFLOW_FRACTION and mod.forward.underflow_count > 0:
                out.append(ModuleProblem(level, "underflow", _module_file(run, mod.name), _module_line(run, mod.name),
                                         f"{uf:.1%} of {mod.name}'s outputs are 0 here but not in fp32", module=mod.name))
                break
    return out


def _origin_order(run: LevelRun) -> Optional[tuple]:
    """(step, call order) of the call that made the level's first inf/NaN (step 0's trace)."""
    origin = run.origin
    orders = [s.order for s in run.sites if s.order is not None
              and (s.file, s.line, s.op) == (origin.file, origin.line, origin.op)]
    return (0, min(orders)) if orders else None


def _expr(site) -> str:
    """`F.normalize(t, eps=1e-8)` (normalize), or the op alone when the source is unknown
    (an :class:`Origin` or a :class:`SiteRef`)."""
    return f"`{site.expr}` ({site.op})" if site.expr else site.op


def _module(run, name) -> Optional[ModuleStats]:
    for mod in run.modules:
        if mod.name == name:
            return mod
    return None


def _module_file(run, name):
    mod = _module(run, name)
    if not mod:
        return None
    if mod.source:
        return mod.source.file
    return mod.constructed.file if mod.constructed else None


def _module_line(run, name):
    mod = _module(run, name)
    if not mod:
        return None
    if mod.source:
        return mod.source.forward_line or mod.source.line
    return mod.constructed.line if mod.constructed else None


def mostly_skipped(run: LevelRun) -> Optional[str]:
    """"33 of 33 steps skipped, loss scale fell to 6.1e-05" when the loss scaler was still
    skipping at the run's last step, after the runner's extra warm-up steps: no loss scale down
    to the floor makes the gradients fit in half, so the model does not train.  Skips followed
    by applied steps are the dynamic scaler's warm-up from 2**16, not a failure."""
    scales = run.loss_scales
    if not scales or not run.last_step_skipped:
        return None
    return f"{run.skipped_steps} of {len(scales)} steps skipped, loss scale fell to {float(scales[-1]):g}"


def failing(runs: dict[str, LevelRun]) -> list[str]:
    """Levels that crash, produce inf/NaN in the forward pass or the loss, or skip most steps."""
    bad = []
    for level, run in runs.items():
        if run.crash or run.nonfinite_loss or (level != "O0" and (run.first_nonfinite_site or run.first_nonfinite_module)) \
                or mostly_skipped(run):
            bad.append(level)
    return bad
