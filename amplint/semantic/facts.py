"""Cross-file facts about sizes, each a collector with its key, writer and reader here.

A collector's ``collect(ctx)`` runs in the engine's summary pass and returns a JSON-able
``{"by_name": {...}}`` (or None); another file reads it through
``ctx.project.named(KEY, name, module)``.  The per-file half of each fact is an analysis
(``ctx.get(ArgparseDefaults)``...) that the collector and this file's rules share.

* :class:`ArgparseDefaults` -- ``parser.add_argument('--hidden', default=100)``: read as
  ``args.hidden`` here or in another file;
* :class:`ModuleSequences` -- ``NUM_CHANNELS = [18, 36]``, ``STAGES = {"small": (24,
  116, 232)}`` at module level of a config module;
* :class:`ConfigConstructions` -- ``GPTConfig(vocab_size=50304)``: what the sites that
  build a config class pass, so that a default every site overrides is not the size;
* :class:`LayerParameters` -- ``def conv(bn, cin, cout): return nn.Conv2d(cin, cout,
  3)``: which parameters of a function (or of a class's ``__init__``) reach a layer size,
  so a call in another file (``conv(True, 473, 256)``) can be judged there.

Never imports torch or the code it reads.
"""
from __future__ import annotations

import ast
import re
from typing import Any, Optional

from ..analysis.calls import argument
from ..analysis.dims import LAYER_MARKERS, LAYERS, is_torch_layer, layer_name
from .configs import CONFIG_CLASS_SUFFIXES, config_fields, is_config_class, parameter


def _number(ctx, expr) -> Optional[float]:
    value = ctx.evaluator.evaluate(expr, None, 1) if expr is not None else None
    if value is None or isinstance(value.value, bool) or not isinstance(value.value, (int, float)):
        return None
    return value.value


def _position(ctx, node) -> list[int]:
    return [node.lineno, ctx.char_col(node.lineno, node.col_offset) + 1]


# --- argparse ----------------------------------------------------------------------------


class ArgparseDefaults:
    """``add_argument('--hidden-size', type=int, default=100)`` in this file: dest ->
    (the default's expression, the ``add_argument`` call).  A dest added twice with
    different defaults is left out."""

    KEY = "@argparse"
    MARKERS = ("add_argument",)

    def __init__(self, ctx):
        self.ctx = ctx
        table: dict[str, list[tuple[ast.AST, ast.Call]]] = {}
        if "add_argument" in ctx.source:
            for call in ctx.calls:
                f = call.func
                if f.__class__ is not ast.Attribute or f.attr != "add_argument":
                    continue
                dest = _dest(call)
                default = next((kw.value for kw in call.keywords if kw.arg == "default"), None)
                if dest and default is not None:
                    table.setdefault(dest, []).append((default, call))
        self.by_dest = {
            dest: entries[0] for dest, entries in table.items()
            if len({ast.dump(d) for d, _ in entries}) == 1
        }

    def default(self, dest: str) -> Optional[tuple[ast.AST, ast.Call]]:
        return self.by_dest.get(dest)

    @classmethod
    def collect(cls, ctx) -> Optional[dict]:
        out = {}
        for dest, (default, call) in ctx.get(cls).by_dest.items():
            value = _number(ctx, default)
            if value is not None:
                out[dest] = [value, *_position(ctx, default)]  # where the number is written
        return {"by_name": out} if out else None


def _dest(call: ast.Call) -> Optional[str]:
    for kw in call.keywords:
        if kw.arg == "dest" and kw.value.__class__ is ast.Constant and isinstance(kw.value.value, str):
            return kw.value.value
    flags = [a.value for a in call.args if a.__class__ is ast.Constant and isinstance(a.value, str)]
    long = [f for f in flags if f.startswith("--")]
    name = long[0] if long else flags[0] if flags else None
    if name is None:
        return None
    return name.lstrip("-").replace("-", "_") or None


# --- module-level number sequences ----------------------------------------------------


