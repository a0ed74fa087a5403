"""Ground truth for the real-model suite, from plain PyTorch runs (no amplint code runs here).

For every model of ``bench/verify_real/expected.json`` the harness factory builds the
unmodified upstream model (pinned, unpacked by ``bench/verify_real.py --fetch``), and this
script trains it 3 steps (AdamW, lr 1e-4, the mean of squares of the output as the loss:
what ``amplint verify`` does by default; O1 and O2 step on while the loss scaler still skips,
at most ``SCALER_WARMUP_STEPS`` more, and fail on skipped steps only when the last step was
skipped) in these modes, each on a fresh model:

``fp32``       the reference;
``O1``         apex's O1 casting policy emulated with a ``TorchFunctionMode`` over the lists
               apex published (apex/amp/lists/torch_overrides.py, functional_overrides.py,
               tensor_overrides.py): GEMMs and convolutions get half inputs, the fp32 list
               (softmax, norms, sums, pow, exp, log, losses...) fp32 inputs, everything else
               (einsum included: apex never listed it) runs in whatever dtypes it is given;
``O2``         ``model.half()`` with BatchNorm kept fp32, half inputs, fp32 master weights;
               O1 and O2 with apex's dynamic loss scaling, by hand (2**16, halved on inf/NaN
               gradients, the step skipped);
``autocast``   ``torch.autocast("cpu", dtype=float16)``, reported for contrast only: PyTorch's
               own autocast lists einsum, so crashes apex-style O1 has do not happen there.

Step 0's forward runs under a recorder (a ``TorchFunctionMode``) that keys every torch call
by (file, line, function, occurrence) of the nearest upstream source line, and under
``sys.settrace`` for the lines that ran.  Per finding of ``expected.json`` (code, file, line,
the finding's op, its levels) the script then reports, at each of the finding's levels:

* ``crash``      the level raised and the innermost upstream frame is the finding's line;
* ``origin``     the first call whose inputs were finite and whose output has inf/NaN that the
                 fp32 call has not is on the finding's line (and is the finding's op);
* ``underflow``  a call of the finding's op on the line has >= 1 % of its values 0 here but not
                 in fp32; ``divergence``: max |half - fp32| / max |fp32| above 1e-2 -- both
                 only for a call whose inputs matched the fp32 call's (finite, within 1e-2):
                 ``x / (std + eps)`` with an overflowed ``std`` is 0 whatever the epsilon;
* ``fp32 path``  (AMP401) the call on the line got an fp32 input at O1;
* ``ran``        whether the line ran at all (a finding at a class line: whether a line of
                 its methods ran; the class statement itself runs at import).

and the verdict these give: ``confirmed`` (any of the first four at a level), ``not
executed`` (the line ran at none of the finding's levels), else ``not reproduced``.  It
prints them next to the hand-written verdicts of ``expected.json`` and exits 1 where they
differ.  ``--fix`` also runs the same modes on copies fixed by ``amplint fix`` (the fp16 O1
and O2 settings, safe fixes, as ``verify --fix``): a confirmed finding is ``fixed`` when its
evidence is gone there and the fp32 losses moved less than 1e-2 (``expected_fix``); a finding
whose fix is display-only (AMP401's registration, a line for the training script: no file
changes) is ``fix not applied (display only)``, and the runs honour the registration, as the
training script following it (and verify) would; the
levels' outcomes after the fixes are ``level_outcomes_after``.  Level outcomes (ok / crash at file:line / inf/NaN / skipped steps) come from the same
runs.

    python bench/verify_real_truth.py                 # all models
    python bench/verify_real_truth.py --model vit_classifier --json out.json
    python bench/verify_real_truth.py --fix                      # and the fixed copies
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import importlib.util
import json
import math
import os
import sys
import traceback

import torch
from torch.overrides import TorchFunctionMode

HERE = os.path.dirname(os.path.abspath(__file__))
SUITE = os.path.join(HERE, "verify_real")
TOLERANCE = 1e-2
UNDERFLOW_FRACTION = 0.01
STEPS = 3
#: extra steps while the loss scaler still skips (apex's dynamic scaler starts at 2**16 and halves
#: on every overflow: a few skipped steps are its warm-up, and a 3-step run can end in the middle
#: of it); 2**16 reaches the 2**-14 floor in 30 halvings.  ``amplint verify`` steps on the same way.
SCALER_WARMUP_STEPS = 30

# apex's O1 lists (apex/amp/lists), by Python-level function name
APEX_HALF = frozenset("""conv1d conv2d conv3d conv_transpose1d conv_transpose2d conv_transpose3d conv_tbc prelu
linear addmm addmv addr matmul mm mv addbmm baddbmm bmm chain_matmul __matmul__ __rmatmul__""".split())
APEX_FLOAT = frozenset("""interpolate grid_sample softplus softmin log_softmax softmax layer_norm group_norm
local_response_norm normalize cosine_similarity poisson_nll_loss cosine_embedding_loss cross_entropy
hinge_embedding_loss kl_div l1_loss mse_loss smooth_l1_loss margin_ranking_loss multilabel_margin_loss
multilabel_soft_margin_loss multi_margin_loss nll_loss binary_cross_entropy_with_logits soft_margin_loss
triplet_margin_loss acos asin cosh erfinv exp expm1 log log10 log2 log1p reciprocal rsqrt sinh tan pow
__pow__ __rpow__ cumprod cumsum dist norm prod std var sum renorm""".split())
_IGNORED = frozenset("""__get__ __set__ size dim numel __len__ __bool__ __index__ __int__ __float__ item tolist
stride is_contiguous is_floating_point data_ptr element_size __format__ __repr__ __hash__ dtype device shape
requires_grad_ retain_grad register_hook detach clone""".split())


def short_name(func) -> str:
    name = getattr(func, "__name__", None) or str(func)
    return name


def op_name(name: str) -> str:
    """``__truediv__`` -> div, ``__rmatmul__`` -> matmul, ``softmax`` -> softmax."""
    name = name.strip("_")
    for prefix in ("r", "i"):
        if name.startswith(prefix) and name[1:] in ("add", "sub", "mul", "truediv", "pow", "matmul"):
            name = name[1:]
    name = name.rstrip("_")
    return {"truediv": "div", "linalg_vector_norm": "norm", "vector_norm": "norm"}.get(name, name)


def floats(obj):
    if isinstance(obj, torch.Tensor):
        if obj.is_floating_point():
            yield obj
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            yield from floats(o)
    elif isinstance(obj, dict):
        for o in obj.values():
            yield from floats(o)


def cast(obj, dtype):
    if isinstance(obj, torch.Tensor):
        return obj.to(dtype) if obj.is_floating_point() and obj.dtype != dtype else obj
    if isinstance(obj, (list, tuple)):
        return type(obj)(cast(o, dtype) for o in obj)
    if isinstance(obj, dict):
        return {k: cast(v, dtype) for k, v in obj.items()}
    return obj


def rel_err(x: torch.Tensor, ref: torch.Tensor) -> float:
    """max |x - ref| / max |ref| over the values finite in both."""
    finite = torch.isfinite(x) & torch.isfinite(ref)
    if not finite.any():
        return 0.0
    zero = torch.zeros(())
    den = float(torch.where(finite, ref.abs(), zero).amax())
    err = float(torch.where(finite, (x - ref).abs(), zero).amax())
    return err / den if den else (0.0 if err == 0 else math.inf)


class Recorder(TorchFunctionMode):
    """Every torch call, keyed by the nearest upstream source line; optionally apex's O1 casts."""

    def __init__(self, root: str, apex_o1: bool, reference: dict | None, half_extra: frozenset = frozenset()):
        super().__init__()
        self.root, self.apex_o1, self.reference = root + os.sep, apex_o1, reference
        self.half = APEX_HALF | half_extra
        self.calls: dict = {}  # key -> record
        self.counts: dict = {}
        self.origin = None
        self._files: dict = {}

    def _where(self):
        frame = sys._getframe(2)
        while frame is not None:
            code = frame.f_code
            path = self._files.get(code)
            if path is None:
                path = self._files[code] = os.path.realpath(code.co_filename)
            if path.startswith(self.root):
                return os.path.relpath(path, self.root), frame.f_lineno
            frame = frame.f_back
        return None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = short_name(func)
        if self.apex_o1 and name in self.half:
            args, kwargs = cast(args, torch.float16), cast(kwargs, torch.float16)
        elif self.apex_o1 and name in APEX_FLOAT:
            args, kwargs = cast(args, torch.float32), cast(kwargs, torch.float32)
        out = func(*args, **kwargs)
        if name in _IGNORED:
            return out
        where = self._where()
        if where is None:
            return out
        result = next(floats(out), None)
        if result is None:
            return out
        base = (where[0], where[1], op_name(name))
        k = self.counts[base] = self.counts.get(base, -1) + 1
        key = base + (k,)
        with torch.no_grad():
            in_dtypes = sorted({str(t.dtype).replace("torch.", "") for t in floats((args, kwargs))})
            inputs_finite = all(bool(torch.isfinite(t).all()) for t in floats((args, kwargs)))
            r = result.detach()
            rec = {"dtype": str(r.dtype).replace("torch.", ""), "in_dtypes": in_dtypes, "nonfinite": int((~torch.isfinite(r)).sum())}
            ins = [t.detach().float() for t in floats((args, kwargs))][:8]
            if self.reference is None:
                rec["value"] = r.float().clone()
                rec["inputs"] = [t.clone() for t in ins]
            else:
                refs = self.reference.get(key, {}).get("inputs") or []
                # its inputs as in fp32 (finite, within the tolerance): what it does wrong is its own
                rec["inputs_match"] = inputs_finite and len(refs) == len(ins) and all(
                    a.shape == b.shape and rel_err(a, b) <= TOLERANCE for a, b in zip(ins, refs))
                ref = self.reference.get(key, {}).get("value")
                if ref is not None and ref.shape == r.shape:
                    rf = r.float()
                    finite = torch.isfinite(rf) & torch.isfinite(ref)
                    rec["underflow"] = float(((rf == 0) & (ref != 0)).float().mean())
                    den = float(torch.where(finite, ref.abs(), torch.zeros(())).amax()) if finite.any() else 0.0
                    err = float(torch.where(finite, (rf - ref).abs(), torch.zeros(())).amax()) if finite.any() else 0.0
                    rec["rel_err"] = err / den if den else (0.0 if err == 0 else math.inf)
                    new_bad = (~torch.isfinite(rf)) & torch.isfinite(ref)
                    rec["new_nonfinite"] = int(new_bad.sum())
                    if self.origin is None and rec["new_nonfinite"] and inputs_finite:
                        self.origin = {"file": where[0], "line": where[1], "op": op_name(name)}
        self.calls[key] = rec
        return out


