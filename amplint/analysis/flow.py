"""Function summaries for the constant rules: which parameters of a function (or of a
hand-written module's ``__init__``) reach a fill value, a mask addition or a
stabilising epsilon, so that a call passing ``-1e9`` or ``1e-12`` into them -- in this
file, in another linted file, or into a well-known library helper -- is found.

* :func:`summaries` -- this file's functions and classes with such parameters
  (computed once per file, transitively through calls between them);
* :func:`collect_facts` -- the JSON-able part, for the project index
  (``Rule.collect``), keyed by name;
* :func:`sinks_of_call` -- what a call's callee does with its parameters: from this
  file, another linted file (through ``ctx.project``), or :data:`LIBRARY_SINKS`.

Used by AMP101 (fills, mask additions) and AMP102 (epsilons).  Never imports torch.
"""
from __future__ import annotations

import ast
import dataclasses
from typing import Optional

from ..semantic.configs import parameter
from .calls import argument
from .constants import known_not_half

FILL = "fill"
EPS = "eps"

_FILL_METHODS = ("masked_fill", "masked_fill_")
#: library functions that take an eps they add in the input's dtype (pure-Python
#: kernels: ``F.normalize`` is ``x / x.norm(...).clamp_min(eps)``)
EPS_FUNCTIONS = {
    "torch.nn.functional.normalize": ("eps", 3, 1e-12),
    "torch.nn.functional.cosine_similarity": ("eps", 3, 1e-8),
    "torch.nn.functional.pairwise_distance": ("eps", 3, 1e-6),
}
#: top-level packages whose functions are neither summarised nor in the table
_NOT_LINTED = frozenset(("torch", "numpy", "math", "einops", "typing", "collections", "functools", "os", "sys",
                         "logging", "warnings", "itertools", "random", "copy", "json", "re", "time"))
_STAB_CALLS = ("log", "log2", "log10", "sqrt", "rsqrt", "reciprocal", "log_", "sqrt_", "rsqrt_", "reciprocal_")
_CLAMPS = ("clamp", "clamp_", "clamp_min", "clamp_min_", "clip", "clip_")


@dataclasses.dataclass(frozen=True)
class Sink:
    """Parameter ``param`` (call position ``position``, ``self`` not counted; None:
    keyword-only) reaches a ``kind`` use; ``default`` is its default value when it
    folds to a number.  ``when``: parameters that must be truthy (True) or falsy
    (False) for the use to run (``if not memory_efficient: ... else: masked_fill``)."""

    kind: str
    param: str
    position: Optional[int]
    default: Optional[float] = None
    path: str = ""
    line: int = 0
    column: int = 0
    when: tuple = ()
    #: where a library entry was read (name==version and file)
    source: str = ""

    def to_json(self) -> list:
        return [self.kind, self.param, self.position, self.default, self.line, self.column, [list(w) for w in self.when]]

    @classmethod
    def from_json(cls, path: str, data: list) -> "Sink":
        kind, param, position, default, line, column, when = data
        return cls(kind, param, position, default, path, line, column, tuple(tuple(w) for w in when))


#: well-known library helpers that take a fill value or an eps, read from the
#: distributions cached by bench/realcode/fetch.py
LIBRARY_SINKS: dict[str, tuple[Sink, ...]] = {
    "allennlp.nn.util.masked_softmax": (
        Sink(FILL, "mask_fill_value", 4, -1e32, when=(("memory_efficient", True),),
             source="allennlp==0.9.0 allennlp/nn/util.py:273"),
    ),
    "allennlp.nn.util.masked_max": (
        Sink(FILL, "min_val", 4, -1e7, source="allennlp==0.9.0 allennlp/nn/util.py:338"),
    ),
    "allennlp.nn.util.replace_masked_values": (
        Sink(FILL, "replace_with", 2, None, source="allennlp==0.9.0 allennlp/nn/util.py:780"),
    ),
    # allennlp.nn.util.masked_mean is not one: its eps clamps an fp32 count (mask.float())
}


def _library_eps(names: tuple, position: Optional[int], default: float, source: str) -> dict:
    """One eps entry under each public name of a helper (its module and re-exports);
    ``source`` is ``"name==version path:line (the expression)"``, and the entry's path
    and line point there (messages show them)."""
    where, _, _ = source.partition(" (")
    path, _, line = where.rpartition(":")
    sink = Sink(EPS, "eps", position, default, path=path, line=int(line), source=source)
    return {name: (sink,) for name in names}


