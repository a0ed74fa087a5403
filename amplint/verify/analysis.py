"""Which static findings came true at runtime, which fixes removed them, and what the rules
missed.

Evidence for a finding at one opt level is looked up on the finding's own source lines:

* ``crash``      the level crashed and the innermost user frame is on the finding's lines;
* ``inf/NaN``    a torch call on those lines produced more inf/NaN values than under O0 (or the
                 first module with new inf/NaN was built on those lines);
* ``underflow``  values that are non-zero in fp32 are zero here (at least 1 % of them);
* ``divergence`` the call's result differs from fp32 by more than the tolerance;
* ``fp32 path``  (AMP4xx: op coverage) the call ran in fp32 at a level that should run it in half;
* ``slow path``  (AMP201: alignment) a layer built on those lines ran a half GEMM with a
                 dimension that is not a multiple of 8.
"""
from __future__ import annotations

import math
from typing import Optional

from .runner import UNDERFLOW_FRACTION

HALF_DTYPES = ("float16", "bfloat16")
_GEMM_OPS = frozenset("linear matmul mm bmm einsum addmm baddbmm conv1d conv2d conv3d __matmul__ __rmatmul__".split())


def _in(item_file, item_line, path, start, end) -> bool:
    return item_file == path and item_line is not None and start <= item_line <= end


def _op_named(message: str) -> Optional[str]:
    """The op a finding's message names first (`torch.einsum` -> einsum), if any."""
    import re

    m = re.search(r"`([A-Za-z_][\w.]*)`", message or "")
    return m.group(1).rsplit(".", 1)[-1] if m else None


def evidence(code: str, path: str, start: int, end: int, level: str, run: dict, tolerance: float,
             message: str = "") -> list[dict]:
    """Evidence that a finding (``code`` on ``path`` lines ``start..end``) manifested in ``run``."""
    out: list[dict] = []
    named = _op_named(message) if code.startswith("AMP4") else None
    if named and not any(s["op"] == named and _in(s["file"], s["line"], path, start, end) for s in run.get("sites", ())):
        named = None
    crash = run.get("crash")
    if crash and _in(crash.get("file"), crash.get("line"), path, start, end):
        out.append({"level": level, "kind": "crash", "detail": f"{crash['type']}: {crash['message']}", "line": crash["line"]})
    for site in run.get("sites", ()):
        if not _in(site["file"], site["line"], path, start, end):
            continue
        where = f"{site['op']} at line {site['line']}"
        if site["new_nonfinite"]:
            out.append({"level": level, "kind": "inf/NaN", "detail": f"{where}: {site['inf']} inf, {site['nan']} NaN (none in fp32)", "line": site["line"]})
        if site["underflow"] is not None and site["underflow"] >= UNDERFLOW_FRACTION:
            out.append({"level": level, "kind": "underflow", "detail": f"{where}: {site['underflow']:.1%} of values are 0 here but not in fp32", "line": site["line"]})
        if site["rel_err"] is not None and site["rel_err"] > tolerance and not site["new_nonfinite"]:
            out.append({"level": level, "kind": "divergence", "detail": f"{where}: relative error {_num(site['rel_err'])} > {tolerance:g}", "line": site["line"]})
        if code.startswith("AMP4") and level != "O0" and "float32" in site["dtypes"] and site["op"] not in ("to", "float") \
                and (named is None or site["op"] == named):
            out.append({"level": level, "kind": "fp32 path", "detail": f"{where} ran in float32 at {level}", "line": site["line"]})
    for mod in run.get("modules", ()):
        built = mod.get("constructed")
        if not built or not _in(built["file"], built["line"], path, start, end):
            continue
        fwd = fwd_dtypes = mod["forward"]
        fwd_dtypes = fwd["dtypes"]
        if fwd["first_new_nonfinite"] is not None:
            out.append({"level": level, "kind": "inf/NaN", "detail": f"module {mod['name']} output: {fwd['inf']} inf, {fwd['nan']} NaN", "line": built["line"]})
        # dimensions of 8 or more that are not multiples of 8 (a 1-wide head is a GEMV anyway)
        unaligned = [n for n in (mod.get("weight_shape") or [])[:2] if n >= 8 and n % 8]
        if code == "AMP201" and unaligned and any(d in HALF_DTYPES for d in fwd_dtypes):
            out.append({"level": level, "kind": "slow path", "detail": f"{mod['name']} ({mod['class']}) ran in {'/'.join(d for d in fwd_dtypes if d in HALF_DTYPES)} with weight {mod.get('weight_shape')} ({', '.join(map(str, unaligned))} not a multiple of 8)", "line": built["line"]})
    # the first module with new inf/NaN, when no line-level trace points elsewhere
    first = run.get("first_nonfinite_module")
    if first and not run.get("first_nonfinite_site") and not any(e["kind"] == "inf/NaN" for e in out):
        for mod in run.get("modules", ()):
            src = mod.get("source")
            if mod["name"] == first and src and src["file"] == path and src["line"] <= start <= (src.get("end_line") or src["line"]):
                out.append({"level": level, "kind": "inf/NaN", "detail": f"first inf/NaN in module {first} ({mod['class']})", "line": start})
    return _dedupe(out)