class Lines:
    """Upstream source lines that ran (``sys.settrace``, upstream frames only)."""

    def __init__(self, root):
        self.root, self.ran = root + os.sep, set()

    def _call(self, frame, event, arg):
        path = os.path.realpath(frame.f_code.co_filename)
        if not path.startswith(self.root):
            return None
        rel = os.path.relpath(path, self.root)
        self.ran.add((rel, frame.f_lineno))

        def line(frame, event, arg):
            if event == "line":
                self.ran.add((rel, frame.f_lineno))
            return line
        return line

    @contextlib.contextmanager
    def active(self):
        previous = sys.gettrace()
        sys.settrace(self._call)
        try:
            yield
        finally:
            sys.settrace(previous)


def load_harness(target: str):
    """``PATH::FACTORY`` (PATH relative to the repository root) -> the factory."""
    path, _, factory = target.partition("::")
    path = os.path.join(os.path.dirname(HERE), path)
    sys.path.insert(0, os.path.dirname(path))
    spec = importlib.util.spec_from_file_location("verify_real_" + os.path.basename(path)[:-3], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, factory or "build")


def split_inputs(inputs):
    return ((), dict(inputs)) if isinstance(inputs, dict) else (tuple(inputs), {})


def crash_site(exc, root):
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if os.path.realpath(f.filename).startswith(root + os.sep)]
    if not frames:
        return None, None
    return os.path.relpath(os.path.realpath(frames[-1].filename), root), frames[-1].lineno


