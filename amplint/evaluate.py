"""Constant folding over ``ast`` with provenance.

``Evaluator(ctx).evaluate(expr)`` returns a :class:`Value` -- the number and the chain of
definitions it came through -- or None when the expression is not a compile-time
constant.  It never imports or runs the code it reads.

What it follows:

* literals, unary/binary arithmetic (``1e4 * 1e5``, ``4 * n_embd``, ``n // h``),
  ``float("-inf")``, ``int(...)``, ``math.inf``/``np.inf``/``torch.inf``, ``math.pi``;
* a name: a single local assignment in the enclosing function, else the parameter's
  default (``def attention(q, k, mask_value=-1e9)``), else a module-level ``NAME = value``;
* ``self.attr``: a class-level ``attr = value`` or ``self.attr = expr`` in ``__init__``
  (evaluated there, so ``__init__`` defaults and ``config.attr`` flow through), also in
  base classes of the same file;
* ``config.attr`` / ``self.config.attr`` / ``cfg.attr``: the default of ``attr`` in a
  config class -- dataclass-style fields (``n_embd: int = 770``) or ``__init__`` keyword
  defaults stored on ``self`` (``vocab_size=30522``), also when ``__init__`` stores the
  parameter under a branch (``elif isinstance(x, int): self.vocab_size = x``) -- in this
  file or, through the project index, in another linted file;
* a parameter without a default, and ``config.attr`` of one when no config class gives a
  default: what every call of the function in this file passes -- a keyword, a
  positional argument, an item of a ``**kwargs`` dict (``args["vocab_size"] = 50257``),
  or an attribute set on the object before the call (``cfg.vocab_size = 65``); the calls
  must agree;
* a numeric module constant of another linted file (``constant.INFINITY_NUMBER``,
  ``from .consts import NEG_INF``).
"""
from __future__ import annotations

import ast
import dataclasses
import math
import operator
import sys
from typing import Any, Iterator, Optional, Protocol

from .analysis.calls import argument
from .bindings import bound_names
from .rule import Related
from .semantic import constants as module_constants
from .semantic.configs import (  # noqa: F401 -- also this module's public names, as before
    CONFIG_CLASS_SUFFIXES,
    CONFIG_NAMES,
    _stored_parameter_names,
    annotation_class,
    config_fields,
    declares_field,
    is_config_class,
    is_config_expr,
    parameter,
)



class Scope(Protocol):
    """What the evaluator reads of a file (:class:`amplint.context.FileContext` is one):
    named here so that this module does not depend on the context, which builds it."""

    path: str
    tree: ast.Module
    project: Any
    classes: dict
    functions: dict
    calls: list

    def parent(self, node: ast.AST) -> Optional[ast.AST]: ...
    def enclosing_function(self, node: ast.AST) -> Optional[ast.AST]: ...
    def enclosing_class(self, node: ast.AST) -> Optional[ast.ClassDef]: ...
    def bindings(self, func: ast.AST) -> dict: ...
    def self_assignments(self, func: ast.AST) -> dict: ...
    def module_assignments(self, name: str) -> list: ...
    def method(self, cls: ast.ClassDef, name: str) -> Optional[ast.AST]: ...
    def base_classes(self, cls: ast.ClassDef) -> Iterator[ast.ClassDef]: ...
    def qualname(self, expr: ast.AST) -> Optional[str]: ...
    def import_origin(self, local: str) -> Optional[tuple[str, str]]: ...
    def import_path(self, local: str) -> Optional[str]: ...
    def related(self, node: ast.AST, note: str, path: Optional[str] = None) -> Related: ...

_MAX_DEPTH = 12

_NAMED_CONSTANTS = {
    "math.inf": math.inf, "math.pi": math.pi, "math.e": math.e, "math.nan": math.nan,
    "numpy.inf": math.inf, "numpy.pi": math.pi, "numpy.nan": math.nan, "numpy.NINF": -math.inf,
    "numpy.PINF": math.inf, "torch.inf": math.inf, "torch.pi": math.pi, "torch.nan": math.nan,
}
_BINOPS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
#: the most related locations a value carries (the nearest): a chain of 10,000 aliases or
#: helpers must not give each of its findings a 10,000-step trail (quadratic in time and size)
MAX_TRAIL = 8


