"""Run a model under O0 and the selected opt levels with the bundled engine and measure it.

Per level: a fresh model from the factory (same seed), ``amp.initialize``, ``steps`` training
steps (forward, loss, backward through ``amp.scale_loss``, optimizer step).  Measured:

* per module, by forward hooks and gradient hooks on each module's outputs: abs-max, smallest
  non-zero magnitude, inf and NaN counts, dtype; at step 0 also the fraction of values that are
  0 here but not in the O0 run (underflow) and the relative error against O0;
* per source line (the *census*, a ``TorchFunctionMode`` active during step 0's forward): every
  torch call made from a user source line, with the same statistics, so a finding's line can
  be checked directly (the ``/`` that produced the first inf, the einsum that ran in fp32);
* loss, loss-scale trajectory and skipped steps; the model output's relative error against O0;
* a crash, with the phase, the step and the user source line that raised it.

A level's result is a :class:`~amplint.verify.records.LevelRun` whose items are typed
records (JSON-able: ``LevelRun.to_json``); the O0 tensors needed for comparisons stay in memory
in :class:`Reference` and are dropped with it.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import random
import sys
import time
import traceback
from typing import Any, Callable, Optional

import torch
from torch.overrides import TorchFunctionMode

from amplint.amp.policy import OPT_LEVELS as LEVELS

from .cpu_gemm import HalfGemmInFp32
from .target import AMP_DIR, ConstructionSites, canonical, class_source, normalize_example
from .records import (ClassSource, Crash, ForwardStats, GradStats, LevelRun, ModuleStats, Origin, OutputRange, Place,
                      Site, SiteRef)

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
#: default --tolerance: max |out - ref| / max |ref| against the fp32 (O0) run
DEFAULT_TOLERANCE = {"fp16": 1e-2, "bf16": 5e-2}
#: a module or line whose values are zero here but not in fp32 for at least this fraction
UNDERFLOW_FRACTION = 0.01
#: the most O0 elements kept in memory for comparisons (fp32): 256 MiB
REFERENCE_BUDGET = 1 << 26

# torch calls that cannot change values: not recorded by the census (cost and noise)
_SKIP_OPS = frozenset("""__get__ __set__ size dim numel __len__ __bool__ __index__ __int__ __float__ item tolist
stride is_contiguous is_floating_point data_ptr element_size nelement __format__ __repr__ __hash__ __eq__
view reshape view_as reshape_as flatten unflatten squeeze unsqueeze transpose permute t contiguous expand
expand_as split chunk unbind __getitem__ narrow select detach detach_ clone requires_grad_ retain_grad
register_hook __setstate__ __reduce_ex__ __deepcopy__ dtype device shape is_cuda numpy cpu cuda
""".split())
_VERIFY_DIR = os.path.dirname(canonical(__file__)) + os.sep
_CAST_OPS = frozenset(("to", "float", "half", "bfloat16", "type", "type_as", "_to_copy"))


@dataclasses.dataclass
class RunConfig:
    levels: tuple[str, ...] = ("O1", "O2")
    dtype: str = "fp16"
    device: Optional[str] = None  # None: cuda when available
    steps: int = 3
    loss: str = "auto"
    seed: int = 0
    tolerance: Optional[float] = None
    optimizer: str = "adamw"
    lr: float = 1e-4
    census: bool = True
    hooks: bool = True
    #: CPU only: fp16/bf16 matrix products in fp32, rounded once (cpu_gemm.py; same arithmetic, 10-80x faster)
    half_gemm_in_fp32: bool = True

    def resolved_device(self) -> str:
        if self.device:
            return self.device
        return "cuda" if torch.cuda.is_available() else "cpu"

    def resolved_tolerance(self) -> float:
        return self.tolerance if self.tolerance is not None else DEFAULT_TOLERANCE[self.dtype]

    def all_levels(self) -> list[str]:
        return ["O0"] + [lvl for lvl in LEVELS[1:] if lvl in self.levels]


# --- small tensor helpers -----------------------------------------------------------------

def floating_tensors(obj, limit: int = 8) -> list[torch.Tensor]:
    out: list[torch.Tensor] = []

    def walk(o, depth=0):
        if len(out) >= limit or depth > 4:
            return
        if isinstance(o, torch.Tensor):
            if o.is_floating_point() and o.numel():
                out.append(o)
        elif isinstance(o, (list, tuple)):
            for v in o:
                walk(v, depth + 1)
        elif isinstance(o, dict):
            for v in o.values():
                walk(v, depth + 1)
        elif dataclasses.is_dataclass(o) and not isinstance(o, type):
            for f in dataclasses.fields(o):
                walk(getattr(o, f.name, None), depth + 1)

    walk(obj)
    return out


def _to_device(obj, device):
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(_to_device(v, device) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_device(v, device) for v in obj)
    if isinstance(obj, dict):
        return {k: _to_device(v, device) for k, v in obj.items()}
    return obj


_INF = {}


def _inf(device):
    t = _INF.get(device)
    if t is None:
        t = _INF[device] = torch.tensor(float("inf"), device=device)
    return t


_SENTINEL = 65504.0
#: extra steps a run may take while the dynamic loss scaler skips: 2**16 halves to the 2**-14
#: floor in 30 steps
SCALER_WARMUP_STEPS = 30


def absmax(d: torch.Tensor) -> torch.Tensor:
    """max |x| as a 0-d float32 tensor, NaN when any value is NaN, inf when any is +-inf.

    One ``aminmax`` pass (NaN-propagating): ``vector_norm(d, inf)`` gives the same value but
    ran 10x slower on CPU, and this runs on every recorded tensor of every step."""
    lo, hi = torch.aminmax(d)
    return torch.maximum(hi, -lo).float()


def _stats(d: torch.Tensor, ref: Optional[torch.Tensor]) -> torch.Tensor:
    """[absmax (NaN/inf when any value is), min |x| > 0, max |x - ref|, max |ref|, #underflow].

    ``ref`` is a :meth:`Reference.keep` copy: fp32, with NaN wherever the fp32 value lies
    beyond fp16's range.  Only values inside that range on both sides are compared: beyond
    it are sentinels (``finfo(dtype).min`` masks differ by design between fp32 and half) or
    overflow, which the inf/NaN counts report instead.  Written as few whole-tensor passes
    without boolean temporaries: on a 50257-token LM head's logits each pass is 50 MB."""
    amax = absmax(d)
    a = d.abs()
    minnz = torch.where(a > 0, a, _inf(a.device).to(a.dtype)).amin().float()
    if ref is not None and ref.shape == d.shape:
        df = d.float()
        diff = df.sub(ref).abs_()  # NaN where either side is excluded or NaN, inf where d is
        if d.dtype != torch.float16:  # bf16 and fp32 hold finite values beyond fp16's range
            diff.masked_fill_(df.abs() > _SENTINEL, math.nan)
        compared = diff * 0  # 0 where both sides are compared, NaN elsewhere (inf * 0 is NaN)
        err = diff.add_(compared).nan_to_num_(0.0, 0.0, 0.0).amax()
        den = ref.abs().add_(compared).nan_to_num_(0.0, 0.0, 0.0).amax()
        under = torch.logical_and(d == 0, ref).sum().float()  # NaN (excluded, non-zero in fp32) counts as non-zero
        return torch.stack((amax, minnz, err, den, under))
    return torch.stack((amax, minnz))


def _exact(d: torch.Tensor) -> tuple[float, int, int]:
    """(finite abs-max, inf count, NaN count) for a tensor whose summary was not finite."""
    finite = torch.isfinite(d)
    a = torch.where(finite, d.abs(), torch.zeros((), dtype=d.dtype, device=d.device))
    return float(a.amax().float()), int(torch.isinf(d).sum()), int(torch.isnan(d).sum())


def _finite(x: float) -> bool:
    return not (math.isnan(x) or math.isinf(x))


# --- the per-tensor record and its aggregation ----------------------------------------------

class _Agg:
    """Running summary of every tensor seen at one module (or source line)."""

    __slots__ = ("calls", "absmax", "minnz", "inf", "nan", "dtypes", "err", "under", "numel", "nonfinite_calls",
                 "max_call_nonfinite", "first_order", "first_new_nonfinite", "shapes")

    def __init__(self):
        self.calls = 0
        self.absmax = 0.0
        self.minnz = math.inf
        self.inf = self.nan = 0
        self.dtypes: set[str] = set()
        self.err = None  # max relative error against O0
        self.under = 0
        self.numel = 0  # elements compared with O0
        self.nonfinite_calls = 0
        self.max_call_nonfinite = 0
        self.first_order = None
        self.first_new_nonfinite = None  # (step, order) of the first call with more non-finite values than O0
        self.shapes: set[tuple] = set()

    def to_dict(self) -> dict:
        return {
            "calls": self.calls, "absmax": self.absmax, "min_nonzero": None if self.minnz == math.inf else self.minnz,
            "inf": self.inf, "nan": self.nan, "dtypes": sorted(self.dtypes),
            "rel_err": self.err, "underflow": (self.under / self.numel) if self.numel else None,
            "underflow_count": self.under,
            "new_nonfinite": self.first_new_nonfinite is not None,
        }


class _Pending:
    """Tensors seen during one forward/backward; their statistics are read in one sync.

    A *full* record (step 0, where the comparisons with O0 happen, and the last step) costs a
    few kernels per tensor; the steps between record only the abs-max (one kernel:
    :func:`absmax`, which is also NaN/inf when any value is), which keeps the hooks cheap.
    """

    def __init__(self):
        self.items: list[tuple] = []  # (agg, key, tensor, stats tensor, has_ref, order, step)
        self.bad: dict = {}  # key -> most inf/NaN values seen in one call (for Census.origin)

    def add(self, agg, key, d, ref, order, step, full=True):
        if full:
            stats = _stats(d, ref)
        else:
            stats = absmax(d)
        self.items.append((agg, key, d, stats, ref is not None and ref.shape == d.shape, order, step))

    def flush(self, ref_nonfinite: dict, record_nonfinite: Optional[dict]):
        if not self.items:
            return
        groups: dict[int, list[int]] = {}
        for i, it in enumerate(self.items):
            groups.setdefault(it[3].numel(), []).append(i)
        values: list = [None] * len(self.items)
        for n, idx in groups.items():
            rows = torch.stack([self.items[i][3].reshape(n).float() for i in idx]).tolist()
            for i, row in zip(idx, rows):
                values[i] = row
        nan = math.nan
        for (agg, key, d, _, has_ref, order, step), row in zip(self.items, values):
            row = row + [nan] * (5 - len(row))
            amax, minnz, err, den, under = row
            agg.calls += 1
            agg.dtypes.add(str(d.dtype).replace("torch.", ""))
            if len(agg.shapes) < 4:
                agg.shapes.add(tuple(d.shape))
            if agg.first_order is None:
                agg.first_order = (step, order)
            inf = nan_count = 0
            if not _finite(amax):
                amax, inf, nan_count = _exact(d)
            agg.absmax = max(agg.absmax, amax)
            if _finite(minnz):
                agg.minnz = min(agg.minnz, minnz)
            agg.inf += inf
            agg.nan += nan_count
            bad = inf + nan_count
            if bad:
                agg.nonfinite_calls += 1
                self.bad[key] = max(self.bad.get(key, 0), bad)
            agg.max_call_nonfinite = max(agg.max_call_nonfinite, bad)
            if record_nonfinite is not None:
                record_nonfinite[key] = max(record_nonfinite.get(key, 0), bad)
                if nan_count and agg.first_new_nonfinite is None:
                    agg.first_new_nonfinite = (step, order)  # O0: where the first NaN appears
            elif bad > ref_nonfinite.get(key, 0) and agg.first_new_nonfinite is None:
                agg.first_new_nonfinite = (step, order)
            if has_ref:
                if _finite(err) and _finite(den):
                    rel = err / den if den > 0 else (0.0 if err == 0 else math.inf)
                else:
                    rel = math.inf
                agg.err = rel if agg.err is None else max(agg.err, rel)
                agg.under += int(under) if _finite(under) else 0
                agg.numel += d.numel()
        self.items.clear()


class Reference:
    """What the O0 run leaves for the other levels to compare against."""

    def __init__(self, budget: int = REFERENCE_BUDGET):
        self.budget = budget
        self.tensors: dict = {}
        self.nonfinite: dict = {}  # key -> most non-finite values in one call at O0
        self.output: Optional[list[torch.Tensor]] = None
        self.losses: list[float] = []

    def keep(self, key, d: torch.Tensor):
        """Keep ``d`` in the form :func:`_stats` compares against: fp32, NaN beyond fp16's range."""
        n = d.numel()
        if n <= self.budget:
            self.budget -= n
            r = d.detach().float()
            self.tensors[key] = torch.where(r.abs() <= _SENTINEL, r, math.nan)

    def get(self, key):
        return self.tensors.get(key)


# --- which user lines ran -------------------------------------------------------------------

class LineTrace:
    """The user source lines executed while active (``sys.settrace``; frames of other files
    are not traced), so that a finding on a line that never ran is reported as *not
    executed* -- after a crash, or on a branch not taken -- rather than *not reproduced*.

    Active only while a model is imported and built and during step 0 at each level."""

    def __init__(self, user_files):
        self.is_user = user_files.__contains__ if isinstance(user_files, (set, frozenset, dict)) else user_files
        self.lines: set[tuple[str, int]] = set()
        self._files: dict = {}  # code object -> its canonical file when a user file, else None

    def _file(self, code) -> Optional[str]:
        try:
            return self._files[code]
        except KeyError:
            path = canonical(code.co_filename)
            file = self._files[code] = path if self.is_user(path) else None
            return file

    def _call(self, frame, event, arg):
        file = self._file(frame.f_code)
        if file is None:
            return None
        self.lines.add((file, frame.f_lineno))
        return self._line

    def _line(self, frame, event, arg):
        if event == "line":
            self.lines.add((self._files[frame.f_code], frame.f_lineno))
        return self._line

    @contextlib.contextmanager
    def active(self):
        previous = sys.gettrace()
        sys.settrace(self._call)
        try:
            yield self
        finally:
            sys.settrace(previous)

    def by_file(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for file, line in self.lines:
            out.setdefault(file, []).append(line)
        return {f: sorted(lines) for f, lines in out.items()}


# --- the census: torch calls per source expression -------------------------------------------

_USER, _AMP, _VERIFY, _OTHER = range(4)


def _positions(code, lasti: int) -> Optional[tuple]:
    """(line, end_line, col, end_col) of the instruction at ``lasti`` (the call in progress),
    columns 0-based in UTF-8 bytes, as ``co_positions`` gives them; None when unknown."""
    try:
        pos = list(code.co_positions())[lasti // 2]
    except (AttributeError, IndexError):  # Python < 3.11 has no column table
        return None
    return None if None in pos else pos


def _char_column(file: str, line: int, byte_col: int) -> int:
    """0-based UTF-8 byte column -> 1-based character column (the linter's columns)."""
    import linecache

    text = linecache.getline(file, line)
    return len(text.encode("utf-8")[:byte_col].decode("utf-8", errors="ignore")) + 1


def source_span(file: str, line: int, end_line: int, col: int, end_col: int) -> str:
    """The source text between two 0-based byte columns (one line, elided when long)."""
    import linecache

    lines = [linecache.getline(file, n).encode("utf-8") for n in range(line, end_line + 1)]
    if not lines or not any(lines):
        return ""
    if len(lines) == 1:
        text = lines[0][col:end_col]
    else:
        text = lines[0][col:] + b"".join(lines[1:-1]) + lines[-1][:end_col]
    text = " ".join(text.decode("utf-8", errors="replace").split())
    return text if len(text) <= 120 else text[:117] + "..."


class Census(TorchFunctionMode):
    """Every torch call made from a user source expression during one forward, with the
    statistics of its output, keyed by (file, line, op, columns).

    It also keeps, per call in order, whether all its floating inputs were finite (a device
    flag, read in one sync by :meth:`origin`): the first call whose inputs were finite and
    whose output has new inf/NaN is where the non-finite values *originate*; every later one
    only propagates them."""

    def __init__(self, user_files: set, reference: Reference, is_reference: bool, pending: _Pending, order: list):
        super().__init__()
        self.user_files = user_files
        self.reference = reference
        self.is_reference = is_reference
        self.pending = pending
        self.sites: dict[tuple, _Agg] = {}
        self.counts: dict[tuple, int] = {}
        self.order = order
        self.calls: list[tuple] = []  # (site, output keys, inputs-finite flag tensor)
        self._kinds: dict = {}
        self._positions: dict = {}
        self.tainted: set = set()  # sites with a call whose inputs had inf/NaN (set by origin())

    def _kind(self, code) -> int:
        kind = self._kinds.get(code)
        if kind is None:
            path = canonical(code.co_filename)
            if path in self.user_files:
                kind = _USER
            elif path.startswith(AMP_DIR):
                kind = _AMP
            elif path.startswith(_VERIFY_DIR):
                kind = _VERIFY
            else:
                kind = _OTHER
            self._kinds[code] = kind
        return kind

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = getattr(func, "__name__", None) or type(func).__name__
        if name in _SKIP_OPS:
            return out
        try:
            frame = sys._getframe(1)
            from_amp = False
            while frame is not None:
                kind = self._kind(frame.f_code)
                if kind == _USER:
                    break
                if kind == _AMP:
                    from_amp = True
                elif kind == _VERIFY:
                    return out  # the verifier's own statistics (module hooks, loss)
                frame = frame.f_back
            if frame is None or (from_amp and name in _CAST_OPS):
                return out
            tensors = floating_tensors(out, limit=2)
            if not tensors:
                return out
            code = frame.f_code
            pkey = (code, frame.f_lasti)
            pos = self._positions.get(pkey, False)
            if pos is False:
                pos = self._positions[pkey] = _positions(code, frame.f_lasti)
            file = canonical(code.co_filename)
            if pos is not None:
                site = (file, pos[0], name, pos[2], pos[1], pos[3])
            else:
                site = (file, frame.f_lineno, name, None, None, None)
            agg = self.sites.get(site)
            if agg is None:
                agg = self.sites[site] = _Agg()
            n = self.counts.get(site, 0)
            self.counts[site] = n + 1
            self.order[0] += 1
            keys = []
            for i, t in enumerate(tensors):
                d = t.detach()
                key = ("site",) + site + (n, i)
                keys.append(key)
                if self.is_reference:
                    self.reference.keep(key, d)
                    ref = None
                else:
                    ref = self.reference.get(key)
                self.pending.add(agg, key, d, ref, self.order[0], 0)
            inputs = floating_tensors((args, kwargs), limit=8)
            if inputs:
                flag = torch.isfinite(torch.stack([absmax(t.detach()) for t in inputs])).all()
            else:
                flag = None
            self.calls.append((site, keys, flag))
        except Exception:  # the census must never break the user's forward
            pass
        return out

    def origin(self, bad: dict, ref_nonfinite: Optional[dict]) -> Optional[Origin]:
        """The first call whose output has more inf/NaN than the fp32 run (``ref_nonfinite``;
        None: this is the fp32 run, any inf/NaN counts) and whose floating inputs were all
        finite: where the non-finite values were made.  When every such output had non-finite
        inputs already, the first one (``inputs_finite`` False)."""
        flags = [c[2] for c in self.calls]
        present = [f for f in flags if f is not None]
        values = iter(torch.stack(present).tolist()) if present else iter(())
        finite = [True if f is None else bool(next(values)) for f in flags]
        # sites that got an inf/NaN input: their zeros and errors may be inherited, not made there
        self.tainted = {site for (site, _, _), ok in zip(self.calls, finite) if not ok}
        first = None
        for (site, keys, _), ok in zip(self.calls, finite):
            new = any(bad.get(k, 0) > (ref_nonfinite.get(k, 0) if ref_nonfinite is not None else 0) for k in keys)
            if not new:
                continue
            if ok:
                return _origin_of(site, True, self.sites.get(site))
            if first is None:
                first = site
        return _origin_of(first, False, self.sites.get(first)) if first is not None else None


def _origin_of(site: tuple, inputs_finite: bool, agg: Optional[_Agg] = None) -> Origin:
    """The origin's place and expression, and the range of what that call site produced
    (``output``: abs-max of the finite values, smallest non-zero, inf and NaN counts), which
    the HTML report draws even when the op is not a module's output."""
    file, line, op, col, end_line, end_col = site
    out = Origin(file, line, op, end_line or line, inputs_finite=inputs_finite)
    if agg is not None and agg.calls:
        d = agg.to_dict()
        out.output = OutputRange(d["absmax"], d["min_nonzero"], d["inf"], d["nan"], d["dtypes"])
    if col is not None:
        out.column = _char_column(file, line, col)
        out.end_column = _char_column(file, end_line, end_col)
        out.expr = source_span(file, line, end_line, col, end_col)
    return out


# --- loss functions --------------------------------------------------------------------------

def _is_scalar(t) -> bool:
    return isinstance(t, torch.Tensor) and t.is_floating_point() and t.dim() == 0


def _children(out) -> list:
    """The values inside a model output, in order (tuple, list, dict, dataclass, ModelOutput)."""
    if isinstance(out, dict):  # ModelOutput is an OrderedDict of its non-None fields
        return list(out.values())
    if isinstance(out, (list, tuple)):
        return list(out)
    if dataclasses.is_dataclass(out) and not isinstance(out, type):
        return [getattr(out, f.name, None) for f in dataclasses.fields(out)]
    return []


def first_scalar(out, depth: int = 0) -> Optional[torch.Tensor]:
    """The loss a model returns: its ``loss`` key or attribute, else the first floating 0-d
    tensor anywhere in it (depth first, in order): ``(logits, loss)`` -> loss."""
    if _is_scalar(out):
        return out
    if depth > 4 or isinstance(out, torch.Tensor):
        return None
    loss = out.get("loss") if isinstance(out, dict) else getattr(out, "loss", None) if not isinstance(out, (list, tuple, str, bytes)) else None
    if _is_scalar(loss):
        return loss
    for value in _children(out):
        found = first_scalar(value, depth + 1)
        if found is not None:
            return found
    return None


def _auto_loss(out):
    """``--loss auto``: the first scalar in the output (:func:`first_scalar`), else the sum
    over its floating tensors of the mean of squares."""
    if isinstance(out, torch.Tensor) and not out.is_floating_point():
        raise TypeError(f"the model returned a {out.dtype} tensor; pass --loss to say how to get a scalar from it")
    scalar = first_scalar(out)
    if scalar is not None:
        return scalar.float()
    terms = [t.float().pow(2).mean() for t in floating_tensors(out)]
    if not terms:
        raise TypeError(f"cannot derive a loss from a {type(out).__name__}; pass --loss")
    return sum(terms)


def make_loss(spec: str) -> Callable:
    """``auto`` | ``mean`` | ``sum`` | ``square`` | ``first`` | ``PATH::FUNC`` | ``module:func`` |
    a Python expression over ``out`` (and ``inputs``, ``torch``), e.g. ``out.logits.float().mean()``."""
    spec = (spec or "auto").strip()
    if spec == "auto":
        return lambda out, inputs: _auto_loss(out)
    if spec == "mean":
        return lambda out, inputs: sum(t.float().mean() for t in floating_tensors(out))
    if spec == "sum":
        return lambda out, inputs: sum(t.float().sum() for t in floating_tensors(out))
    if spec == "square":
        return lambda out, inputs: sum(t.float().pow(2).mean() for t in floating_tensors(out))
    if spec == "first":
        return lambda out, inputs: _auto_loss(floating_tensors(out)[0])
    if "::" in spec or (":" in spec and spec.replace(":", ".").replace(".", "").replace("_", "").isalnum()):
        from .target import import_file, factory_from_module

        if "::" in spec:
            path, _, name = spec.partition("::")
            module = import_file(os.path.abspath(path))
        else:
            import importlib

            mod_name, _, name = spec.partition(":")
            module = importlib.import_module(mod_name)
        fn = factory_from_module(module, name, spec)
        return lambda out, inputs: fn(out, inputs) if fn.__code__.co_argcount >= 2 else fn(out)
    code = compile(spec, "<--loss>", "eval")
    return lambda out, inputs: eval(code, {"torch": torch}, {"out": out, "inputs": inputs, "output": out})


# --- crashes ---------------------------------------------------------------------------------

def describe_crash(exc: BaseException, user_files: set, phase: str, step: int) -> Crash:
    frames = traceback.extract_tb(exc.__traceback__)
    user = [f for f in frames if canonical(f.filename) in user_files]
    where = user[-1] if user else None
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    crash = Crash(type(exc).__name__, message[:500], phase, step,
                  file=canonical(where.filename) if where else None, line=where.lineno if where else None,
                  code=(where.line or "").strip() if where else None)
    # the expression that raised (Python 3.11+ tracebacks carry its columns)
    if where is not None and getattr(where, "colno", None) is not None and getattr(where, "end_colno", None) is not None:
        end_line = getattr(where, "end_lineno", None) or where.lineno
        crash.end_line = end_line
        crash.column = _char_column(crash.file, where.lineno, where.colno)
        crash.end_column = _char_column(crash.file, end_line, where.end_colno)
    return crash


# --- one level -------------------------------------------------------------------------------

def _seed_all(seed: int) -> None:
    torch.manual_seed(seed)
    random.seed(seed)
    try:
        import numpy

        numpy.random.seed(seed % (2 ** 32))
    except Exception:
        pass


class AdamW(torch.optim.Optimizer):
    """AdamW (decoupled weight decay; ``weight_decay=0`` is Adam) with fused ``_foreach`` updates.

    torch's own optimizers import ``torch._dynamo`` on their first ``step`` (about 4 s on
    CPU), which would dominate a verify run; this one does not.  Its state has the parameters'
    dtype, as torch's has: under O3 (no master weights) it is half, and ``eps=1e-8`` underflows
    there, as it does with torch.optim.Adam."""

    def __init__(self, params, lr=1e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            lr, (b1, b2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
            for p in params:
                st = self.state[p]
                if not st:
                    st["step"] = 0
                    st["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    st["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                st["step"] += 1
            grads = [p.grad for p in params]
            avgs = [self.state[p]["exp_avg"] for p in params]
            sqs = [self.state[p]["exp_avg_sq"] for p in params]
            t = self.state[params[0]]["step"]
            if wd:
                torch._foreach_mul_(params, 1 - lr * wd)
            torch._foreach_lerp_(avgs, grads, 1 - b1)
            torch._foreach_mul_(sqs, b2)
            torch._foreach_addcmul_(sqs, grads, grads, 1 - b2)
            denom = torch._foreach_sqrt(sqs)
            torch._foreach_div_(denom, math.sqrt(1 - b2 ** t))
            torch._foreach_add_(denom, eps)
            torch._foreach_addcdiv_(params, avgs, denom, -lr / (1 - b1 ** t))
        return loss


class SGD(torch.optim.Optimizer):
    """SGD with momentum 0.9, ``_foreach`` updates (no torch._dynamo import; see AdamW)."""

    def __init__(self, params, lr=1e-3, momentum=0.9):
        super().__init__(params, dict(lr=lr, momentum=momentum))

    @torch.no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            grads = [p.grad for p in params]
            bufs = []
            for p, g in zip(params, grads):
                st = self.state[p]
                if "momentum_buffer" not in st:
                    st["momentum_buffer"] = g.detach().clone()
                else:
                    st["momentum_buffer"].mul_(group["momentum"]).add_(g)
                bufs.append(st["momentum_buffer"])
            torch._foreach_add_(params, bufs, alpha=-group["lr"])
        return loss


#: Adam's usual epsilon; the verifier's own optimizer uses it wherever the state can hold it
ADAM_EPS = 1e-8


def optimizer_eps(cfg: RunConfig, level: str) -> Optional[float]:
    """The epsilon the verifier's Adam(W) uses at ``level`` (None for SGD).

    At O3 there are no fp32 master weights: the parameters, and so Adam's state, are half,
    and ``1e-8`` is 0 in fp16 -- ``sqrt(v) + eps`` is then 0 wherever a gradient underflowed
    and the update is 0/0 = NaN on the first step, in *every* model.  That is the
    optimizer's problem, not a layer's: at O3 the verifier uses fp16's smallest normal
    (6.1e-5) instead, and the report says so (with the same fix for the user's training)."""
    if cfg.optimizer == "sgd":
        return None
    if level == "O3":
        tiny = torch.finfo(DTYPES[cfg.dtype]).tiny
        if ADAM_EPS < tiny:
            return float(tiny)
    return ADAM_EPS


def _optimizer(cfg: RunConfig, params, level: str = "O0"):
    params = [p for p in params if p.requires_grad]
    if not params:
        return None
    if cfg.optimizer == "sgd":
        return SGD(params, lr=cfg.lr)
    eps = optimizer_eps(cfg, level)
    if cfg.optimizer == "adam":
        return AdamW(params, lr=cfg.lr, eps=eps, weight_decay=0.0)
    return AdamW(params, lr=cfg.lr, eps=eps)


def _relative_error(outs: list[torch.Tensor], refs: Optional[list[torch.Tensor]]) -> Optional[float]:
    if refs is None or len(outs) != len(refs):
        return None
    err = den = 0.0
    for o, r in zip(outs, refs):
        if o.shape != r.shape:
            return None
        diff = float((o.detach().float() - r).abs().amax())
        if not _finite(diff):
            return math.inf
        err = max(err, diff)
        den = max(den, float(r.abs().amax()))
    return err / den if den > 0 else (0.0 if err == 0 else math.inf)


class _Buffers:
    """The model's buffers before a forward (BatchNorm statistics and the like change in it),
    to run that forward again from the same state.  Nothing is kept for models whose
    buffers are large (over 16M elements): their forward is then rerun from the updated
    buffers, which changes running statistics only."""

    LIMIT = 1 << 24

    def __init__(self, model):
        buffers = list(model.buffers())
        self.saved = []
        if sum(b.numel() for b in buffers) <= self.LIMIT:
            self.saved = [(b, b.detach().clone()) for b in buffers]

    @torch.no_grad()
    def restore(self):
        for b, value in self.saved:
            b.copy_(value)


@dataclasses.dataclass
class _LevelState:
    """What one level's run keeps while it goes (:meth:`LevelRunner.run_level`): where it
    is (``phase``, ``step``: a crash is described by them), its hooks' aggregates and
    pending values, the step-0 census, where inf/NaN were first made."""

    level: str
    is_ref: bool
    out: Optional[LevelRun] = None
    phase: str = "build"
    step: int = 0
    pending: "_Pending" = dataclasses.field(default_factory=lambda: _Pending())
    modules: list = dataclasses.field(default_factory=list)  # (name, module, forward _Agg, gradient _Agg)
    order: list = dataclasses.field(default_factory=lambda: [0])
    census: Optional["Census"] = None
    origin: Optional[Origin] = None  # step 0's census, or a later step's traced replay
    lines: Optional[LineTrace] = None
    handles: list = dataclasses.field(default_factory=list)
    products: contextlib.ExitStack = dataclasses.field(default_factory=contextlib.ExitStack)
    hook_state: dict = dataclasses.field(default_factory=dict)


class LevelRunner:
    def __init__(self, make: Callable, user_files: set, cfg: RunConfig, loss_fn: Callable):
        self.make = make
        self.user_files = user_files
        self.cfg = cfg
        self.loss_fn = loss_fn
        self.reference = Reference()
        self.sites_meta: dict = {}
        self._class_sources: dict = {}

    def build(self, sites: Optional[ConstructionSites] = None):
        _seed_all(self.cfg.seed)
        if sites is not None:
            with sites.recording():
                result = self.make()
        else:
            result = self.make()
        return normalize_example(result, "the factory")

    def run_level(self, level: str, on_step: Optional[Callable] = None) -> LevelRun:
        """Build the model, train it ``cfg.steps`` steps at ``level`` and describe what
        happened (a crash included: it ends the run, never the verifier)."""
        from amplint import amp

        cfg = self.cfg
        run = _LevelState(level, level == "O0")
        run.out = LevelRun(level, "fp32" if run.is_ref else cfg.dtype)
        started = time.perf_counter()
        amp.reset()
        sites = ConstructionSites(lambda f: canonical(f) in self.user_files)
        run.lines = LineTrace(self.user_files) if cfg.census else None
        try:
            model, optimizer, args, kwargs = self._prepare(run, sites)
            run.step = -1
            while self._another_step(run.step + 1, cfg.steps, run.out, optimizer):
                run.step += 1
                self._train_step(run, model, optimizer, args, kwargs)
                if on_step:
                    on_step()
        except (Exception, SystemExit) as exc:
            run.out.crash = describe_crash(exc, self.user_files, run.phase, run.step)
            try:
                self._flush(run)
            except Exception:
                run.pending.items.clear()
        finally:
            run.products.close()
            for h in run.handles:
                h.remove()
            amp.reset()
        self._compare_losses(run)
        self._describe(run, sites)
        run.out.seconds = time.perf_counter() - started
        return run.out

    def _flush(self, run: "_LevelState") -> None:
        run.pending.flush(self.reference.nonfinite, self.reference.nonfinite if run.is_ref else None)

    def _prepare(self, run: "_LevelState", sites: ConstructionSites):
        """The model built (its construction sites recorded), on the device, with its
        hooks and optimizer, through ``amp.initialize``: (model, optimizer, args, kwargs)."""
        from amplint import amp

        cfg, level, is_ref = self.cfg, run.level, run.is_ref
        device = cfg.resolved_device()
        with run.lines.active() if run.lines else contextlib.nullcontext():
            model, args, kwargs = self.build(sites)
        model = model.to(device)
        args, kwargs = _to_device(args, device), _to_device(kwargs, device)
        model.train()
        run.phase = "hooks"
        run.hook_state = {"step": 0, "collect": cfg.hooks, "full": True}
        if cfg.hooks:
            for idx, (name, mod) in enumerate(model.named_modules()):
                fwd, grd = _Agg(), _Agg()
                run.modules.append((name or "(model)", mod, fwd, grd))
                run.handles.append(mod.register_forward_hook(
                    self._hook(idx, fwd, grd, run.pending, run.hook_state, run.order, is_ref)))
        optimizer = _optimizer(cfg, model.parameters(), level)
        run.phase = "initialize"
        kw: dict[str, Any] = {"opt_level": level, "verbosity": 0}
        if not is_ref and cfg.dtype == "bf16":
            kw["half_dtype"] = torch.bfloat16
        if optimizer is not None:
            model, optimizer = amp.initialize(model, optimizer, **kw)
        else:
            model = amp.initialize(model, **kw)
        if not is_ref and device == "cpu" and cfg.half_gemm_in_fp32:
            run.products.enter_context(HalfGemmInFp32())
        return model, optimizer, args, kwargs

    def _train_step(self, run: "_LevelState", model, optimizer, args, kwargs) -> None:
        """One training step: forward (traced at step 0, replayed traced at the step where
        inf/NaN first appear), loss, backward through the loss scaler, optimizer step."""
        from amplint import amp

        cfg, out, step, is_ref, lines = self.cfg, run.out, run.step, run.is_ref, run.lines
        run.hook_state["step"] = step
        run.hook_state["full"] = step == 0 or step == cfg.steps - 1
        _seed_all(cfg.seed * 1000 + step + 1)
        if optimizer is not None:
            optimizer.zero_grad(set_to_none=True)
        run.phase = "forward"
        # after a clean traced step 0, each step may be the one where inf/NaN first appear
        watch = step > 0 and run.census is not None and run.origin is None
        buffers = _Buffers(model) if watch else None
        traced = lines.active() if lines and step == 0 else contextlib.nullcontext()
        with traced:
            if step == 0 and cfg.census:
                run.census = Census(self.user_files, self.reference, is_ref, run.pending, run.order)
                with run.census:
                    output = model(*args, **kwargs)
            else:
                output = model(*args, **kwargs)
            run.phase = "loss"
            loss = self.loss_fn(output, (args, kwargs))
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            raise TypeError(f"the loss must be a scalar tensor, got {type(loss).__name__}")
        loss_value = float(loss.detach().float())
        if watch:
            self._flush(run)
            if self._went_nonfinite(run.modules, step, loss_value):
                # this step's forward once more, traced, from the same parameters, buffers,
                # inputs and seed; it replaces the first (same values, hooks not recounted)
                del output, loss
                run.phase = "forward"
                buffers.restore()
                _seed_all(cfg.seed * 1000 + step + 1)
                output, run.origin = self._traced_forward(model, args, kwargs, is_ref, run.hook_state)
                if run.origin is not None:
                    run.origin.step = step
                run.phase = "loss"
                loss = self.loss_fn(output, (args, kwargs))
        out.losses.append(loss_value)
        if not _finite(loss_value):
            out.nonfinite_loss = True
        if step == 0:
            outs = floating_tensors(output, limit=64)
            if is_ref:
                self.reference.output = [t.detach().float().clone() for t in outs]
            else:
                out.output_rel_err = _relative_error(outs, self.reference.output)
            self._flush(run)
            run.origin = self._origin(run.census, run.pending, is_ref)
        if optimizer is not None and loss.requires_grad:
            run.phase = "backward"
            skipped_before = amp.skipped_steps(0)
            with lines.active() if lines and step == 0 else contextlib.nullcontext():  # custom backward()s
                with amp.scale_loss(loss, optimizer) as scaled:
                    scaled.backward()
            run.phase = "step"
            optimizer.step()
            out.loss_scales.append(float(amp.loss_scale(0)))
            out.last_step_skipped = amp.skipped_steps(0) > skipped_before
            out.skipped_steps += amp.skipped_steps(0) - skipped_before
        self._flush(run)

    def _compare_losses(self, run: "_LevelState") -> None:
        """The fp32 run's losses are the reference; another level's largest relative
        difference from them."""
        out = run.out
        if run.is_ref:
            self.reference.losses = list(out.losses)
        elif self.reference.losses and out.losses:
            n = min(len(out.losses), len(self.reference.losses))
            errs = []
            for a, b in zip(out.losses[:n], self.reference.losses[:n]):
                errs.append(abs(a - b) / abs(b) if b else abs(a - b) if _finite(a) else math.inf)
            out.loss_rel_err = max(errs) if errs else None

    def _describe(self, run: "_LevelState", sites: ConstructionSites) -> None:
        """The lines that ran, each module's and op site's statistics, where inf/NaN were
        first made and first seen."""
        out = run.out
        out.executed = run.lines.by_file() if run.lines else None
        out.modules = self._module_report(run.modules, sites)
        if run.origin is None and run.census is not None:  # step 0 crashed: its calls so far
            run.origin = self._origin(run.census, run.pending, run.is_ref)
        out.origin = run.origin  # before the sites: Census.origin marks the sites whose inputs were tainted
        out.sites = self._site_report(run.census)
        first = [m for m in out.modules if m.forward.first_new_nonfinite is not None]
        if first:
            out.first_nonfinite_module = min(first, key=lambda m: tuple(m.forward.first_new_nonfinite)).name
        firsts = [s for s in out.sites if s.first_new_nonfinite is not None]
        if firsts:
            s = min(firsts, key=lambda s: tuple(s.first_new_nonfinite))
            out.first_nonfinite_site = SiteRef(s.file, s.line, s.op)

    @staticmethod
    def _another_step(step: int, steps: int, out: LevelRun, optimizer) -> bool:
        """The configured steps, then more while the loss scaler is still skipping: a few skips
        are its normal warm-up, halving from 2**16 until the gradients fit in half, and a run
        must not end in the middle of it.  At most ``SCALER_WARMUP_STEPS`` more (2**16 to the
        2**-14 floor); a run whose loss is inf/NaN is not extended, nothing would fit."""
        if step < steps:
            return True
        return (optimizer is not None and bool(out.last_step_skipped) and not out.nonfinite_loss
                and step < steps + SCALER_WARMUP_STEPS)

    def _origin(self, census: "Census", pending: _Pending, is_ref: bool) -> Optional[Origin]:
        try:
            origin = census.origin(pending.bad, None if is_ref else self.reference.nonfinite)
        except Exception:  # a device error while reading the flags: no origin rather than no report
            return None
        if origin is not None:
            origin.step = 0
        return origin

    def _went_nonfinite(self, modules, step: int, loss_value: float) -> bool:
        """Whether this step's forward made inf/NaN the fp32 run had not: in a module's output
        (the hooks) or, without hooks, in the loss."""
        if any(fwd.first_new_nonfinite is not None and fwd.first_new_nonfinite[0] == step for _, _, fwd, _ in modules):
            return True
        ref = self.reference.losses
        return not modules and not _finite(loss_value) and (not ref or step >= len(ref) or _finite(ref[step]))

    def _traced_forward(self, model, args, kwargs, is_ref: bool, state: dict):
        """The forward under a census of its own (no fp32 references: those are step 0's) ->
        (output, origin).  The module hooks record no forward statistics meanwhile: the
        replaced forward recorded them; gradients are recorded as usual."""
        pending = _Pending()
        census = Census(self.user_files, Reference(budget=0), False, pending, [0])
        state["replay"] = True
        try:
            with census:
                output = model(*args, **kwargs)
        finally:
            state["replay"] = False
        pending.flush(self.reference.nonfinite if not is_ref else {}, {} if is_ref else None)
        try:
            origin = census.origin(pending.bad, None if is_ref else self.reference.nonfinite)
        except Exception:
            origin = None
        return output, origin

    def _hook(self, idx, fwd: _Agg, grd: _Agg, pending: _Pending, state: dict, order: list, is_ref: bool):
        reference = self.reference

        def record(table, key, d):
            """Queue ``d``'s statistics; at step 0 keep (O0) or fetch the fp32 reference."""
            step = state["step"]
            ref = None
            if step == 0:
                if is_ref:
                    reference.keep(key, d)
                else:
                    ref = reference.get(key)
            order[0] += 1
            pending.add(table, key + (step,), d, ref, order[0], step, state["full"])

        def grad_hook_for(i):
            def grad_hook(g):
                if g is None or not g.is_floating_point() or not g.numel():
                    return None
                record(grd, ("grad", idx, i), g.detach())
                return None
            return grad_hook

        def hook(module, args, output):
            tensors = floating_tensors(output, limit=4)
            replay = state.get("replay")
            for i, t in enumerate(tensors):
                if not replay:
                    record(fwd, ("fwd", idx, i), t.detach())
                if t.requires_grad and torch.is_grad_enabled():
                    t.register_hook(grad_hook_for(i))
            return None

        return hook

    def _class_source(self, cls) -> Optional[ClassSource]:
        """class_source of a user class, once per class (inspect's source search is slow); a copy."""
        if cls not in self._class_sources:
            user = canonical(getattr(sys.modules.get(cls.__module__), "__file__", "") or "") in self.user_files
            self._class_sources[cls] = class_source(cls) if user else None
        src = self._class_sources[cls]
        return dataclasses.replace(src) if src is not None else None

    def _module_report(self, modules, sites: ConstructionSites) -> list[ModuleStats]:
        rows = []
        for name, mod, fwd, grd in modules:
            cls = type(mod)
            src = self._class_source(cls)
            built = sites.get(mod)
            forward = ForwardStats(**fwd.to_dict(), first_new_nonfinite=fwd.first_new_nonfinite,
                                   first_order=list(fwd.first_order) if fwd.first_order else None,  # (step, order)
                                   order=fwd.first_order[1] if fwd.first_order else None)  # when it first returned
            grad = GradStats(**grd.to_dict(), first_new_nonfinite=grd.first_new_nonfinite)
            weight = getattr(mod, "weight", None)
            if not isinstance(weight, torch.Tensor):
                weight = getattr(mod, "in_proj_weight", None)  # nn.MultiheadAttention
            rows.append(ModuleStats(
                list(weight.shape) if isinstance(weight, torch.Tensor) else None,
                name, f"{cls.__module__}.{cls.__qualname__}" if src is None else cls.__qualname__,
                src, Place(built[0], built[1]) if built else None, forward, grad))
        return rows

    @staticmethod
    def _site_report(census: Optional[Census]) -> list[Site]:
        if census is None:
            return []
        rows = []
        for (file, line, op, col, end_line, end_col), agg in census.sites.items():
            rows.append(Site(**agg.to_dict(), file=file, line=line, op=op, first_new_nonfinite=agg.first_new_nonfinite,
                             inputs_nonfinite=(file, line, op, col, end_line, end_col) in census.tainted,
                             order=agg.first_order[1] if agg.first_order else None, end_line=end_line or line,
                             column=_char_column(file, line, col) if col is not None else None,
                             end_column=_char_column(file, end_line, end_col) if col is not None else None))
        rows.sort(key=lambda r: (r.order or 0))
        return rows


def skip_dynamo_import() -> int:
    """Command-line start-up only: ``torch.optim.Optimizer`` methods are wrapped by
    ``torch._disable_dynamo``, which imports ``torch._dynamo`` (about 4 s on CPU) at their first
    call just to mark them "do not compile".  The verifier never compiles, so in its own process
    it marks them as already handled.  Eager behaviour is identical.  Returns how many methods."""
    if "torch._dynamo" in sys.modules:
        return 0
    try:
        import torch._compile as compile_mod

        inner_code = compile_mod._disable_dynamo(lambda: None).__code__
    except Exception:
        return 0
    count = 0
    for klass in (torch.optim.Optimizer,):
        for value in vars(klass).values():
            fn = getattr(value, "__func__", value)
            if getattr(fn, "__code__", None) is not inner_code or not fn.__closure__:
                continue
            names = fn.__code__.co_freevars
            if "fn" not in names:
                continue
            original = fn.__closure__[names.index("fn")].cell_contents
            if getattr(original, "__dynamo_disable", None) is None:
                original.__dynamo_disable = original
                count += 1
    return count


def keep_freed_memory() -> bool:
    """Command-line start-up only: keep freed memory in the process (glibc malloc) instead of
    handing every large block back to the system.  torch allocates each CPU temporary with
    ``malloc``; blocks over glibc's mmap threshold (at most 32 MiB) are mapped and unmapped
    every time, so each new 50 MB tensor (the logits of a 50257-token head) costs
    12,000 page faults -- a subtraction ran 12x slower than its arithmetic.  Memory use
    stays at the peak instead of shrinking between steps.  Returns whether it applied."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
        # mallopt returns 1 on success; 1 GiB is above any one tensor of the models verify runs on CPU
        return bool(libc.mallopt(M_MMAP_THRESHOLD, 1 << 30)) and bool(libc.mallopt(M_TRIM_THRESHOLD, 1 << 31))
    except (OSError, AttributeError):
        return False