def run_mode(build, mode: str, root: str, reference: dict | None, half_extra: frozenset = frozenset()) -> dict:
    """Train a fresh model 3 steps in ``mode``; step 0's forward recorded."""
    torch.manual_seed(0)
    model, inputs = build()
    args, kwargs = split_inputs(inputs)
    if mode == "O2":
        model = model.half()
        for m in model.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                m.float()
        args, kwargs = cast(args, torch.float16), cast(kwargs, torch.float16)
        master = [p.detach().float().clone().requires_grad_() for p in model.parameters()]
        optimizer = torch.optim.AdamW(master, lr=1e-4)
    else:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model.train()
    out = {"mode": mode, "crash": None, "losses": [], "skipped": 0, "scale": 2.0 ** 16, "origin": None, "calls": {}, "ran": set()}
    recorder = Recorder(root, apex_o1=(mode == "O1"), reference=reference, half_extra=half_extra)
    lines = Lines(root)
    scale = 2.0 ** 16
    step = 0
    last_skipped = False
    try:
        while step < STEPS or (last_skipped and step < STEPS + SCALER_WARMUP_STEPS
                               and all(math.isfinite(x) for x in out["losses"])):
            step += 1
            last_skipped = False
            torch.manual_seed(1000 + step - 1)
            ctx = torch.autocast("cpu", dtype=torch.float16) if mode == "autocast" else contextlib.nullcontext()
            with ctx:
                if step == 1:
                    with lines.active(), recorder:
                        output = model(*args, **kwargs)
                else:
                    output = model(*args, **kwargs)
            loss = sum(t.float().pow(2).mean() for t in floats(output))
            out["losses"].append(float(loss))
            if mode in ("O1", "O2"):  # apex's dynamic loss scaling
                model.zero_grad(set_to_none=True)
                (loss * scale).backward()
                grads = [p.grad for p in model.parameters()]
                if any(g is not None and not bool(torch.isfinite(g).all()) for g in grads):
                    out["skipped"] += 1
                    last_skipped = True
                    scale /= 2
                    continue
                if mode == "O1":
                    for p in model.parameters():
                        if p.grad is not None:
                            p.grad /= scale
                    optimizer.step()
                    continue
                for m, p in zip(master, model.parameters()):
                    m.grad = None if p.grad is None else p.grad.float() / scale
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                with torch.no_grad():
                    for m, p in zip(master, model.parameters()):
                        p.copy_(m)
            else:
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
    except Exception as exc:  # the level's crash: where, and what
        file, line = crash_site(exc, root)
        out["crash"] = {"type": type(exc).__name__, "message": str(exc).splitlines()[0][:200], "file": file, "line": line,
                        "step": max(step - 1, 0)}
    out["scale"] = scale
    out["steps"], out["last_skipped"] = len(out["losses"]), last_skipped
    out["origin"] = recorder.origin
    out["calls"] = recorder.calls
    out["ran"] = lines.ran
    return out