def _flat_numbers(ctx, expr) -> Optional[list]:
    if expr.__class__ not in (ast.List, ast.Tuple) or not expr.elts:
        return None
    values = [_number(ctx, e) for e in expr.elts]
    return None if any(v is None for v in values) else values


class ModuleSequences:
    """Module-level ``NAME = [18, 36, 72]`` / ``(24, 116)`` / ``{"small": (24, 116, 232)}``
    assigned once: name -> the assignment's value expression."""

    KEY = "@sequences"
    #: a line that may define one (a file is summarised for it)
    LINE = re.compile(r"^[A-Za-z_]\w*\s*(?::[^=\n]*)?=\s*(?:[\[(]\s*[-+]?[0-9(\[]|\{\s*['\"0-9])", re.M)

    def __init__(self, ctx):
        self.ctx = ctx
        self.by_name: dict[str, ast.AST] = {}
        for stmt in ctx.tree.body:
            if stmt.__class__ not in (ast.Assign, ast.AnnAssign) or stmt.value is None:
                continue
            targets = stmt.targets if stmt.__class__ is ast.Assign else [stmt.target]
            if len(targets) == 1 and targets[0].__class__ is ast.Name and stmt.value.__class__ in (ast.List, ast.Tuple, ast.Dict):
                name = targets[0].id
                if len(ctx.module_assignments(name)) == 1:
                    self.by_name[name] = stmt

    @classmethod
    def collect(cls, ctx) -> Optional[dict]:
        out = {}
        for name, stmt in ctx.get(cls).by_name.items():
            value = stmt.value
            if value.__class__ is ast.Dict:
                items = {}
                for k, v in zip(value.keys, value.values):
                    numbers = _flat_numbers(ctx, v) if k is not None and k.__class__ is ast.Constant else None
                    if numbers is not None:
                        items[str(k.value)] = numbers
                if items:
                    out[name] = {"dict": items, "at": _position(ctx, stmt)}
            else:
                numbers = _flat_numbers(ctx, value)
                if numbers is not None:
                    out[name] = {"items": numbers, "at": _position(ctx, stmt)}
        return {"by_name": out} if out else None


# --- constructions of config classes ------------------------------------------------


def is_config_name(name: Optional[str]) -> bool:
    return bool(name) and name[0].isupper() and name.endswith(CONFIG_CLASS_SUFFIXES)


class ConfigConstructions:
    """The calls in this file that build a config class (``GPTConfig(vocab_size=50304)``,
    ``GPTConfig(**model_args)``): class name -> [(call, field -> expression or None when
    the call passes it in a way not followed, whether a ``**`` of unknown keys is
    passed)]."""

    KEY = "@config_calls"
    MARKERS = ("Config(", "Args(", "Arguments(", "Params(", "Settings(", "Configuration(")

    def __init__(self, ctx):
        self.ctx = ctx
        self.by_class: dict[str, list[tuple[ast.Call, dict, bool]]] = {}
        if not any(m in ctx.source for m in self.MARKERS):
            return
        evaluator = ctx.evaluator
        for call in ctx.calls:
            f = call.func
            name = f.id if f.__class__ is ast.Name else f.attr if f.__class__ is ast.Attribute else None
            if not is_config_name(name) or (f.__class__ is ast.Attribute and f.attr in ("from_pretrained", "from_dict")):
                continue
            passed: dict = {}
            unknown = bool(call.args)  # positional: mapped by the reader when it knows the class
            for kw in call.keywords:
                if kw.arg is not None:
                    passed[kw.arg] = kw.value
                    continue
                entries = evaluator.dict_entries(kw.value, call)
                if entries is None:
                    unknown = True
                else:
                    passed.update(entries)
            self.by_class.setdefault(name, []).append((call, passed, unknown))

    @classmethod
    def collect(cls, ctx) -> Optional[dict]:
        out = {}
        for name, calls in ctx.get(cls).by_class.items():
            out[name] = [
                {"kw": {k: _number(ctx, v) for k, v in passed.items()}, "star": unknown, "at": _position(ctx, call)}
                for call, passed, unknown in calls
            ]
        return {"by_name": out} if out else None


