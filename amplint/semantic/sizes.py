"""Every value a size takes: ``ctx.get(SizeValues).values(expr)``.

:class:`~amplint.evaluate.Evaluator` folds an expression to one number.  A layer size in
real code often has several, or reaches the layer in ways a single fold does not
follow; this analysis gives the list of values that can be seen, each a
:class:`~amplint.evaluate.Value` whose origin says where it is written:

* items of width tuples and lists, also in dicts and in config modules, indexed in
  loops or iterated (``STAGES = {"small": (24, 116, 232)}``, ``widths[i]``, ``for c in
  NUM_CHANNELS``, ``zip(widths[:-1], widths[1:])``);
* a parameter over all the call sites in this file (``conv(True, 473, 256)`` and
  ``conv(False, 256, 256)``), also through ``**kwargs`` dicts;
* argparse defaults read as ``args.hidden`` (this file's parser or another file's);
* a config default that every construction site overrides (``GPTConfig(vocab_size=
  50304)``): the sites' values, not the default;
* both branches of ``a if c else b`` and literal arithmetic over all of the above.

Never imports torch or the code it reads.
"""
from __future__ import annotations

import ast
import itertools
import re
from typing import Optional

from ..evaluate import MAX_TRAIL, Value
from .configs import annotation_class, config_fields, is_config_expr, parameter
from ..rule import Related
from .facts import ArgparseDefaults, ConfigConstructions, ConfigPresets, ModuleSequences

_MAX_DEPTH = 10
#: values kept per expression (a product of two lists stays small)
_MAX_VALUES = 24
#: ``args.hidden``: the names an argparse namespace goes by
ARGS_NAMES = frozenset({"args", "arg", "opt", "opts", "options", "flags", "FLAGS", "hparams", "hp", "params", "cfg", "config", "conf", "argv"})
_RESIDUE_OPS = {ast.Add: int.__add__, ast.Sub: int.__sub__, ast.Mult: int.__mul__}
_DEFAULT_NOTE = re.compile(r"^default of `(\w+)\.(\w+)`")


class _Tagged:
    """An item of a sequence merged from several (one per branch, call site or iterated
    item), with where its own sequence came from: so that an item's trail names the
    branch it was written in, not every branch."""

    __slots__ = ("item", "origin")

    def __init__(self, item, origin: tuple):
        self.item, self.origin = item, origin


def _is_self_hparams(expr: ast.AST) -> bool:
    """``self.hparams`` (PyTorch Lightning's saved hyperparameters)."""
    return (expr.__class__ is ast.Attribute and expr.attr == "hparams"
            and expr.value.__class__ is ast.Name and expr.value.id == "self")


def _merge_by_value(values: list) -> list:
    """One value per number, its trail the union of the trails that reach it (a width
    written in several lists, or passed by several call sites, names each of them)."""
    out: dict = {}
    for v in values:
        key = (type(v.value), v.value)
        have = out.get(key)
        if have is None:
            out[key] = v
        elif len(have.origin) < 2 * MAX_TRAIL:
            merged = tuple(dict.fromkeys(have.origin + v.origin))[: 2 * MAX_TRAIL]
            out[key] = Value(have.value, merged, have.literal if have.literal is v.literal else None)
    return list(out.values())


def _tagged(items, origin: tuple) -> list:
    if not origin:
        return list(items)
    return [_Tagged(i.item, i.origin + origin) if isinstance(i, _Tagged) else _Tagged(i, origin) for i in items]


class _Seq:
    """A sequence or dict seen at module or function level: items are AST nodes (this
    file), Values (another file's constants) or :class:`_Tagged` ones, keyed for dicts."""

    __slots__ = ("items", "keys", "origin")

    def __init__(self, items: list, keys: Optional[list] = None, origin: tuple = ()):
        self.items, self.keys, self.origin = items, keys, origin