def outcome(run: dict) -> str:
    """ok | crash at FILE:LINE | inf/NaN | N of M steps skipped."""
    c = run["crash"]
    if c:
        return f"crash at {c['file']}:{c['line']}"
    if run["origin"] is not None or any(not math.isfinite(x) for x in run["losses"]):
        return "inf/NaN"
    if run["last_skipped"]:  # still skipping after the warm-up steps: no loss scale makes it fit
        return f"{run['skipped']} of {run['steps']} steps skipped"
    return "ok"


def running_lines(root: str, file: str, line: int) -> frozenset:
    """The lines whose running means the finding's code ran: its own line; for a finding at a
    class line (AMP401's custom autograd Function), the lines of the class's method bodies
    (the class statement runs at import, used or not)."""
    import ast

    with open(os.path.join(root, file), encoding="utf-8") as fh:
        tree = ast.parse(fh.read())
    for cls in ast.walk(tree):
        if isinstance(cls, ast.ClassDef) and cls.lineno == line:
            return frozenset(node.lineno for fn in cls.body if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
                             for stmt in fn.body for node in ast.walk(stmt) if isinstance(node, ast.stmt))
    return frozenset((line,))


def observe(finding: dict, runs: dict, lines: frozenset = frozenset()) -> tuple[str, list[str]]:
    """(verdict, evidence) for one finding from the plain runs at its levels (``lines``: those
    whose running means the finding's code ran, see :func:`running_lines`; default its line)."""
    file, line, op, code = finding["file"], finding["line"], finding.get("op"), finding["code"]
    evidence, ran_somewhere = [], False
    lines = lines or frozenset((line,))
    for level in finding["levels"]:
        run = runs[level]
        ran = any((file, n) in run["ran"] for n in lines)
        ran_somewhere |= ran
        c = run["crash"]
        if c and (c["file"], c["line"]) == (file, line):
            evidence.append(f"{level} crash: {c['type']}: {c['message'][:70]}")
        o = run["origin"]
        if o and (o["file"], o["line"]) == (file, line) and (op is None or o["op"] == op):
            evidence.append(f"{level} first inf/NaN made by {o['op']} here")
        for (f, ln, name, k), rec in run["calls"].items():
            if (f, ln) != (file, line) or (op is not None and name != op):
                continue
            if not rec.get("inputs_match", True) and not code.startswith("AMP4"):
                continue  # zeros or errors carried in from an earlier call: not this finding's
            if rec.get("underflow", 0) >= UNDERFLOW_FRACTION:
                evidence.append(f"{level} {name}#{k}: {rec['underflow']:.1%} underflow")
            if rec.get("rel_err") is not None and rec["rel_err"] > TOLERANCE and not rec.get("new_nonfinite"):
                evidence.append(f"{level} {name}#{k}: rel err {rec['rel_err']:.3g}")
            if code.startswith("AMP4") and level == "O1" and "float32" in rec["in_dtypes"]:
                evidence.append(f"{level} {name}#{k}: ran with fp32 input ({'/'.join(rec['in_dtypes'])})")
    evidence = list(dict.fromkeys(evidence))
    if evidence:
        return "confirmed", evidence
    return ("not reproduced" if ran_somewhere else "not executed"), []