# --- functions and classes whose parameters reach a layer size ------------------------


class LayerParameters:
    """Module-level functions and classes of this file whose parameters reach a layer
    size unchanged or times a literal (``nn.Conv2d(cin, cout, 3)``, ``nn.Linear(dim, 4 *
    dim)``): name -> [(parameter position after ``self``, parameter name, factor, layer
    call, layer label, argument, role)]."""

    KEY = "@layer_params"
    MARKERS = LAYER_MARKERS

    def __init__(self, ctx):
        self.ctx = ctx
        self.by_name: dict[str, list[tuple]] = {}
        if not any(m in ctx.source for m in LAYER_MARKERS):
            return
        for node in ctx.calls:
            lname = layer_name(node)
            if lname is None:
                continue
            dims = [(dim, argument(node, dim.keyword, dim.index)) for dim in LAYERS[lname][0]]
            if not any(e.__class__ is ast.Name or e.__class__ is ast.BinOp for _, e in dims):
                continue  # config.hidden_size, literals: no parameter reaches this layer as it is
            func, name, offset = _helper_of(ctx, node)
            if func is None:
                continue
            if not is_torch_layer(ctx, node, lname):
                continue
            positional = [a.arg for a in func.args.posonlyargs + func.args.args][offset:]
            for dim, expr in dims:
                hit = _parameter_factor(expr, func)
                if hit is None:
                    continue
                pname, factor = hit
                position = positional.index(pname) if pname in positional else None
                self.by_name.setdefault(name, []).append(
                    (position, pname, factor, node, f"nn.{lname}", dim.keyword, dim.role)
                )
        self._through_helpers(ctx)

    def _through_helpers(self, ctx) -> None:
        """A parameter passed on to another of this file's helpers that reaches a layer
        (NASNet's ``BranchSeparables(in, out)`` building ``SeparableConv2d(in, out)``
        building ``nn.Conv2d``) reaches that layer too: a few rounds, each one linear."""
        have = {name: {(e[1], e[3], e[5]) for e in entries} for name, entries in self.by_name.items()}
        for _ in range(3):
            added = False
            for node in ctx.calls:
                f = node.func
                inner = self.by_name.get(f.id) if f.__class__ is ast.Name else None
                if not inner:
                    continue
                func, name, offset = _helper_of(ctx, node)
                if func is None:
                    continue
                if name == f.id:
                    continue
                positional = [a.arg for a in func.args.posonlyargs + func.args.args][offset:]
                seen = have.setdefault(name, set())
                for position, pname, factor, layer, label, arg, role in list(inner)[:64]:
                    expr = next((kw.value for kw in node.keywords if kw.arg == pname), None)
                    if expr is None and position is not None and position < len(node.args):
                        if any(a.__class__ is ast.Starred for a in node.args[: position + 1]):
                            continue
                        expr = node.args[position]
                    hit = _parameter_factor(expr, func)
                    if hit is None or (hit[0], layer, arg) in seen:
                        continue
                    outer = positional.index(hit[0]) if hit[0] in positional else None
                    self.by_name.setdefault(name, []).append((outer, hit[0], factor * hit[1], layer, label, arg, role))
                    seen.add((hit[0], layer, arg))
                    added = True
            if not added:
                return

    @classmethod
    def collect(cls, ctx) -> Optional[dict]:
        out = {}
        for name, entries in ctx.get(cls).by_name.items():
            out[name] = [
                [pos, pname, factor, label, arg, role, *_position(ctx, node)]
                for pos, pname, factor, node, label, arg, role in entries
            ]
        return {"by_name": out} if out else None


def _parameter_factor(expr, func) -> Optional[tuple[str, int]]:
    """``cin`` / ``4 * dim`` / ``dim * 4`` of a parameter of ``func`` -> (name, factor)."""
    factor = 1
    if expr is not None and expr.__class__ is ast.BinOp and expr.op.__class__ is ast.Mult:
        for const, other in ((expr.left, expr.right), (expr.right, expr.left)):
            if const.__class__ is ast.Constant and type(const.value) is int and const.value > 0:
                factor, expr = const.value, other
                break
        else:
            return None
    if expr is None or expr.__class__ is not ast.Name:
        return None
    param, _ = parameter(func, expr.id)
    if param is None or param is func.args.vararg or param is func.args.kwarg:
        return None
    return expr.id, factor