#: one-argument math functions folded on constants
_MATH_FUNCTIONS = {"math.log": math.log, "math.log2": math.log2, "math.log10": math.log10,
                   "math.sqrt": math.sqrt, "math.exp": math.exp}


@dataclasses.dataclass(frozen=True)
class Value:
    """A folded number and where it came from."""

    value: float
    #: definitions the value flowed through, use site first excluded (nearest first)
    origin: tuple[Related, ...] = ()
    #: the literal node the number was written as, when it is in this file
    literal: Optional[ast.AST] = None

    #: the value is a bound, not the number: an integer power too large to compute
    #: (``10**10000``) stands as the largest float, with its sign -- past any float type's
    #: range, as the number is -- and is never an operand of further folding
    huge: bool = False

    def via(self, related: Related) -> "Value":
        return Value(self.value, ((related,) + self.origin)[:MAX_TRAIL], self.literal, self.huge)


#: the longest left-nested operator chain folded (a longer one is not folded)
_MAX_CHAIN = 10_000


def _bounded_power(base, exponent) -> tuple[Any, bool]:
    """``base ** exponent`` and whether it is a bound: an integer power of more than 308
    digits is not computed (``9**9**9`` has 370 million) but bounded by the largest float
    with the result's sign -- past every float type's range, as the number is.  Float and
    negative powers are float arithmetic (constant time; an overflow is Python's own
    error there, as when the code runs)."""
    if isinstance(base, int) and isinstance(exponent, int) and exponent >= 0 and abs(base) > 1:
        if exponent * math.log10(abs(base)) > 308:
            return (-1 if base < 0 and exponent % 2 else 1) * sys.float_info.max, True
    return operator.pow(base, exponent), False