def forget(root: str) -> None:
    """Drop the modules imported from ``root`` (and the harnesses' helper), so that the next
    harness import loads another copy of the same package."""
    for name, mod in list(sys.modules.items()):
        path = getattr(mod, "__file__", None) or ""
        if name == "_pinned" or (path and os.path.realpath(path).startswith(root + os.sep)):
            del sys.modules[name]
    sys.path[:] = [p for p in sys.path if not os.path.realpath(p).startswith(root)]


def line_back(original: str, fixed: str, line: int) -> int:
    """A line of the fixed copy -> the line of the original it came from (difflib)."""
    import difflib

    with open(original, encoding="utf-8") as a, open(fixed, encoding="utf-8") as b:
        old, new = a.read().splitlines(), b.read().splitlines()
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if j1 < line <= j2:
            return i1 + min(line - j1, max(i2 - i1, 1))
    return line


def line_unchanged(original: str, fixed: str, line: int) -> bool:
    """Whether line ``line`` of the original is in the fixed copy as it was (difflib)."""
    import difflib

    with open(original, encoding="utf-8") as a, open(fixed, encoding="utf-8") as b:
        old, new = a.read().splitlines(), b.read().splitlines()
    return any(tag == "equal" and i1 < line <= i2
               for tag, i1, i2, _, _ in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes())