class ConfigPresets:
    """Named presets of this file's config classes: module-level ``dict(...)`` calls whose
    keywords are all fields of one config class (litgpt's ``configs = [dict(name=
    "Nous-Hermes-13b", padded_vocab_size=32001, ...)]``, built later with ``Config(**d)``):
    class name -> field -> [(number, the value's expression)]."""

    KEY = "@config_presets"
    MARKERS = ("dict(",)

    def __init__(self, ctx):
        self.by_class: dict[str, dict[str, list[tuple[float, ast.AST]]]] = {}
        if "dict(" not in ctx.source:
            return
        fields = {}
        for cls in ctx.classes.values():
            if is_config_class(cls) and ctx.parent(cls).__class__ is ast.Module:
                fields[cls.name] = set(config_fields(ctx, cls))
        if not fields:
            return
        for call in ctx.calls:
            if call.func.__class__ is not ast.Name or call.func.id != "dict" or call.args:
                continue
            keys = [kw.arg for kw in call.keywords]
            if len(keys) < 3 or None in keys or ctx.enclosing_function(call) is not None:
                continue
            owners = [name for name, have in fields.items() if set(keys) <= have]
            if len(owners) != 1:
                continue
            table = self.by_class.setdefault(owners[0], {})
            for kw in call.keywords:
                number = _number(ctx, kw.value)
                if number is not None:
                    table.setdefault(kw.arg, []).append((number, kw.value))

    def values(self, cls: str, field: str) -> list[tuple[float, ast.AST]]:
        return self.by_class.get(cls, {}).get(field, [])

    @classmethod
    def collect(cls, ctx) -> Optional[dict]:
        out = {}
        for name, table in ctx.get(cls).by_class.items():
            out[name] = {field: [[v, *_position(ctx, node)] for v, node in found[:64]] for field, found in table.items()}
        return {"by_name": out} if out else None


class LayerFormulas:
    """Layer sizes of a helper (module-level function or module class ``__init__``) that
    are arithmetic of its parameters, through ``self`` attributes and local names set
    once (an attention block's ``self.d_k = self.d_v = d_model // n_head``; ``nn.Linear(
    self.d_model, self.d_v)``): name -> [:class:`LayerFormula`], so that a call in another
    file (``Attention(d_model=hparams.hidden_size, n_head=hparams.heads)``) can be judged
    there.  A formula :class:`LayerParameters` already has (``cin``, ``4 * dim``) is left
    to it."""

    KEY = "@layer_formulas"
    MARKERS = LAYER_MARKERS

    def __init__(self, ctx):
        self.by_name: dict[str, list[LayerFormula]] = {}
        if not any(m in ctx.source for m in LAYER_MARKERS):
            return
        for node in ctx.calls:
            lname = layer_name(node)
            if lname is None or not is_torch_layer(ctx, node, lname):
                continue
            func, name, offset = _helper_of(ctx, node)
            if func is None:
                continue
            positional = [a.arg for a in func.args.posonlyargs + func.args.args][offset:]
            for dim in LAYERS[lname][0]:
                expr = argument(node, dim.keyword, dim.index)
                if expr is None or _parameter_factor(expr, func) is not None:
                    continue
                resolved = _resolve(ctx, expr, func, 0)
                if resolved is None:
                    continue
                params = sorted({n.id for n in ast.walk(resolved) if n.__class__ is ast.Name})
                if not params:
                    continue
                where = [positional.index(p) if p in positional else None for p in params]
                self.by_name.setdefault(name, []).append(LayerFormula(
                    ast.unparse(resolved), params, where, f"nn.{lname}", dim.keyword, dim.role, node))

    @classmethod
    def collect(cls, ctx) -> Optional[dict]:
        out = {}
        for name, formulas in ctx.get(cls).by_name.items():
            sides: dict = {}
            for f in formulas:
                sides.setdefault(f.text, set()).add(_SIDE.get(f.role, "both"))
            out[name] = [
                {"expr": f.text, "params": f.params, "at": f.positions, "layer": f.label, "arg": f.arg,
                 "role": f.role, "hidden": len(sides[f.text]) > 1 or "both" in sides[f.text],
                 "where": _position(ctx, f.node)}
                for f in formulas
            ]
        return {"by_name": out} if out else None