# Helpers that add their eps in the input's dtype (read from the pinned wheels; a helper
# that upcasts first -- timm 0.6's evo_norm ``x.float().var()``, allennlp's
# masked_mean -- is not listed).
LIBRARY_SINKS.update({
    **_library_eps(("kornia.geometry.conversions.convert_points_from_homogeneous",), 1, 1e-8,
                   "kornia==0.6.12 kornia/geometry/conversions.py:180 (1.0 / (z_vec + eps))"),
    **_library_eps(("kornia.enhance.normalize_min_max", "kornia.enhance.normalize.normalize_min_max"), 3, 1e-6,
                   "kornia==0.6.12 kornia/enhance/normalize.py:287 (x_max - x_min + eps)"),
    **_library_eps(("kornia.color.rgb_to_hsv", "kornia.color.hsv.rgb_to_hsv"), 1, 1e-8,
                   "kornia==0.6.12 kornia/color/hsv.py:41 (deltac / (max_rgb + eps))"),
    **_library_eps(("segment_anything.modeling.common.LayerNorm2d",), 1, 1e-6,
                   "segment-anything==1.0 segment_anything/modeling/common.py:41 (torch.sqrt(s + self.eps))"),
    **_library_eps(("timm.models.layers.evo_norm.EvoNormSample2d", "timm.models.layers.EvoNormSample2d"), 3, 1e-5,
                   "timm==0.4.5 timm/models/layers/evo_norm.py:81 (x.var(...) + self.eps)"),
    **_library_eps(("timm.models.layers.evo_norm.EvoNormBatch2d", "timm.models.layers.EvoNormBatch2d"), 3, 1e-5,
                   "timm==0.4.5 timm/models/layers/evo_norm.py:49 (x.var(...) + self.eps)"),
})


def _positions(func: ast.AST, method: bool) -> dict[str, Optional[int]]:
    args = func.args
    positional = [a.arg for a in args.posonlyargs + args.args]
    if method and positional:
        positional = positional[1:]
    out = {name: i for i, name in enumerate(positional)}
    out.update({a.arg: None for a in args.kwonlyargs})
    return out


def _guards(ctx, node: ast.AST, func: ast.AST, params) -> Optional[tuple]:
    """The parameter truth values the branches around ``node`` require; None when a
    branch depends on something else too (still runs for some calls: kept, unguarded)."""
    when = []
    child = node
    for anc in ctx.ancestors(node):
        if anc is func:
            break
        if isinstance(anc, ast.If) and child is not anc.test:
            test, truth = anc.test, child in anc.body
            if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
                test, truth = test.operand, not truth
            if isinstance(test, ast.Name) and test.id in params:
                when.append((test.id, truth))
        child = anc
    return tuple(when)


def _is_param(expr: ast.AST, params) -> Optional[str]:
    if isinstance(expr, ast.Name) and expr.id in params:
        return expr.id
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub):
        return _is_param(expr.operand, params)
    return None


def stabilising(ctx, add: ast.BinOp) -> bool:
    """Whether ``add`` (``x + eps``) is a denominator, or the argument of a root,
    reciprocal or log (directly or through ``** -0.5``)."""
    child, parent = add, ctx.parent(add)
    if isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.Pow) and parent.left is child:
        child, parent = parent, ctx.parent(parent)
    if isinstance(parent, ast.BinOp) and isinstance(parent.op, (ast.Div, ast.FloorDiv)) and parent.right is child:
        return True
    if isinstance(parent, ast.Call) and child in parent.args:
        f = parent.func
        name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
        return name in _STAB_CALLS
    if isinstance(parent, ast.Attribute) and parent.value is child and parent.attr in _STAB_CALLS:
        return True
    return False


def _candidate_uses(ctx):
    """(kind, the expression that may be a parameter, use node) over the calls and
    binary operations the engine's walk already collected: no extra walk of the file."""
    eps_attrs = {q.rsplit(".", 1)[1] for q in EPS_FUNCTIONS}
    for node in ctx.nodes("Call"):
        f = node.func
        name = f.attr if f.__class__ is ast.Attribute else getattr(f, "id", "")
        if name in _FILL_METHODS:
            value = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "value"), None)
            if value is not None:
                yield FILL, value, node
        elif name in _CLAMPS:
            bound = next((k.value for k in node.keywords if k.arg == "min"), None)
            if bound is None and f.__class__ is ast.Attribute and node.args and ctx.qualname(f) is None:
                bound = node.args[0]
            if bound is not None:
                yield EPS, bound, node
        elif name in eps_attrs:
            qn = ctx.qualname(f)
            if qn in EPS_FUNCTIONS:
                kw, pos, _ = EPS_FUNCTIONS[qn]
                value = next((k.value for k in node.keywords if k.arg == kw), None)
                if value is None and len(node.args) > pos:
                    value = node.args[pos]
                if value is not None:
                    yield EPS, value, node
    for node in ctx.nodes("BinOp"):
        op = node.op.__class__
        if op is ast.Add:
            for side in (node.left, node.right):
                if side.__class__ in (ast.Name, ast.Attribute) and stabilising(ctx, node):
                    yield EPS, side, node
        elif op is ast.Mult:  # scores + (1 - mask) * mask_value
            parent = ctx.parent(node)
            if parent.__class__ is ast.BinOp and parent.op.__class__ in (ast.Add, ast.Sub):
                for side in (node.left, node.right):
                    if side.__class__ in (ast.Name, ast.Attribute, ast.UnaryOp):
                        yield FILL, side, node