def display_fixes(model: dict, src: str) -> dict:
    """(file, line, code) -> the registrations of each finding whose fix is display-only: no
    file edit, a line the training script must run (AMP401: ``amp.register_half_function(torch,
    "einsum")`` before ``amp.initialize``).  Read from ``amplint check --format json`` (the fp16
    O1 and O2 settings), i.e. which fix amplint proposes, not what it does: that is measured."""
    import subprocess

    root = os.path.join(src, model["dist"])
    files = sorted({os.path.join(root, f["file"]) for f in model["findings"]})
    out: dict = {}
    for level in ("O1", "O2"):
        proc = subprocess.run([sys.executable, "-m", "amplint", "check", "--target", "fp16", "--opt-level", level,
                               "--device", "cpu", "--no-cache", "--format", "json", *files],
                              capture_output=True, text=True)
        for f in json.loads(proc.stdout or "[]"):
            fix = f.get("fix") or {}
            if fix.get("applicability") == "display":
                key = (os.path.relpath(os.path.realpath(f["path"]), os.path.realpath(root)), f["line"], f["code"])
                out.setdefault(key, [tuple(r) for r in fix.get("registrations", [])])
    return out


def fixed_copy(model: dict, src: str, tmp: str, display: dict) -> tuple[str, frozenset]:
    """The dist copied under ``tmp`` with ``amplint fix`` (safe fixes, fp16, the O1 then the O2
    settings, as ``verify --fix`` applies them) on the files with findings; and the functions
    registered as half -- by the fixed files (``amp.register_half_function(torch, "einsum")``)
    or by the training script as the ``display`` fixes ask (the verifier is that script) --
    which the O1 emulation then casts like apex would."""
    import re
    import shutil
    import subprocess

    dest = os.path.join(tmp, model["dist"])
    shutil.copytree(os.path.join(src, model["dist"]), dest)
    files = sorted({os.path.join(dest, f["file"]) for f in model["findings"]})
    for level in ("O1", "O2"):
        subprocess.run([sys.executable, "-m", "amplint", "fix", "--target", "fp16", "--opt-level", level,
                        "--device", "cpu", "--no-cache", "-q", *files], capture_output=True, text=True)
    extra = set()
    for path in files:
        with open(path, encoding="utf-8") as fh:
            extra.update(re.findall(r"register_half_function\([^,]+,\s*['\"](\w+)['\"]", fh.read()))
    extra.update(function for regs in display.values() for _, function, kind in regs if kind == "half")
    return dest, frozenset(extra)


def plain_runs(model: dict, src: str, half_extra: frozenset = frozenset()) -> dict:
    root = os.path.realpath(os.path.join(src, model["dist"]))
    forget(os.path.realpath(src))
    os.environ["AMPLINT_REAL_SRC"] = src  # read by the harnesses' _pinned.py
    build = load_harness(model["target"])
    ref = run_mode(build, "fp32", root, None)
    runs = {"O0": ref}
    for mode in ("O1", "O2", "autocast"):
        runs[mode] = run_mode(build, mode, root, ref["calls"], half_extra)
    return runs