def _dedupe(items: list[dict]) -> list[dict]:
    seen, out = set(), []
    for e in items:
        key = (e["level"], e["kind"])
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


def problems(runs: dict[str, dict], tolerance: float) -> list[dict]:
    """Runtime problems at each non-reference level (and an O0 that itself fails)."""
    out: list[dict] = []
    for level, run in runs.items():
        crash = run.get("crash")
        if crash:
            out.append({"level": level, "kind": "crash", "file": crash.get("file"), "line": crash.get("line"),
                        "detail": f"{crash['type']}: {crash['message']} (during {crash['phase']}, step {crash['step']})"})
            continue
        if level == "O0":
            site = run.get("first_nonfinite_site")
            if run.get("nonfinite_loss") or site:
                where = f" (first NaN: {site['op']} at line {site['line']})" if site else ""
                out.append({"level": level, "kind": "inf/NaN", "file": site["file"] if site else None,
                            "line": site["line"] if site else None,
                            "detail": f"NaN in the fp32 (O0) run itself{where}: not a mixed-precision problem"})
            continue
        site = run.get("first_nonfinite_site")
        module = run.get("first_nonfinite_module")
        if site or module:
            where = f"first in module {module}" if module else ""
            if site:
                where += (", " if where else "") + f"{site['op']} at line {site['line']}"
            out.append({"level": level, "kind": "inf/NaN", "file": site["file"] if site else _module_file(run, module),
                        "line": site["line"] if site else _module_line(run, module), "module": module,
                        "detail": f"inf/NaN in the forward pass ({where})"})
        elif run.get("nonfinite_loss"):
            out.append({"level": level, "kind": "inf/NaN", "file": None, "line": None, "detail": "the loss is not finite"})
        err = run.get("output_rel_err")
        if err is not None and err > tolerance and not (site or module):
            out.append({"level": level, "kind": "divergence", "file": None, "line": None,
                        "detail": f"model output differs from fp32 by {_num(err)} (tolerance {tolerance:g})"})
        for mod in run.get("modules", ()):
            uf = mod["forward"]["underflow"]
            if uf is not None and uf >= UNDERFLOW_FRACTION and mod["forward"]["underflow_count"] > 0:
                out.append({"level": level, "kind": "underflow", "file": _module_file(run, mod["name"]), "line": _module_line(run, mod["name"]),
                            "module": mod["name"], "detail": f"{uf:.1%} of {mod['name']}'s outputs are 0 here but not in fp32"})
                break
    return out


def _module(run, name):
    for mod in run.get("modules", ()):
        if mod["name"] == name:
            return mod
    return None


def _module_file(run, name):
    mod = _module(run, name)
    if not mod:
        return None
    if mod.get("source"):
        return mod["source"]["file"]
    return (mod.get("constructed") or {}).get("file")


def _module_line(run, name):
    mod = _module(run, name)
    if not mod:
        return None
    if mod.get("source"):
        return mod["source"].get("forward_line") or mod["source"]["line"]
    return (mod.get("constructed") or {}).get("line")


def failing(runs: dict[str, dict]) -> list[str]:
    """Levels that crash or produce inf/NaN in the forward pass or the loss."""
    bad = []
    for level, run in runs.items():
        if run.get("crash") or run.get("nonfinite_loss") or (level != "O0" and (run.get("first_nonfinite_site") or run.get("first_nonfinite_module"))):
            bad.append(level)
    return bad