class _Summaries:
    def __init__(self, ctx):
        self.ctx = ctx
        #: name -> sinks, for module-level functions and hand-written module classes
        self.by_name: dict[str, list[Sink]] = {}

    def build(self) -> "_Summaries":
        ctx = self.ctx
        units = {}  # id(function analysed) -> (name, positions, self attrs, default owner)
        for name, func in ctx.functions.items():
            units[id(func)] = (name, func, _positions(func, False), {}, func)
        for name, cls in ctx.classes.items():
            init = ctx.method(cls, "__init__")
            forward = ctx.method(cls, "forward")
            if init is None or forward is None or not ctx.is_module_class(cls):
                continue
            positions = _positions(init, True)
            stored = {}
            for attr, stmts in ctx.self_assignments(init).items():
                if len(stmts) == 1 and isinstance(stmts[0].value, ast.Name) and stmts[0].value.id in positions:
                    stored[attr] = stmts[0].value.id
            if stored:
                units[id(forward)] = (name, forward, positions, stored, init)
        if not units:
            return self
        for kind, expr, use in _candidate_uses(ctx):
            func = ctx.enclosing_function(use)
            unit = units.get(id(func)) if func is not None else None
            if unit is None:
                continue
            name, func, positions, stored, owner = unit
            param = _is_param(expr, positions)
            if param is None and (expr.__class__ is ast.Attribute and expr.value.__class__ is ast.Name
                                  and expr.value.id == "self"):
                param = stored.get(expr.attr)
            if param is not None and kind == EPS and use.__class__ is ast.BinOp:
                other = use.left if expr is use.right else use.right
                if known_not_half(ctx, other, use):
                    continue  # h = x.float(); h * rsqrt(h.pow(2).mean(-1) + self.eps)
            if param is not None:
                self.by_name.setdefault(name, []).append(self._sink(kind, param, use, positions, owner, func))
        # helpers calling helpers of this file: def l1norm(t, eps=1e-8): return normalize(t, eps),
        # through chains of any length.  Each call site is found once (by the function it
        # is in) and each sink crosses each call edge once: a worklist, linear in the
        # call edges, never a scan of every call per helper (n helpers: n^2).
        callers: dict[str, list] = {}  # callee name -> [(caller unit, call)]
        for call in ctx.nodes("Call"):
            if call.func.__class__ is not ast.Name:
                continue
            func = ctx.enclosing_function(call)
            unit = units.get(id(func)) if func is not None else None
            if unit is None or unit[3] or call.func.id == unit[0]:
                continue  # not a helper of this file, a module class's forward, or a self-call
            callers.setdefault(call.func.id, []).append((unit, call))
        self.by_name = {k: _unique(v) for k, v in self.by_name.items()}
        seen = {name: {(s.kind, s.param, s.when) for s in sinks} for name, sinks in self.by_name.items()}
        todo = [(name, sink) for name, sinks in self.by_name.items() for sink in sinks]
        while todo:
            callee, sink = todo.pop()
            for (name, func, positions, stored, owner), call in callers.get(callee, ()):
                arg = argument(call, sink.param, sink.position)
                p = _is_param(arg, positions) if arg is not None else None
                if not p:
                    continue
                new = self._sink(sink.kind, p, call, positions, owner, func)
                key = (new.kind, new.param, new.when)
                if key in seen.setdefault(name, set()):
                    continue
                seen[name].add(key)
                self.by_name.setdefault(name, []).append(new)
                todo.append((name, new))
        return self

    def _sink(self, kind, param, use, positions, owner, func) -> Sink:
        ctx = self.ctx
        _, default = parameter(owner, param)
        value = ctx.evaluate(default) if default is not None else None
        folded = value.value if value is not None and isinstance(value.value, (int, float)) else None
        where = default if default is not None else use
        return Sink(kind, param, positions.get(param), folded, ctx.path, where.lineno,
                    ctx.char_col(where.lineno, where.col_offset) + 1, _guards(ctx, use, func, positions))