def truth_for(model: dict, src: str, with_fix: bool = False) -> dict:
    import tempfile

    torch.set_num_threads(1)
    runs = plain_runs(model, src)
    result = {"name": model["name"], "levels": {m: outcome(r) for m, r in runs.items()},
              "losses": {m: [round(x, 4) for x in r["losses"]] for m, r in runs.items()}, "findings": []}
    root = os.path.join(src, model["dist"])
    own = {id(f): running_lines(root, f["file"], f["line"]) for f in model["findings"]}
    for f in model["findings"]:
        verdict, evidence = observe(f, runs, own[id(f)])
        result["findings"].append({"code": f["code"], "file": f["file"], "line": f["line"], "expected": f["expected"],
                                   "observed": verdict, "evidence": evidence})
    if with_fix:
        # the same runs on the fixed copies: a confirmed finding is fixed when its evidence (same
        # level, same kind) is gone there and the fp32 losses did not move beyond the tolerance
        forget(os.path.realpath(src))
        with tempfile.TemporaryDirectory() as tmp:
            display = display_fixes(model, src)
            dest, extra = fixed_copy(model, src, tmp, display)
            unchanged = {id(f): line_unchanged(os.path.join(src, model["dist"], f["file"]), os.path.join(dest, f["file"]), f["line"])
                         for f in model["findings"]}
            after = plain_runs(model, tmp, extra)
            forget(os.path.realpath(tmp))
            for run in after.values():  # crash lines of the fixed copy -> lines of the original
                c = run["crash"]
                if c and c["file"]:
                    c["line"] = line_back(os.path.join(src, model["dist"], c["file"]), os.path.join(dest, c["file"]), c["line"])
        result["levels_after"] = {m: outcome(r) for m, r in after.items()}
        ref, new = runs["O0"]["losses"], after["O0"]["losses"]
        change = max((abs(a - b) / abs(a) if a else abs(b)) for a, b in zip(ref, new)) if ref and new else math.inf
        for f, row in zip(model["findings"], result["findings"]):
            if row["observed"] != "confirmed":
                continue
            still = observe(f, after, own[id(f)])[1]
            kinds = {e.split(":")[0] for e in row["evidence"]}
            regs = display.get((f["file"], f["line"], f["code"]))
            if regs is not None and unchanged[id(f)]:
                # no file changed: the fix is a line for the training script; what it does with
                # that line made is recorded, the verdict says the code is as it was
                gone = not any(e.split(":")[0] in kinds for e in still)
                row["observed_fix"] = "fix not applied (display only)"
                row["evidence_fix"] = [f"with the training script's {', '.join(f'register_{k}_function({m}, {fn!r})' for m, fn, k in regs)}: "
                                       + ("the failure is gone" if gone else "still fails: " + "; ".join(still))]
            elif any(e.split(":")[0] in kinds for e in still):
                row["observed_fix"], row["evidence_fix"] = "fix did not remove it", still
            elif change > TOLERANCE:
                row["observed_fix"], row["evidence_fix"] = "fix changes fp32 results", [f"fp32 losses moved by {change:.3g}"]
            else:
                row["observed_fix"], row["evidence_fix"] = "fixed", still
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", action="append", default=[], help="only this model (repeatable)")
    ap.add_argument("--json", help="write the observations here")
    ap.add_argument("--expected", default=os.path.join(SUITE, "expected.json"), help="the suite's expected verdicts")
    ap.add_argument("--src", default=os.environ.get("AMPLINT_REAL_SRC") or os.path.join(HERE, "realcode", ".cache", "src"),
                    help="where the pinned sources are unpacked")
    ap.add_argument("--fix", action="store_true", help="also run the fixed copies (amplint fix) and judge the fixes")
    args = ap.parse_args(argv)
    with open(args.expected, encoding="utf-8") as fh:
        models = json.load(fh)["models"]
    results, mismatches = [], 0
    for model in models:
        if args.model and model["name"] not in args.model:
            continue
        r = truth_for(model, args.src, args.fix)
        results.append(r)
        print(f"== {r['name']} ({model['dist']})")
        for level, text in r["levels"].items():
            want = model["level_outcomes"].get(level)
            flag = "" if want is None or want == text else f"   <-- expected.json says {want!r}"
            mismatches += bool(flag)
            print(f"   {level:8} {text:60} losses {r['losses'][level]}{flag}")
        for f in r["findings"]:
            flag = "" if f["observed"] == f["expected"] else f"   <-- expected.json says {f['expected']!r}"
            mismatches += bool(flag)
            print(f"   {f['code']} {f['file']}:{f['line']}: {f['observed']}{flag}")
            for e in f["evidence"]:
                print(f"        {e}")
            if "observed_fix" in f:
                want = next((w.get("expected_fix") for w in model["findings"] if (w["file"], w["line"], w["code"]) == (f["file"], f["line"], f["code"])), None)
                flag = "" if want is None or want == f["observed_fix"] else f"   <-- expected.json says {want!r}"
                mismatches += bool(flag)
                print(f"        with --fix: {f['observed_fix']}{flag}")
        for level, text in r.get("levels_after", {}).items():
            want = model.get("level_outcomes_after", {}).get(level)
            flag = "" if want is None or want == text else f"   <-- expected.json says {want!r}"
            mismatches += bool(flag)
            print(f"   after the fixes: {level:8} {text}{flag}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=1)
    print(f"{mismatches} difference(s) between the plain PyTorch runs and expected.json")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