#: a dimension's role -> the side of its layer (``LayerFormulas``' hidden-width test)
_SIDE = {"in": "in", "in_channels": "in", "out": "out"}
_FORMULA_OPS = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv)


class LayerFormula:
    """One layer size of a helper as arithmetic of its parameters."""

    __slots__ = ("text", "params", "positions", "label", "arg", "role", "node")

    def __init__(self, text, params, positions, label, arg, role, node):
        self.text, self.params, self.positions = text, params, positions
        self.label, self.arg, self.role, self.node = label, arg, role, node


def _resolve(ctx, expr, func, depth: int) -> Optional[ast.AST]:
    """``expr`` as arithmetic of ``func``'s parameters and integer literals (a new tree),
    through local names assigned once and ``self`` attributes stored once in the class's
    ``__init__``; None when something else is in the way."""
    if depth > 8 or expr is None:
        return None
    kind = expr.__class__
    if kind is ast.Constant:
        return ast.Constant(expr.value) if type(expr.value) is int and expr.value > 0 else None
    if kind is ast.BinOp and expr.op.__class__ in _FORMULA_OPS:
        left, right = _resolve(ctx, expr.left, func, depth + 1), _resolve(ctx, expr.right, func, depth + 1)
        return None if left is None or right is None else ast.BinOp(left, expr.op.__class__(), right)
    if kind is ast.Name:
        param, _ = parameter(func, expr.id)
        assigned = ctx.bindings(func).get(expr.id, ())
        if param is not None:
            if assigned or param is func.args.vararg or param is func.args.kwarg:
                return None
            return ast.Name(expr.id, ast.Load())
        if len(assigned) == 1 and assigned[0].__class__ is ast.Assign:
            return _resolve(ctx, assigned[0].value, func, depth + 1)
        return None
    if kind is ast.Attribute and expr.value.__class__ is ast.Name and expr.value.id == "self" and func.name == "__init__":
        stores = ctx.self_assignments(func).get(expr.attr, ())
        if len(stores) == 1 and stores[0].__class__ is ast.Assign:
            return _resolve(ctx, stores[0].value, func, depth + 1)
    return None


from ..ranges import BoundedReturns  # noqa: E402  (value bounds, not sizes: kept with the ranges)

COLLECTORS = (ArgparseDefaults, ModuleSequences, ConfigConstructions, LayerParameters, LayerFormulas, ConfigPresets,
              BoundedReturns)


def worth_collecting(text: str) -> bool:
    """Whether one of :data:`COLLECTORS` may find something in ``text``."""
    return (
        any(m in text for c in (ArgparseDefaults, ConfigConstructions, LayerParameters, LayerFormulas, ConfigPresets, BoundedReturns)
            for m in c.MARKERS)
        or ModuleSequences.LINE.search(text) is not None
    )


def collect_all(ctx) -> dict[str, Any]:
    out = {}
    for collector in COLLECTORS:
        data = collector.collect(ctx)
        if data is not None:
            out[collector.KEY] = data
    return out


def _helper_of(ctx, node: ast.AST):
    """(function, the name callers use, how many leading parameters callers do not pass) of
    the module-level helper or module class ``__init__`` ``node`` is in; (None, None, 0)
    elsewhere."""
    func = ctx.enclosing_function(node)
    owner = ctx.parent(func) if func is not None else None
    if owner.__class__ is ast.Module:
        return func, func.name, 0
    if owner.__class__ is ast.ClassDef and func.name == "__init__" and ctx.parent(owner).__class__ is ast.Module:
        return func, owner.name, 1
    return None, None, 0