def _unique(sinks: list[Sink]) -> list[Sink]:
    seen, out = set(), []
    for s in sinks:
        key = (s.kind, s.param, s.when)
        if key not in seen:
            seen.add(key)
            out.append(s)
    return out


#: kept for the rules that called the private copy (the one "argument by keyword or
#: position" is :func:`amplint.analysis.calls.argument`)
_argument = argument


class FlowSummaries:
    """This file's functions and hand-written module classes whose parameters reach a
    fill, a mask addition or an eps: ``ctx.get(FlowSummaries).by_name``."""

    def __init__(self, ctx):
        self.by_name: dict[str, list[Sink]] = _Summaries(ctx).build().by_name


def summaries(ctx) -> dict[str, list[Sink]]:
    """This file's functions and hand-written module classes whose parameters reach a
    fill, a mask addition or an eps (built once per file)."""
    return ctx.get(FlowSummaries).by_name


def collect_facts(ctx, kind: str) -> Optional[dict]:
    """The ``kind`` sinks of this file's functions, JSON-able, for the project index."""
    found = {name: [s.to_json() for s in sinks if s.kind == kind] for name, sinks in summaries(ctx).items()}
    found = {k: v for k, v in found.items() if v}
    return {"by_name": found} if found else None


class CallableNames:
    """(plain names, module aliases) a call may go through to reach a summarised
    function: this file's functions and classes and names imported from outside torch
    and the standard library.  Built once per file: most calls fail this test."""

    def __init__(self, ctx):
        imported = set()
        for local in set(ctx.imports) | set(ctx.relative_imports):
            path = ctx.import_path(local)
            if path and path.partition(".")[0] not in _NOT_LINTED:
                imported.add(local)
        self.names = frozenset(imported | set(ctx.functions) | set(ctx.classes))
        self.imported = frozenset(imported)


def _callable_names(ctx) -> tuple[frozenset, frozenset]:
    found = ctx.get(CallableNames)
    return found.names, found.imported


def sinks_of_call(ctx, call: ast.Call, kind: str, code: str) -> list[Sink]:
    """The ``kind`` sinks of the function or class ``call`` calls: one of this file, of
    another linted file (the facts rule ``code`` collected), or a library helper."""
    func = call.func
    names, modules = _callable_names(ctx)
    if func.__class__ is ast.Name:
        if func.id not in names:
            return []
    elif func.__class__ is ast.Attribute:
        if func.value.__class__ is not ast.Name or func.value.id not in modules:
            return []
    else:
        return []
    if isinstance(func, ast.Name):
        local = func.id
        if local in ctx.functions or local in ctx.classes:
            found = summaries(ctx).get(local, ())
            if found or ctx.import_origin(local) is None:
                return [s for s in found if s.kind == kind]
        origin = ctx.import_origin(local)
    elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        base = ctx.import_path(func.value.id)  # util.masked_softmax
        origin = (base, func.attr) if base else None
    else:
        return []
    if origin is None:
        return []
    module, name = origin
    if module.partition(".")[0] in _NOT_LINTED:
        return []
    library = LIBRARY_SINKS.get(f"{module}.{name}")
    if library:
        return [s for s in library if s.kind == kind]
    if ctx.project is None or not module:
        return []
    found = ctx.project.named(code, name, module, exclude_path=ctx.path)
    if len(found) != 1:
        return []
    path, data = found[0]
    return [Sink.from_json(path, d) for d in data if d[0] == kind]


def call_runs_sink(ctx, call: ast.Call, sink: Sink) -> bool:
    """Whether the branch conditions of ``sink`` hold for ``call`` (known from its
    arguments or the library defaults); an unknown condition counts as not holding."""
    for param, truth in sink.when:
        arg = argument(call, param, None)
        if arg is None:
            return False  # the library default (False for memory_efficient) does not run it
        value = arg.value if isinstance(arg, ast.Constant) else None
        if value is None or bool(value) != truth:
            return False
    return True


def passed_arguments(ctx, call: ast.Call, kind: str, code: str) -> list[tuple[Sink, ast.AST]]:
    """(sink, the expression ``call`` passes for it) for the ``kind`` sinks of its callee
    that ``call`` gives a value of its own: not a ``*args`` entry, and not a parameter
    of the calling function handed on (that function is then a sink itself, and its
    callers are the ones checked)."""
    out = []
    enclosing = ctx.enclosing_function(call)
    for sink in sinks_of_call(ctx, call, kind, code):
        arg = argument(call, sink.param, sink.position)
        if arg is None or arg.__class__ is ast.Starred:
            continue
        if arg.__class__ is ast.Name and enclosing is not None and parameter(enclosing, arg.id)[0] is not None:
            continue
        out.append((sink, arg))
    return out