class SizeValues:
    def __init__(self, ctx):
        self.ctx = ctx
        self.evaluator = ctx.evaluator
        self._active: set = set()
        #: (function, parameter) -> its call sites' values (None: the default), or None
        self._defaulted: dict = {}

    # --- entry -------------------------------------------------------------------------

    def values(self, expr: ast.AST, depth: int = 0, folded: bool = False) -> list[Value]:
        """The values ``expr`` can be seen to take (none: unknown).  ``folded``: the
        caller already knows the evaluator cannot fold ``expr`` to one number."""
        if expr is None or depth > _MAX_DEPTH:
            return []
        if expr.__class__ is ast.Attribute and _is_self_hparams(expr.value):
            # the class's own __init__ parameter, before any config class of the same field;
            # and the command line's default (Lightning's `Model(**vars(parser.parse_args()))`)
            saved = self._saved_hyperparameter(expr, depth)
            if saved:
                flag = self.argparse_default(expr.attr)
                if flag is not None and all(v.value != flag.value for v in saved):
                    saved.append(flag)
                return saved[:_MAX_VALUES]
        one = None if folded else self.evaluator.evaluate(expr)
        if one is not None:
            if expr.__class__ in (ast.Name, ast.Attribute):
                passed = self.defaulted_parameter(expr, one, depth)
                if passed is not None:
                    return passed[:_MAX_VALUES]
            return [one]
        try:
            return self._values(expr, depth)[:_MAX_VALUES]
        except (ArithmeticError, ValueError, TypeError, RecursionError):
            return []

    def _values(self, expr, depth) -> list[Value]:
        kind = expr.__class__
        if kind is ast.Subscript:
            found = self._items_values(self._select(expr, depth), depth)
            if not found and expr.slice.__class__ is ast.Constant and isinstance(expr.slice.value, str):
                base = expr.value  # opt['embedding_size']: an argparse namespace turned into a dict
                name = base.id if base.__class__ is ast.Name else base.attr if base.__class__ is ast.Attribute else None
                if name in ARGS_NAMES:
                    default = self.argparse_default(expr.slice.value)
                    found = [default] if default is not None else []
            return found
        if kind is ast.Name:
            return self._name(expr, depth)
        if kind is ast.Attribute:
            return self._attribute(expr, depth)
        if kind is ast.IfExp:
            taken = self._default_branch(expr)
            if taken is not None:
                return self.values(taken, depth + 1)
            return self.values(expr.body, depth + 1) + self.values(expr.orelse, depth + 1)
        if kind is ast.BinOp and expr.op.__class__ in (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv):
            left, right = self.values(expr.left, depth + 1), self.values(expr.right, depth + 1)
            op = {ast.Add: int.__add__, ast.Sub: int.__sub__, ast.Mult: int.__mul__, ast.FloorDiv: int.__floordiv__}[expr.op.__class__]
            out = []
            for a, b in itertools.islice(itertools.product(left, right), _MAX_VALUES):
                if type(a.value) is int and type(b.value) is int:
                    out.append(Value(op(a.value, b.value), a.origin + b.origin))
            return out
        if kind is ast.Call and expr.func.__class__ is ast.Name and expr.func.id == "int" and len(expr.args) == 1:
            return [Value(int(v.value), v.origin) for v in self.values(expr.args[0], depth + 1)]
        return []

    def _default_branch(self, expr: ast.IfExp) -> Optional[ast.AST]:
        """``n + (1 if use_mlm else 0)`` where ``use_mlm`` is a parameter with a constant
        default (``use_mlm=False``) that no call site in this file passes and nothing
        rebinds: the branch the default takes.  None otherwise (both branches count)."""
        test, negate = expr.test, False
        if test.__class__ is ast.UnaryOp and test.op.__class__ is ast.Not:
            test, negate = test.operand, True
        if test.__class__ is not ast.Name:
            return None
        ctx = self.ctx
        func = ctx.enclosing_function(expr)
        if func is None or func.__class__ is ast.Lambda or ctx.bindings(func).get(test.id):
            return None
        param, default = parameter(func, test.id)
        if param is None or default.__class__ is not ast.Constant:
            return None
        calls, position = self.evaluator.call_sites_passing(func, test.id)
        if any(self.evaluator._argument_at(c, test.id, position, 0) is not None or
               any(kw.arg is None for kw in c.keywords) for c in calls):
            return None
        return expr.body if bool(default.value) != negate else expr.orelse

    def residues(self, expr: ast.AST, modulus: int, depth: int = 0) -> frozenset:
        """The residues modulo ``modulus`` that integer ``expr`` can take, where some of
        its inputs are unknown: ``2 * dim + 1`` is odd for every ``dim``, so never a
        multiple of 8 (egnn's ``edge_input_dim``).  All residues when nothing is known."""
        everything = frozenset(range(modulus))
        if expr is None or depth > _MAX_DEPTH:
            return everything
        found = self.values(expr, depth)
        if found:
            if all(type(v.value) is int for v in found):
                return frozenset(v.value % modulus for v in found)
            return everything
        kind = expr.__class__
        if kind is ast.BinOp and expr.op.__class__ in _RESIDUE_OPS:
            op = _RESIDUE_OPS[expr.op.__class__]
            left = self.residues(expr.left, modulus, depth + 1)
            if left == everything and op is not int.__mul__:
                return everything
            right = self.residues(expr.right, modulus, depth + 1)
            return frozenset(op(a, b) % modulus for a in left for b in right)
        if kind is ast.Name:
            func = self.ctx.enclosing_function(expr)
            if func is not None:
                assigned = self.ctx.bindings(func).get(expr.id, ())
                param, _ = parameter(func, expr.id)
                if param is None and len(assigned) == 1 and assigned[0].__class__ is ast.Assign:
                    return self.residues(assigned[0].value, modulus, depth + 1)
        return everything

    # --- names -------------------------------------------------------------------------

    def _name(self, name: ast.Name, depth: int) -> list[Value]:
        ctx = self.ctx
        loop = self._loop_binding(name)
        if loop is not None:
            return self._items_values(loop, depth)
        func = ctx.enclosing_function(name)
        while func is not None:
            assigned = ctx.bindings(func).get(name.id, ())
            param, default = parameter(func, name.id)
            if assigned:
                if param is not None:
                    return []
                out = []
                for stmt in assigned[:4]:
                    if stmt.__class__ in (ast.Assign, ast.AnnAssign) and stmt.value is not None:
                        note = ctx.related(stmt, f"`{name.id}` is assigned here")
                        out += [v.via(note) for v in self.values(stmt.value, depth + 1)]
                    elif stmt.__class__ in (ast.For, ast.AsyncFor):
                        seq = self._loop_items(stmt.target, stmt.iter, name.id, depth)
                        out += self._items_values(seq, depth)
                    else:
                        return []
                return out
            if param is not None:
                if default is not None:
                    return self.values(default, depth + 1)
                return self._call_site_values(func, name.id, depth)
            func = ctx.enclosing_function(func)
        assignments = ctx.module_assignments(name.id)
        if len(assignments) == 1 and assignments[0].__class__ in (ast.Assign, ast.AnnAssign):
            stmt = assignments[0]
            note = ctx.related(stmt, f"`{name.id}` is defined here")
            return [v.via(note) for v in self.values(stmt.value, depth + 1)]
        return []

    def _loop_binding(self, name: ast.Name) -> Optional[_Seq]:
        """The items a comprehension's ``for`` binds ``name`` to (``[nn.Conv2d(c, c, 3)
        for c in NUM_CHANNELS]``), or None."""
        ctx = self.ctx
        for anc in ctx.ancestors(name):
            if anc.__class__ in (ast.ListComp, ast.GeneratorExp, ast.SetComp, ast.DictComp):
                for gen in anc.generators:
                    seq = self._loop_items(gen.target, gen.iter, name.id, 0)
                    if seq is not None:
                        return seq
            elif anc.__class__ in (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef):
                return None
        return None

    def _loop_items(self, target: ast.AST, iterable: ast.AST, name: str, depth: int) -> Optional[_Seq]:
        if target.__class__ is ast.Name:
            return self._sequence(iterable, depth + 1) if target.id == name else None
        if target.__class__ is not ast.Tuple:
            return None
        for i, elt in enumerate(target.elts):
            if elt.__class__ is not ast.Name or elt.id != name:
                continue
            if iterable.__class__ is ast.Call and iterable.func.__class__ is ast.Name:
                fname, args = iterable.func.id, iterable.args
                if fname == "zip" and i < len(args):
                    return self._sequence(args[i], depth + 1)
                if fname == "enumerate" and i == 1 and args:
                    return self._sequence(args[0], depth + 1)
            return None
        return None

    def defaulted_parameter(self, name: ast.Name, default: Value, depth: int = 0) -> Optional[list[Value]]:
        """A parameter with a default, as the call sites in this file bind it: the default
        and the values they pass (peft's ``Linear(in_features, out_features, r=0)`` built
        with ``**kwargs`` holding the config's ``r = 8``: 0 and 8).
        None when ``name`` is no such parameter or no call site passes it.  ``self.x``
        stored once in ``__init__`` from a parameter (``self.num_filters = num_filters``)
        is that parameter."""
        if name.__class__ is ast.Attribute:
            name = self._stored_parameter(name)
            if name is None:
                return None
        if name.__class__ is not ast.Name:
            return None
        func = self.ctx.enclosing_function(name)
        if func is None or func.__class__ is ast.Lambda or self.ctx.bindings(func).get(name.id):
            return None
        param, expr = parameter(func, name.id)
        if param is None or expr is None or param is func.args.vararg or param is func.args.kwarg:
            return None
        key = (id(func), name.id)
        if key in self._defaulted:
            found = self._defaulted[key]
        else:
            self._defaulted[key] = None  # a cycle through the call sites: the default alone
            found = self._defaulted[key] = self._passed_or_default(func, name.id, depth)
        if found is None:
            return None
        return [default if v is None else v for v in found]

    def _stored_parameter(self, attr: ast.Attribute) -> Optional[ast.Name]:
        if attr.value.__class__ is not ast.Name or attr.value.id != "self":
            return None
        ctx = self.ctx
        cls = ctx.enclosing_class(attr)
        init = ctx.method(cls, "__init__") if cls is not None else None
        stores = ctx.self_assignments(init).get(attr.attr, ()) if init is not None else ()
        if len(stores) != 1 or stores[0].value.__class__ is not ast.Name:
            return None
        return stores[0].value

    def _passed_or_default(self, func: ast.AST, name: str, depth: int) -> Optional[list]:
        evaluator = self.evaluator
        calls, position = evaluator.call_sites_passing(func, name)
        # the default stays one of the values: a call site that overrides it may be an
        # example building a tiny model (word_language_model's RNNModel(ninp=24))
        out, passed = [None], False
        for call in calls[:12]:
            arg = evaluator._argument_at(call, name, position, depth)
            found = self.values(arg, depth + 1) if arg is not None else []
            if not found:
                out.append(None)  # left at the default (or passed as something not followed)
                continue
            passed = True
            note = self.ctx.related(call, f"`{name}` is passed here")
            out += [Value(v.value, v.origin + (note,), v.literal) for v in found]
        if not passed:
            return None
        return list(dict.fromkeys(out))

    def _call_site_values(self, func: ast.AST, name: str, depth: int) -> list[Value]:
        key = (id(func), name)
        if key in self._active or func.__class__ is ast.Lambda:
            return []
        evaluator = self.evaluator
        calls, position = evaluator.call_sites_passing(func, name)
        self._active.add(key)
        try:
            out = []
            for call in calls[:12]:
                arg = evaluator._argument_at(call, name, position, depth)
                if arg is None:
                    continue
                note = self.ctx.related(call, f"`{name}` is passed here")
                out += [Value(v.value, v.origin + (note,), v.literal) for v in self.values(arg, depth + 1)]
            return _merge_by_value(out)
        finally:
            self._active.discard(key)

    # --- attributes ----------------------------------------------------------------------

    def _attribute(self, attr: ast.Attribute, depth: int) -> list[Value]:
        base = attr.value
        names = base.id if base.__class__ is ast.Name else base.attr if base.__class__ is ast.Attribute else None
        if names in ARGS_NAMES:
            found = self.argparse_default(attr.attr)
            if found is not None:
                return [found]
        if is_config_expr(base):
            return self._preset_values(attr)
        return []

    def _preset_values(self, attr: ast.Attribute) -> list[Value]:
        """A config field with no numeric default (``padded_vocab_size: Optional[int] =
        None``, computed in ``__post_init__`` unless given): the numbers the named presets
        of its class give it (:class:`~amplint.semantic.facts.ConfigPresets`), in this file
        or another linted one."""
        ctx = self.ctx
        cls = annotation_class(ctx, attr.value, attr)
        if cls is None:
            return []
        out = [Value(v, (ctx.related(node, f"`{attr.attr}` of a `{cls}` preset"),))
               for v, node in ctx.get(ConfigPresets).values(cls, attr.attr)]
        if not out and ctx.project is not None and cls not in ctx.classes:
            found = ctx.project.named(ConfigPresets.KEY, cls, exclude_path=ctx.path)
            if len(found) == 1:
                path, table = found[0]
                out = [Value(v, (Related(path, line, column, f"`{attr.attr}` of a `{cls}` preset"),))
                       for v, line, column in table.get(attr.attr, ())]
        return list({(type(v.value), v.value): v for v in out}.values())

    def _saved_hyperparameter(self, attr: ast.Attribute, depth: int) -> list[Value]:
        """``self.hparams.hidden_size`` in a class whose ``__init__`` calls
        ``self.save_hyperparameters()`` (PyTorch Lightning): that ``__init__`` parameter,
        its default and what the call sites in this file pass."""
        ctx = self.ctx
        cls = ctx.enclosing_class(attr)
        if cls is None:
            return []
        for klass in (cls, *ctx.base_classes(cls)):
            init = ctx.method(klass, "__init__")
            if init is None:
                continue
            if not self._saves_hyperparameters(init):
                return []
            param, default = parameter(init, attr.attr)
            if param is None or param is init.args.vararg or param is init.args.kwarg:
                return []
            if default is None:
                return self._call_site_values(init, attr.attr, depth)
            note = ctx.related(default, f"default of `{attr.attr}` (saved as a hyperparameter)")
            own = [v.via(note) for v in self.values(default, depth + 1)]
            passed = self._passed_or_default(init, attr.attr, depth) if own else None
            if passed is None:
                return own
            out = []
            for v in passed:
                out += own if v is None else [v]
            return list({(type(v.value), v.value): v for v in out}.values())
        return []

    def _saves_hyperparameters(self, init: ast.AST) -> bool:
        key = ("hparams", id(init))
        if key not in self._defaulted:
            self._defaulted[key] = "save_hyperparameters" in self.ctx.source and any(
                c.func.__class__ is ast.Attribute and c.func.attr == "save_hyperparameters"
                for c in self.ctx.calls if self.ctx.enclosing_function(c) is init)
        return self._defaulted[key]

    def argparse_default(self, dest: str) -> Optional[Value]:
        """``dest``'s default in this file's argparse parser, else in exactly one other
        linted file's."""
        ctx = self.ctx
        local = ctx.get(ArgparseDefaults).default(dest)
        if local is not None:
            default, call = local
            value = self.evaluator.evaluate(default, None, 1)
            if value is not None:
                return value.via(ctx.related(default, f"default of `--{dest}`"))
            return None
        if ctx.project is None:
            return None
        found = ctx.project.named(ArgparseDefaults.KEY, dest, exclude_path=ctx.path)
        if len({tuple(d[:1]) for _, d in found}) != 1:
            return None
        path, (value, line, column) = found[0]
        return Value(value, (Related(path, line, column, f"default of `--{dest}`"),))

    # --- sequences -----------------------------------------------------------------------

    def _sequence(self, expr: ast.AST, depth: int) -> Optional[_Seq]:
        """The sequence (or dict) ``expr`` names: a literal, a name assigned one, a
        module constant of another file, ``list(x)``, an item of a dict of them, a slice,
        a comprehension (``[[c] * n for c, n in zip(widths, depths)]``: its element,
        which stands for every item), ``[c] * n``, a parameter's call sites."""
        if expr is None or depth > _MAX_DEPTH:
            return None
        ctx = self.ctx
        kind = expr.__class__
        if kind in (ast.List, ast.Tuple):
            if any(e.__class__ is ast.Starred for e in expr.elts):
                return None
            return _Seq(list(expr.elts))
        if kind is ast.Dict:
            if any(k is None or k.__class__ is not ast.Constant for k in expr.keys):
                return _Seq(list(expr.values))
            return _Seq(list(expr.values), [k.value for k in expr.keys])
        if kind in (ast.ListComp, ast.GeneratorExp):
            return _Seq([expr.elt])  # its names are bound by the comprehension's loops
        if kind is ast.BinOp and expr.op.__class__ is ast.Mult:  # [c] * n
            for seq_side in (expr.left, expr.right):
                if seq_side.__class__ in (ast.List, ast.Tuple):
                    return self._sequence(seq_side, depth + 1)
            return None
        if kind is ast.Call and expr.func.__class__ is ast.Name and expr.func.id in ("list", "tuple", "reversed", "sorted") and len(expr.args) == 1:
            return self._sequence(expr.args[0], depth + 1)
        if kind is ast.Subscript:
            picked = self._select(expr, depth)
            if picked is None:
                return None
            if picked.keys is None and expr.slice.__class__ is ast.Slice:
                return picked
            return self._merged(picked.items, depth, picked.origin)
        if kind is ast.Name:
            return self._named_sequence(expr, depth)
        if kind is ast.Attribute:
            base = expr.value
            if base.__class__ is ast.Name and base.id == "self":
                cls = ctx.enclosing_class(expr)
                init = ctx.method(cls, "__init__") if cls is not None else None
                stores = ctx.self_assignments(init).get(expr.attr, ()) if init is not None else ()
                if len(stores) == 1 and stores[0].value is not None:
                    return self._sequence(stores[0].value, depth + 1)
                # stored again in a loop (`self.in_channels_list = self.layers[-1].in_channels_list`):
                # the lists seen stored, each with its store
                merged: list = []
                for stmt in stores[:8]:
                    seq = self._sequence(stmt.value, depth + 1) if stmt.value is not None else None
                    if seq is not None and seq.keys is None:
                        merged += _tagged(seq.items, seq.origin + (ctx.related(stmt, f"`self.{expr.attr}` is set here"),))
                return _Seq(merged[: 4 * _MAX_VALUES], None) if merged else None
            if base.__class__ is ast.Name and ctx.project is not None:
                module = ctx.import_path(base.id)  # import config as C; C.NUM_CHANNELS
                if module is not None:
                    return self._imported_sequence(module, expr.attr)
        return None

    def _merged(self, items: list, depth: int, origin: tuple = ()) -> Optional[_Seq]:
        """The items of the sequences ``items`` are (each tagged with where its sequence
        came from); None when one of them is no sequence."""
        merged: list = []
        for item in items[:_MAX_VALUES]:
            inner = self._item_sequence(item, depth)
            if inner is None:
                return None
            merged += _tagged(inner.items, inner.origin)
        return _Seq(merged, None, origin)

    def _item_sequence(self, item, depth) -> Optional[_Seq]:
        if isinstance(item, Value):
            return None
        if isinstance(item, _Seq):
            return item
        if isinstance(item, _Tagged):
            inner = self._item_sequence(item.item, depth)
            return None if inner is None else _Seq(inner.items, inner.keys, inner.origin + item.origin)
        return self._sequence(item, depth + 1)

    def _named_sequence(self, name: ast.Name, depth: int) -> Optional[_Seq]:
        key = ("seq", id(name))
        if key in self._active:
            return None  # `channels = [... for ci in channels]`: the name's earlier value
        self._active.add(key)
        try:
            return self._named_sequence_of(name, depth)
        finally:
            self._active.discard(key)

    def _named_sequence_of(self, name: ast.Name, depth: int) -> Optional[_Seq]:
        ctx = self.ctx
        loop = self._loop_binding(name)
        if loop is not None:  # `[... for ci in channels]`: ci is any item of channels
            return self._merged(loop.items, depth, loop.origin)
        func = ctx.enclosing_function(name)
        while func is not None:
            assigned = ctx.bindings(func).get(name.id, ())
            param, default = parameter(func, name.id)
            if assigned:
                if param is not None:
                    return None
                if len(assigned) == 1 and assigned[0].__class__ in (ast.Assign, ast.AnnAssign):
                    seq = self._sequence(assigned[0].value, depth + 1)
                    if seq is not None and not seq.origin:
                        seq = _Seq(seq.items, seq.keys, (ctx.related(assigned[0], f"`{name.id}` is assigned here"),))
                    return seq
                # one width list per branch (`if widen_factor == 1.0: channels = [116, 232, 464]`),
                # or a loop over lists of them: an index into it may pick an item of any of them
                merged: list = []
                for stmt in assigned[:8]:
                    if stmt.__class__ in (ast.Assign, ast.AnnAssign) and stmt.value is not None:
                        seq = self._sequence(stmt.value, depth + 1)
                        if seq is None or seq.keys is not None:
                            return None
                        note = ctx.related(stmt, f"`{name.id}` is assigned here")
                        merged += _tagged(seq.items, seq.origin + (note,))
                    elif stmt.__class__ in (ast.For, ast.AsyncFor):
                        seq = self._loop_items(stmt.target, stmt.iter, name.id, depth)
                        inner = self._merged(seq.items, depth, seq.origin) if seq is not None else None
                        if inner is None:
                            return None
                        merged += _tagged(inner.items, inner.origin)
                    else:
                        return None
                return _Seq(merged[: 4 * _MAX_VALUES], None)
            if param is not None:
                if default is not None:
                    return self._sequence(default, depth + 1)
                return self._call_site_sequences(func, name.id, depth)
            func = ctx.enclosing_function(func)
        stmt = ctx.get(ModuleSequences).by_name.get(name.id)
        if stmt is not None:
            seq = self._sequence(stmt.value, depth + 1)
            if seq is not None:
                seq.origin = (ctx.related(stmt, f"`{name.id}` is defined here"),)
            return seq
        origin = ctx.import_origin(name.id) if ctx.project is not None else None
        if origin is not None:  # from config import NUM_CHANNELS
            return self._imported_sequence(origin[0], origin[1])
        return None

    def _call_site_sequences(self, func: ast.AST, name: str, depth: int) -> Optional[_Seq]:
        """A list parameter without a default (``HRNet(channels=channels)``): the items of
        the sequences the call sites in this file pass, each tagged with its site."""
        key = (id(func), name)
        if key in self._active or func.__class__ is ast.Lambda:
            return None
        evaluator = self.evaluator
        calls, position = evaluator.call_sites_passing(func, name)
        self._active.add(key)
        try:
            merged: list = []
            for call in calls[:12]:
                arg = evaluator._argument_at(call, name, position, depth)
                seq = self._sequence(arg, depth + 1) if arg is not None else None
                if seq is None or seq.keys is not None:
                    continue
                note = self.ctx.related(call, f"`{name}` is passed here")
                merged += _tagged(seq.items, seq.origin + (note,))
            return _Seq(merged[: 4 * _MAX_VALUES], None) if merged else None
        finally:
            self._active.discard(key)

    def _imported_sequence(self, module: str, name: str) -> Optional[_Seq]:
        found = self.ctx.project.named(ModuleSequences.KEY, name, module, exclude_path=self.ctx.path)
        if len(found) != 1:
            return None
        path, data = found[0]
        line, column = data["at"]
        where = (Related(path, line, column, f"`{name}` is defined here"),)
        if "items" in data:
            return _Seq([Value(v, where) for v in data["items"]], None, where)
        keys = list(data["dict"])
        return _Seq([_Seq([Value(v, where) for v in data["dict"][k]], None, where) for k in keys], keys, where)

    def _select(self, sub: ast.Subscript, depth: int) -> Optional[_Seq]:
        """The items ``sub`` may pick: one for a known index or key, all otherwise."""
        seq = self._sequence(sub.value, depth + 1)
        if seq is None:
            return None
        index = sub.slice
        if index.__class__ is ast.Slice:
            if seq.keys is not None:
                return None
            bounds = [self.evaluator.evaluate(b) if b is not None else None for b in (index.lower, index.upper, index.step)]
            if any(b is None and e is not None for b, e in zip(bounds, (index.lower, index.upper, index.step))):
                return _Seq(seq.items, None, seq.origin)
            lo, hi, st = (int(b.value) if b is not None else None for b in bounds)
            return _Seq(seq.items[lo:hi:st], None, seq.origin)
        if index.__class__ is ast.Constant and seq.keys is not None:
            if index.value in seq.keys:
                return _Seq([seq.items[seq.keys.index(index.value)]], None, seq.origin)
            return None
        key = self.evaluator.evaluate(index)
        if key is not None and seq.keys is None and type(key.value) is int:
            try:
                return _Seq([seq.items[key.value]], None, seq.origin)
            except IndexError:
                return None
        return _Seq(seq.items, None, seq.origin)  # a loop index, a size name: any of them

    def _items_values(self, seq: Optional[_Seq], depth: int) -> list[Value]:
        """The values of a sequence's items; one value per number, its trail the union of
        the items' that have it (a width written in several lists names each of them)."""
        if seq is None:
            return []
        out: list = []
        for item in seq.items[: 4 * _MAX_VALUES]:
            extra = ()
            if isinstance(item, _Tagged):
                item, extra = item.item, item.origin
            if isinstance(item, Value):
                found = [Value(item.value, item.origin + extra, item.literal)]
            elif isinstance(item, _Seq):
                continue
            else:
                found = [Value(v.value, v.origin + extra + seq.origin, v.literal) for v in self.values(item, depth + 1)]
            out += found
        return _merge_by_value(out)

    # --- config defaults overridden where the config is built ----------------------------

    def overridden(self, value: Value) -> Optional[list[Value]]:
        """When ``value`` is a config default (its first origin says "default of
        `Cls.field`") and every site that builds ``Cls`` -- in this file and in the other
        linted files -- passes ``field`` as a known number: those numbers instead (the
        default is never the size).  None otherwise."""
        notes = [m for m in (_DEFAULT_NOTE.match(r.note) for r in value.origin) if m]
        if not notes:
            return None
        cls, field = notes[0].group(1), notes[0].group(2)
        passed = self.construction_values(cls, field)
        if not passed:
            return None
        default = self.evaluator.config_default(field, cls)
        if default is None or not default.value:
            return None
        ratio = value.value / default.value
        return [Value(v.value * ratio if ratio != 1 else v.value, v.origin + value.origin) for v in passed]

    def construction_values(self, cls: str, field: str) -> Optional[list[Value]]:
        """What every site building ``cls`` passes as ``field``; None when there is no
        site, or one leaves the default or passes something not followed."""
        ctx = self.ctx
        out = []
        sites = 0
        for call, passed, unknown in ctx.get(ConfigConstructions).by_class.get(cls, ()):
            sites += 1
            expr = passed.get(field)
            if expr is None:
                expr = self._positional_field(cls, field, call)
                if expr is None:
                    return None
            found = self.values(expr)
            if not found:
                return None
            note = ctx.related(call, f"`{field}` is passed here")
            out += [Value(v.value, v.origin + (note,), v.literal) for v in found]
        if ctx.project is not None:
            for path, calls in ctx.project.named(ConfigConstructions.KEY, cls, exclude_path=ctx.path):
                for site in calls:
                    sites += 1
                    number = site["kw"].get(field)
                    if number is None:
                        return None
                    out.append(Value(number, (Related(path, *site["at"], f"`{field}` is passed here"),)))
        return out if sites else None

    def _positional_field(self, cls: str, field: str, call: ast.Call) -> Optional[ast.AST]:
        klass = self.ctx.classes.get(cls)
        if klass is None or not call.args:
            return None
        order = [n for n in config_fields(self.ctx, klass)]
        init = self.ctx.method(klass, "__init__")
        if init is not None:
            order = [a.arg for a in init.args.posonlyargs + init.args.args][1:]
        if field in order and order.index(field) < len(call.args):
            arg = call.args[order.index(field)]
            return None if arg.__class__ is ast.Starred else arg
        return None


class LayerSizes:
    """The resolved sizes of one torch layer call, with where each value is written:
    ``ctx.get(LayerSizes).of(call)`` -> {argument name (``in_features``...): [Value, ...]}
    (every value the size takes; empty dict for a call that is no torch layer).  The
    public accessor for rules that need layer shapes (AMP201, fp8 rules)."""

    def __init__(self, ctx):
        self.ctx = ctx
        self._by_call: dict[int, dict[str, list[Value]]] = {}

    def of(self, call: ast.Call) -> dict[str, list[Value]]:
        found = self._by_call.get(id(call))
        if found is None:
            from ..analysis.calls import argument
            from ..analysis.dims import LAYERS
            from .layers import torch_layer

            found = {}
            name = torch_layer(self.ctx, call)
            if name is not None:
                values = self.ctx.get(SizeValues)
                for dim in LAYERS[name][0]:
                    expr = argument(call, dim.keyword, dim.index)
                    if expr is not None:
                        found[dim.keyword] = values.values(expr)
            self._by_call[id(call)] = found
        return found