class Evaluator:
    def __init__(self, ctx: Scope):
        self.ctx = ctx
        self._config_fields: Optional[dict[str, dict[str, tuple[ast.AST, ast.AST]]]] = None
        self._call_index: Optional[dict[str, list[ast.Call]]] = None
        self._store_tables: dict[int, dict] = {}
        #: (function, parameter) pairs being followed to their call sites (cycles)
        self._active: set = set()
        self._call_site_memo: dict = {}
        self._call_sites_memo: dict = {}
        #: id of an expression -> (the expression, its value), for questions asked from outside a fold
        self._answers: dict[int, tuple[ast.AST, Optional[Value]]] = {}
        #: module constant -> its value (None: not a number), built once in source order
        self._module_values: Optional[dict[str, Optional[Value]]] = None

    def _module_constant(self, name: str):
        """The value of module-level ``name`` from the table of the file's constants, each
        folded once, in source order, from the ones above it: an alias chain ``K1 = K0``
        ... ``K20000 = K19999`` costs one step per name instead of a recursion that stops
        at ``_MAX_DEPTH``.  _MISSING: not in the table (yet)."""
        if self._module_values is None:
            self._module_values = {}
            ctx = self.ctx
            for stmt in getattr(ctx.tree, "body", ()):
                if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                    target = stmt.targets[0].id
                elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
                    target = stmt.target.id
                else:
                    continue
                assignments = ctx.module_assignments(target)
                if len(assignments) != 1 or assignments[0] is not stmt:
                    continue
                inner = self.evaluate(stmt.value, None, 0)
                self._module_values[target] = None if inner is None else inner.via(
                    ctx.related(stmt, f"`{target}` is defined here"))
        return self._module_values.get(name, _MISSING)

    def bindings(self, func: ast.AST) -> dict[str, list[ast.AST]]:
        return self.ctx.bindings(func)

    def self_assignments(self, func: ast.AST) -> dict[str, list[ast.AST]]:
        return self.ctx.self_assignments(func)

    # --- entry -----------------------------------------------------------------------

    def evaluate(self, expr: ast.AST, scope: Optional[ast.AST] = None, depth: int = 0) -> Optional[Value]:
        """Fold ``expr``; ``scope`` is the function whose names are visible (default:
        the function enclosing ``expr``)."""
        if depth > _MAX_DEPTH or expr is None:
            return None
        if depth or scope is not None or self._active:
            try:
                return self._eval(expr, scope, depth)
            except (ArithmeticError, ValueError, TypeError, RecursionError):
                return None
        # a rule's question (``ctx.evaluate``): the same expressions are asked about by
        # several rules and analyses (half the questions of a run repeat one), answered once
        # (the entry keeps its node alive: a rule's temporary node, ``ast.Constant(None)``,
        # cannot be freed and its id given to another node while the answer is kept)
        kept = self._answers.get(id(expr))
        if kept is not None and kept[0] is expr:
            return kept[1]
        try:
            found = self._eval(expr, None, 0)
        except (ArithmeticError, ValueError, TypeError):
            found = None
        except RecursionError:  # (depends on the caller's stack: not kept)
            return None
        self._answers[id(expr)] = (expr, found)
        return found

    def _eval(self, expr: ast.AST, scope, depth) -> Optional[Value]:
        if isinstance(expr, ast.Constant):
            v = expr.value
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                return None
            return Value(v, (), expr)
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, (ast.USub, ast.UAdd)):
            inner = self.evaluate(expr.operand, scope, depth + 1)
            if inner is None:
                return None
            value = -inner.value if isinstance(expr.op, ast.USub) else inner.value
            return Value(value, inner.origin, inner.literal, inner.huge)
        if isinstance(expr, ast.BinOp) and type(expr.op) in _BINOPS:
            # a left-nested chain (``1e5 + 1e5 + ... + 1e5``, 50 terms or 5,000) is folded
            # in one loop along its left spine: its length is not a nesting depth
            spine = [expr]
            while (isinstance(spine[-1].left, ast.BinOp) and type(spine[-1].left.op) in _BINOPS
                   and len(spine) < _MAX_CHAIN):
                spine.append(spine[-1].left)
            left = self.evaluate(spine[-1].left, scope, depth + 1)
            for node in reversed(spine):
                if left is None:
                    return None
                right = self.evaluate(node.right, scope, depth + 1)
                if right is None or left.huge or right.huge:
                    return None  # a bounded stand-in is no operand: its result would be made up
                value, huge = _bounded_power(left.value, right.value) if isinstance(node.op, ast.Pow) else \
                    (_BINOPS[type(node.op)](left.value, right.value), False)
                literal = left.literal if not right.origin and left.origin else None
                left = Value(value, (left.origin + right.origin)[:MAX_TRAIL], literal, huge)
            return left
        if isinstance(expr, ast.Call):
            return self._eval_call(expr, scope, depth)
        if isinstance(expr, ast.Name):
            return self._eval_name(expr, scope, depth)
        if isinstance(expr, ast.Attribute):
            return self._eval_attribute(expr, scope, depth)
        return None

    def _eval_call(self, call: ast.Call, scope, depth) -> Optional[Value]:
        func = call.func
        name = func.id if isinstance(func, ast.Name) else self.ctx.qualname(func)
        if name in ("float", "int", "numpy.float32", "numpy.float64") and len(call.args) == 1 and not call.keywords:
            arg = call.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                value = float(arg.value.strip())
                return Value(int(value) if name == "int" else value, (), call)
            inner = self.evaluate(arg, scope, depth + 1)
            if inner is None:
                return None
            return Value(int(inner.value) if name == "int" else float(inner.value), inner.origin, inner.literal)
        if name in _MATH_FUNCTIONS and len(call.args) == 1 and not call.keywords:  # `math.log(1. / 0.01)`
            inner = self.evaluate(call.args[0], scope, depth + 1)
            try:
                return None if inner is None else Value(_MATH_FUNCTIONS[name](inner.value), inner.origin, inner.literal)
            except (ValueError, OverflowError):
                return None
        return None

    # --- names -----------------------------------------------------------------------

    def _eval_name(self, name: ast.Name, scope, depth) -> Optional[Value]:
        ctx = self.ctx
        func = scope if scope is not None else ctx.enclosing_function(name)
        while func is not None:
            found = self._local_value(func, name.id, depth)
            if found is not _MISSING:
                return found
            func = ctx.enclosing_function(func)
        tabled = self._module_constant(name.id)
        if tabled is not _MISSING:
            if tabled is not None:
                return tabled
        assignments = ctx.module_assignments(name.id) if tabled is _MISSING else ()
        if len(assignments) == 1 and not isinstance(assignments[0], ast.AugAssign):
            stmt = assignments[0]
            inner = self.evaluate(stmt.value, None, depth + 1) if stmt.value is not None else None
            if inner is not None:
                return inner.via(ctx.related(stmt, f"`{name.id}` is defined here"))
        qn = ctx.qualname(name)
        if qn in _NAMED_CONSTANTS:
            return Value(_NAMED_CONSTANTS[qn], (), name)
        origin = ctx.import_origin(name.id) if ctx.project is not None else None
        if origin is not None:  # from .constants import NEG_INF
            return self.imported_constant(origin[0], origin[1])
        return None

    def imported_constant(self, module: str, name: str) -> Optional[Value]:
        """A numeric module constant of another linted file: ``name`` in ``module``."""
        found = module_constants.imported(self.ctx.project, module, name, self.ctx.path)
        if found is None:
            return None
        path, value, line, column = found
        return Value(value, (Related(path, line, column, f"`{name}` is defined here"),))

    def _local_value(self, func: ast.AST, name: str, depth: int):
        """The value of ``name`` inside ``func``: one local assignment, or a parameter
        default.  Returns _MISSING when ``func`` does not bind ``name``."""
        assigned = self.bindings(func).get(name, ())
        param, default = parameter(func, name)
        if assigned:
            if param is not None or len(assigned) > 1:
                return None  # rebound: not a constant
            stmt = assigned[0]
            if not isinstance(stmt, (ast.Assign, ast.AnnAssign)) or stmt.value is None:
                return None
            inner = self.evaluate(stmt.value, func, depth + 1)
            return None if inner is None else inner.via(self.ctx.related(stmt, f"`{name}` is assigned here"))
        if param is None:
            return _MISSING
        if default is None:
            # no default: what the callers in this file pass (TransformerModel(cfg, vocab=vocab))
            return self._from_call_sites(func, name, depth, _FieldOf(self, None))
        # a float default (an eps, a tolerance) every caller overrides is dead; an integer
        # default is a size, the design value a fix edits (callers are often examples)
        float_default = isinstance(default, ast.Constant) and isinstance(default.value, float)
        passed = self._overriding_callers(func, name, depth) if float_default else None
        if passed is not None:
            return passed  # the default is dead: every caller in this file passes its own value
        inner = self.evaluate(default, None, depth + 1)
        if inner is None:
            return None
        fname = getattr(func, "name", "<lambda>")
        return inner.via(self.ctx.related(default, f"default of parameter `{name}` of `{fname}`"))

    # --- attributes ------------------------------------------------------------------

    def _eval_attribute(self, attr: ast.Attribute, scope, depth) -> Optional[Value]:
        ctx = self.ctx
        qn = ctx.qualname(attr)
        if qn in _NAMED_CONSTANTS:
            return Value(_NAMED_CONSTANTS[qn], (), attr)
        base = attr.value
        if isinstance(base, ast.Name) and base.id in ("self", "cls"):
            cls = ctx.enclosing_class(attr)
            if cls is not None:
                found = self._class_attribute(cls, attr.attr, depth)
                if found is not None:
                    return found
            return None
        config = is_config_expr(base)
        if config:
            # a config class's default (this file's, else another linted file's) is the
            # design value: call sites in the same file are often examples building a tiny model
            found = self.config_default(attr.attr, annotation_class(ctx, base, attr))
            if found is not None:
                return found
        if isinstance(base, ast.Name) and base.id not in ("self", "cls"):
            func = scope if scope is not None else ctx.enclosing_function(attr)
            param, default = parameter(func, base.id) if func is not None else (None, None)
            if param is not None and default is None and not self.bindings(func).get(base.id):
                # `config.vocab_size` of a parameter: the objects the callers in this file pass
                found = self._from_call_sites(func, base.id, depth, _FieldOf(self, attr.attr))
                if found is not None:
                    return found
        if isinstance(base, ast.Name) and ctx.project is not None:
            module = ctx.import_path(base.id)  # import a.constants as C; C.NEG_INF
            if module is not None:
                return self.imported_constant(module, attr.attr)
        return None

    def _class_attribute(self, cls: ast.ClassDef, name: str, depth: int) -> Optional[Value]:
        ctx = self.ctx
        for klass in (cls, *ctx.base_classes(cls)):
            values = []
            for stmt in klass.body:
                if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and name in bound_names(stmt) and stmt.value is not None:
                    values.append((stmt, None))
            init = ctx.method(klass, "__init__")
            if init is not None:
                values.extend((node, init) for node in self.self_assignments(init).get(name, ()))
            if not values:
                continue
            results = [self.evaluate(stmt.value, scope, depth + 1) for stmt, scope in values]
            if any(r is None for r in results) or len({r.value for r in results}) != 1:
                return None
            stmt = values[0][0]
            return results[0].via(ctx.related(stmt, f"`self.{name}` is set here"))
        return None

    # --- call sites ------------------------------------------------------------------

    def _calls_by_name(self) -> dict[str, list[ast.Call]]:
        if self._call_index is None:
            index: dict[str, list[ast.Call]] = {}
            for call in self.ctx.calls:
                f = call.func
                key = f.id if f.__class__ is ast.Name else f.attr if f.__class__ is ast.Attribute else None
                if key is not None:
                    index.setdefault(key, []).append(call)
            self._call_index = index
        return self._call_index

    def call_sites_passing(self, func: ast.AST, name: str) -> tuple[list[ast.Call], Optional[int]]:
        """The calls of ``func`` in this file, and the position at which they pass its
        parameter ``name`` (None: keyword-only)."""
        calls, offset = self._call_sites(func)
        positional = [a.arg for a in func.args.posonlyargs + func.args.args][offset:]
        return calls, positional.index(name) if name in positional else None

    def _call_sites(self, func: ast.AST) -> tuple[list[ast.Call], int]:
        """The calls of ``func`` in this file and how many leading parameters the call
        does not pass (``self``): ``Model(...)`` for ``Model.__init__``, ``f(...)`` for a
        module-level function, ``self.m(...)`` for a method."""
        cached = self._call_sites_memo.get(id(func))
        if cached is None:
            cached = self._call_sites_memo[id(func)] = self._find_call_sites(func)
        return cached

    def _find_call_sites(self, func: ast.AST) -> tuple[list[ast.Call], int]:
        ctx = self.ctx
        owner = ctx.parent(func)
        if owner.__class__ is ast.ClassDef:
            if func.name == "__init__":
                name, offset = owner.name, 1
                # nn.Linear(...) is no call of this file's class Linear (peft's LoRA Linear)
                calls = [c for c in self._calls_by_name().get(name, ()) if c.func.__class__ is ast.Name or
                         (c.func.__class__ is ast.Attribute and not (ctx.qualname(c.func) or "").startswith("torch."))]
                # `cls(hidden_channels=128, num_radial=6)` in the class's own classmethod
                # (a pretrained-config factory, torch_geometric's DimeNet.from_qm9_pretrained)
                calls += [c for c in self._calls_by_name().get("cls", ())
                          if c.func.__class__ is ast.Name and _in_classmethod_of(ctx, c, owner)]
            else:
                calls = [c for c in self._calls_by_name().get(func.name, ())
                         if c.func.__class__ is ast.Attribute and c.func.value.__class__ is ast.Name
                         and c.func.value.id == "self" and ctx.enclosing_class(c) is owner]
                offset = 1
            return calls, offset
        if owner.__class__ is ast.Module or ctx.functions.get(getattr(func, "name", None)) is func:
            return [c for c in self._calls_by_name().get(func.name, ()) if c.func.__class__ is ast.Name], 0
        return [], 0

    def _from_call_sites(self, func: ast.AST, name: str, depth: int, value_of) -> Optional[Value]:
        """The value every call of ``func`` in this file gives parameter ``name``
        (``value_of(argument expression, depth)``); None when there is no call, one
        passes something unknown, or the calls disagree."""
        key = (id(func), name)
        if key in self._active or depth > _MAX_DEPTH - 3 or isinstance(func, ast.Lambda):
            return None
        calls, offset = self._call_sites(func)
        if not calls:
            return None
        memo_key = (id(func), name, getattr(value_of, "field", None))
        if memo_key in self._call_site_memo:
            return self._call_site_memo[memo_key]
        found = self._from_calls(func, name, calls, offset, depth, value_of, key)
        self._call_site_memo[memo_key] = found
        return found

    def _from_calls(self, func, name, calls, offset, depth, value_of, key) -> Optional[Value]:
        args = func.args
        positional = [a.arg for a in args.posonlyargs + args.args][offset:]
        position = positional.index(name) if name in positional else None
        self._active.add(key)
        try:
            values = []
            for call in calls[:8]:
                arg = self._argument_at(call, name, position, depth)
                value = value_of(arg, depth + 1) if arg is not None else None
                if value is None:
                    return None
                # the call site goes last: the definition stays the first related location
                values.append(Value(value.value, value.origin[: MAX_TRAIL - 1] + (self.ctx.related(call, f"`{name}` is passed here"),),
                                    value.literal))
        finally:
            self._active.discard(key)
        if len({v.value for v in values}) != 1:
            return None
        # every caller's source is where the value comes from (TabNet's three models each
        # pass their own `epsilon=1e-15` default to the encoder)
        origin = list(values[0].origin)
        for v in values[1:]:
            origin += [r for r in v.origin if r not in origin]
        return Value(values[0].value, tuple(origin[:MAX_TRAIL]), values[0].literal)

    def _overriding_callers(self, func: ast.AST, name: str, depth: int) -> Optional[Value]:
        """The value the calls of ``func`` in this file all pass for the defaulted parameter
        ``name`` when each passes it explicitly (``MegaScaleNorm(dim=-1, eps=eps)``, its only
        call: ``eps=1e-6`` never applies); None when a call leaves it out or none is found."""
        if isinstance(func, ast.Lambda):
            return None
        calls, offset = self._call_sites(func)
        if not calls:
            return None
        positional = [a.arg for a in func.args.posonlyargs + func.args.args][offset:]
        position = positional.index(name) if name in positional else None
        if any(argument(c, name, position) is None for c in calls):
            return None
        found = self._from_call_sites(func, name, depth, _FieldOf(self, None))
        # only a value the callers themselves take from a default (`eps=eps`): a literal a
        # caller writes is reported at that call, and the default stays reported where used
        if found is None or not any("default of" in r.note for r in found.origin):
            return None
        return found

    def _argument_at(self, call: ast.Call, name: str, position: Optional[int], depth: int) -> Optional[ast.AST]:
        """:func:`~amplint.analysis.calls.argument`, else the item of a ``**kwargs`` dict."""
        found = argument(call, name, position)
        if found is not None:
            return found
        for kw in call.keywords:
            if kw.arg is None:  # Model(**kwargs)
                item = self.dict_item(kw.value, name, call, depth + 1)
                if item is not None:
                    return item
        return None

    def dict_item(self, expr: ast.AST, key: str, use: ast.AST, depth: int) -> Optional[ast.AST]:
        """The expression stored under ``key`` in the dict ``expr`` names at ``use``:
        the last ``d['key'] = value`` before it, else the ``{...}`` / ``dict(...)`` it
        was built as."""
        if depth > _MAX_DEPTH:
            return None
        if expr.__class__ is ast.Dict:
            for k, v in zip(expr.keys, expr.values):
                if k.__class__ is ast.Constant and k.value == key:
                    return v
            return None
        if expr.__class__ is ast.Call and expr.func.__class__ is ast.Name and expr.func.id == "dict":
            for kw in expr.keywords:
                if kw.arg == key:
                    return kw.value
            return None
        if expr.__class__ is not ast.Name:
            return None
        stores = self._stores_before(expr.id, use)
        for target, value in reversed(stores):
            if target.__class__ is ast.Subscript:
                k = target.slice
                if k.__class__ is ast.Constant and k.value == key:
                    return value
        for target, value in reversed(stores):
            if target.__class__ is ast.Name:
                return self.dict_item(value, key, use, depth + 1)
        return None

    def dict_entries(self, expr: ast.AST, use: ast.AST, depth: int = 0) -> Optional[dict[str, ast.AST]]:
        """Every constant key -> expression of the dict ``expr`` names at ``use`` (the
        ``{...}`` / ``dict(...)`` it was built as, then ``d['key'] = value`` before the
        use), or None when it was built some other way."""
        if depth > _MAX_DEPTH:
            return None
        if expr.__class__ is ast.Dict:
            if any(k is None or k.__class__ is not ast.Constant for k in expr.keys):
                return None
            return {str(k.value): v for k, v in zip(expr.keys, expr.values)}
        if expr.__class__ is ast.Call and expr.func.__class__ is ast.Name and expr.func.id == "dict":
            if expr.args or any(kw.arg is None for kw in expr.keywords):
                return None
            return {kw.arg: kw.value for kw in expr.keywords}
        if expr.__class__ is not ast.Name:
            return None
        stores = self._stores_before(expr.id, use)
        base = None
        items = {}
        for target, value in stores:
            if target.__class__ is ast.Name:
                base, items = self.dict_entries(value, use, depth + 1), {}
            elif target.__class__ is ast.Subscript and target.slice.__class__ is ast.Constant:
                items[str(target.slice.value)] = value
        if base is None:
            return None
        return {**base, **items}

    def object_field(self, expr: ast.AST, field: str, depth: int) -> Optional[Value]:
        """``field`` of the object ``expr`` evaluates to: ``Config(vocab_size=...)``,
        ``Config(**args)``, a name assigned one of those, with ``config.field = ...``
        assignments before the use winning; a local config class's default otherwise."""
        if depth > _MAX_DEPTH:
            return None
        if expr.__class__ is ast.Call:
            f = expr.func
            cname = f.id if f.__class__ is ast.Name else f.attr if f.__class__ is ast.Attribute else None
            cls = self.ctx.classes.get(cname) if cname else None
            names = [field]
            position = None
            if cls is not None:
                init = self.ctx.method(cls, "__init__")
                if init is not None:
                    stored = _stored_parameter_names(init)
                    names = [stored.get(field, field)]
                    params = [a.arg for a in init.args.posonlyargs + init.args.args][1:]
                    position = params.index(names[0]) if names[0] in params else None
            arg = self._argument_at(expr, names[0], position, depth)
            if arg is not None:
                return self.evaluate(arg, None, depth + 1)
            if cls is not None and is_config_class(cls):
                entry = config_fields(self.ctx, cls).get(field)
                if entry is not None:
                    value = self.evaluate(entry[1], None, depth + 1)
                    return None if value is None else value.via(self.ctx.related(entry[0], f"default of `{cls.name}.{field}`"))
            return None
        if expr.__class__ is ast.Name:
            stores = self._stores_before(expr.id, expr)
            for target, value in reversed(stores):
                if target.__class__ is ast.Attribute and target.attr == field:
                    found = self.evaluate(value, None, depth + 1)
                    return None if found is None else found.via(self.ctx.related(value, f"`{expr.id}.{field}` is set here"))
            for target, value in reversed(stores):
                if target.__class__ is ast.Name:
                    return self.object_field(value, field, depth + 1)
            func = self.ctx.enclosing_function(expr)
            if func is not None and parameter(func, expr.id)[0] is not None:
                return self._from_call_sites(func, expr.id, depth, _FieldOf(self, field))
        return None

    def _stores_before(self, name: str, use: ast.AST) -> list[tuple[ast.AST, ast.AST]]:
        """(target, value) of the assignments to ``name``, ``name[...]`` and
        ``name.attr`` in the scope of ``use`` (its function, or the module), before it."""
        scope = self.ctx.enclosing_function(use)
        table = self._store_tables.get(id(scope))
        if table is None:
            table = {}
            body = scope.body if scope is not None else self.ctx.tree.body
            stack = list(body)
            while stack:
                stmt = stack.pop()
                if stmt.__class__ is ast.Assign:
                    for target in stmt.targets:
                        base = target
                        while base.__class__ in (ast.Subscript, ast.Attribute) and base.value.__class__ is not ast.Name:
                            base = base.value
                        root = base.value if base.__class__ in (ast.Subscript, ast.Attribute) else base
                        if root.__class__ is ast.Name and base is target:
                            table.setdefault(root.id, []).append((stmt.lineno, target, stmt.value))
                elif stmt.__class__ in (ast.If, ast.For, ast.While, ast.With, ast.Try):
                    for field in ("body", "orelse", "finalbody"):
                        stack.extend(getattr(stmt, field, ()))
                    for handler in getattr(stmt, "handlers", ()):
                        stack.extend(handler.body)
            for entries in table.values():
                entries.sort(key=lambda e: e[0])
            self._store_tables[id(scope)] = table
        return [(t, v) for line, t, v in table.get(name, ()) if line < use.lineno]

    # --- config classes --------------------------------------------------------------

    def _local_config_fields(self) -> dict[str, dict[str, tuple[ast.AST, ast.AST]]]:
        """class name -> field -> (definition node, default expr) for config-like classes."""
        if self._config_fields is None:
            self._config_fields = {
                cls.name: config_fields(self.ctx, cls) for cls in self.ctx.classes.values() if is_config_class(cls)
            }
        return self._config_fields

    def config_default(self, field: str, class_name: Optional[str] = None, use_project: bool = True) -> Optional[Value]:
        """The default of ``field`` in a config class: the named class if known, else
        the one value every config class that defines ``field`` agrees on."""
        candidates: list[Value] = []
        local = self._local_config_fields()
        names = [class_name] if class_name and class_name in local else list(local)
        for cname in names:
            entry = local[cname].get(field)
            if entry is not None:
                node, default = entry
                value = self.evaluate(default, None, 1)
                if value is not None:
                    candidates.append(value.via(self.ctx.related(node, f"default of `{cname}.{field}`")))
        project = self.ctx.project
        if not candidates and any(declares_field(self.ctx, self.ctx.classes[c], field) for c in names):
            return None  # this file's config class has the field, without a default
        if project is not None and use_project and (not candidates or class_name and class_name not in local):
            for fact in project.config_defaults(field, class_name, exclude_path=self.ctx.path):
                candidates.append(
                    Value(fact.value, (Related(fact.path, fact.line, fact.column, f"default of `{fact.cls}.{field}`"),))
                )
        if not candidates or len({c.value for c in candidates}) != 1:
            return None
        return candidates[0]


# --- helpers -----------------------------------------------------------------------


def _in_classmethod_of(ctx, call: ast.Call, cls: ast.ClassDef) -> bool:
    """``call`` sits in a ``@classmethod`` defined in ``cls``'s own body."""
    func = ctx.enclosing_function(call)
    return (func is not None and ctx.parent(func) is cls and any(
        d.__class__ is ast.Name and d.id == "classmethod" for d in func.decorator_list))


class _FieldOf:
    """What a call site's argument gives: its value (``field`` None) or the value of
    its ``field`` (a config object passed in); hashable by ``field`` for memoising."""

    __slots__ = ("evaluator", "field")

    def __init__(self, evaluator: "Evaluator", field: Optional[str]):
        self.evaluator, self.field = evaluator, field

    def __call__(self, arg: ast.AST, depth: int) -> Optional[Value]:
        if self.field is None:
            return self.evaluator.evaluate(arg, None, depth)
        return self.evaluator.object_field(arg, self.field, depth)



class _Missing:
    pass


_MISSING = _Missing()


