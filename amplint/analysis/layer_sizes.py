"""One file's layer sizes for AMP201 (unaligned-dimension).

:class:`LayerSurvey` is filled call by call during the engine's walk -- layer calls
(``nn.Linear(768, 50257)``), ``nn.Parameter`` shapes, head splits (``n_embd //
n_head``), the weights GEMMs read -- and, once the walk is done, says which sizes are
not a multiple of the alignment (:meth:`LayerSurvey.finish`) and what each would be
padded to (:meth:`LayerSurvey.padded`), keeping every head split exact.  Where a size's
number is written is :mod:`amplint.analysis.dims`' question; sizes defined in another
file are :mod:`amplint.analysis.config_dims`'.  Never imports torch.
"""
from __future__ import annotations

import ast
import collections
import dataclasses
import math
import re
from typing import Optional

from ..evaluate import Value
from ..rule import Related
from ..semantic.facts import LayerFormulas, LayerParameters
from ..semantic.configs import parameter
from ..semantic.layers import torch_layer
from ..semantic.sizes import SizeValues
from .calls import argument
from .dims import (
    GEMM_FUNCTIONS,
    LAYERS,
    MIN_SIZE,
    SMALL_HEAD,
    VOCAB_NAME_PARTS,
    TINY_SIZE,
    Root,
    as_size,
    data_named,
    find_root,
    lcm,
    next_multiple,
    parameter_shape,
)

#: the variable / field a provenance note names: "`x` is defined here", "default of
#: parameter `x` of `f`", "`self.x` is set here", "default of `Config.x`"
_NOTE_NAME = re.compile(r"`(?:[A-Za-z_]\w*\.)?([A-Za-z_]\w*)`")
_PARAMETER_QUALNAMES = ("torch.nn.Parameter", "torch.nn.parameter.Parameter")
_GEMM_ATTRS = frozenset(name.rsplit(".", 1)[1] for name in GEMM_FUNCTIONS)
#: a dimension's role -> the side of the layer it is on ("both": a hidden size, an embedding width)
_SIDES = {"in": "in", "in_channels": "in", "out": "out"}
#: related locations one finding lists when a size takes several values
_MAX_RELATED = 12


_JUMPS = (ast.Raise, ast.Return, ast.Continue, ast.Break)
#: a model's input / output width parameter (``in_channels``, ``out_features``, ``input_dim``)
_EDGE_NAME = re.compile(r"^(in|out|input|output)_(channels|chans|features|dim|size)$")


def _unreachable(ctx, node: ast.AST, memo: dict) -> bool:
    """Whether ``node`` sits after a ``raise`` / ``return`` of its block (code left in
    place but never run: parlai's ``raise AssertionError("This code should not
    execute")`` followed by the layer it used to build).  ``memo``: block -> (first jump's
    line, for the file), so that each block is scanned once."""
    child = node
    for anc in ctx.ancestors(node):
        if isinstance(child, ast.stmt):
            for field in ("body", "orelse", "finalbody"):
                block = getattr(anc, field, None)
                if not isinstance(block, list) or not block:
                    continue
                key = id(block)
                if key not in memo:
                    memo[key] = next((s.lineno for s in block if isinstance(s, _JUMPS)), None)
                jump = memo[key]
                if jump is not None and child.lineno > jump and block[0].lineno <= child.lineno <= block[-1].end_lineno:
                    return True
        if anc.__class__ in (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module):
            return False
        child = anc
    return False


def _under_main(ctx, node: ast.AST) -> bool:
    """Inside ``if __name__ == "__main__":`` (a smoke test building the model)."""
    for anc in ctx.ancestors(node):
        if anc.__class__ is ast.If and anc.test.__class__ is ast.Compare and "__main__" in ast.unparse(anc.test):
            return True
    return False


def _scope(ctx, node: ast.AST):
    """The module a layer belongs to: its class, else its function, else the file."""
    cls = ctx.enclosing_class(node)
    if cls is not None:
        return id(cls)
    func = ctx.enclosing_function(node)
    return id(func) if func is not None else None


@dataclasses.dataclass
class UnalignedSize:
    """One unaligned size of one layer call."""

    label: str
    size: int
    #: where its number is written (None: nowhere one edit could pad it)
    root: Optional[Root]
    #: the definitions the value flowed through (related locations)
    origin: tuple
    #: found by following every value the size takes (no edit offered): how many distinct
    #: values there are, 0 when the evaluator folded it to one
    choice: int = 0
    #: below the small-size floor: reported only when it is a hidden width of its module
    #: (another layer there reads it as an input or writes it as an output)
    small: bool = False
    #: the side of the layer the size is on: "in", "out" or "both" (a hidden size)
    side: str = "both"
    #: no value is known, but none of the values its inputs can take aligns it: why
    #: (``size`` is 0 then)
    never: str = ""


def _names_in(expr: ast.AST) -> list[str]:
    out = []
    for node in ast.walk(expr):
        if isinstance(node, ast.Name):
            out.append(node.id)
        elif isinstance(node, ast.Attribute):
            out.append(node.attr)
    return out


def _pixels_in(expr: ast.AST) -> bool:
    """``patch_size * patch_size * 3`` / ``p * p * channels``: the pixels of a patch."""
    if not (isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mult)):
        return False
    stack, names, channels = [expr], [], False
    while stack:
        node = stack.pop()
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            stack += [node.left, node.right]
        elif isinstance(node, ast.Constant) and node.value in (1, 3):
            channels = True
        elif isinstance(node, (ast.Name, ast.Attribute)):
            name = (node.id if isinstance(node, ast.Name) else node.attr).lower()
            names.append(name)
            channels = channels or "chan" in name
    patch = any("patch" in n for n in names) or len(names) != len(set(names))
    return patch and channels


def _self_attr(expr: ast.AST) -> Optional[str]:
    """``self.w`` / ``self.w.t()`` / ``self.w.T`` / ``self.w.transpose(0, 1)`` -> "w"."""
    while True:
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in ("t", "transpose", "to", "half", "float"):
            expr = expr.func.value
        elif isinstance(expr, ast.Attribute) and expr.attr in ("T", "mT"):
            expr = expr.value
        else:
            break
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self":
        return expr.attr
    return None


class LayerSurvey:
    """One file's layer calls, remembered during the walk and judged after it, once
    the file's head splits and GEMM weights are known."""

    def __init__(self, alignment: int, floor: int, checkpoint: bool):
        self.alignment = alignment
        self.floor = floor
        #: the file loads a pretrained checkpoint: padding a config-bound size breaks loading
        self.checkpoint = checkpoint
        #: (layer call, label, its unaligned sizes)
        self.pending: list[tuple[ast.AST, str, list[UnalignedSize]]] = []
        #: (nn.Parameter call, self attribute, class name, shape)
        self.params: list[tuple[ast.Call, str, Optional[str], list[ast.AST]]] = []
        #: (class name, self attribute) of parameters a GEMM reads
        self.gemm_attrs: set[tuple[Optional[str], str]] = set()
        #: root key -> head counts the width is split by
        self.divisors: dict = collections.defaultdict(set)
        self.splits: list[ast.BinOp] = []
        self.matmuls: list[ast.BinOp] = []
        #: literal values also written elsewhere in the file (no fix for them)
        self.scattered: set = set()
        #: (scope, side) -> {size: ids of the layer calls that have it}: every size seen,
        #: aligned or not, to tell a small hidden width from a data-bound input or a head
        self.widths: dict = collections.defaultdict(lambda: collections.defaultdict(set))
        #: block -> line of its first raise/return (code after it is never run)
        self._jumps: dict = {}
        #: (line, column) -> this file's call there (the call sites a size's trail names)
        self._sites: Optional[dict] = None

    def add_call(self, node: ast.Call, ctx) -> None:
        name = torch_layer(ctx, node)
        if name is not None:
            if not _unreachable(ctx, node, self._jumps):
                self._layer(node, name, ctx)
            return
        func = node.func
        attr = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        if func.__class__ is ast.Name:
            self._local_helper_call(node, attr, ctx)
        if ctx.project is not None and attr is not None:
            self._helper_call(node, attr, ctx)
        if attr == "Parameter":
            if ctx.qualname(func) in _PARAMETER_QUALNAMES:
                self._parameter(node, ctx)
        elif attr in _GEMM_ATTRS:
            indexes = GEMM_FUNCTIONS.get(ctx.qualname(func) or "")
            if indexes:
                cls = ctx.enclosing_class(node)
                for i in indexes:
                    if i < len(node.args):
                        used = _self_attr(node.args[i])
                        if used:
                            self.gemm_attrs.add((cls.name if cls else None, used))

    def add_binop(self, node: ast.BinOp) -> None:
        # only remembered here; looked at in end_file when there is something to report
        op = node.op
        if isinstance(op, (ast.FloorDiv, ast.Mod)):
            if not isinstance(node.left, ast.Constant):
                self.splits.append(node)
        elif isinstance(op, ast.MatMult):
            self.matmuls.append(node)

    def collect_splits(self, ctx) -> None:
        """Divisors the model relies on: ``width // heads``, ``width % heads``."""
        splits, self.splits = self.splits, []
        for node in splits:
            root = find_root(ctx, node.left)
            if root is not None and root.kind == "literal":
                divisor = ctx.evaluate(node.right)
                self.add_divisor(root, as_size(divisor.value) if divisor else None)

    def _collect_matmuls(self, ctx) -> None:
        for node in self.matmuls:
            cls = ctx.enclosing_class(node)
            for side in (node.left, node.right):
                used = _self_attr(side)
                if used:
                    self.gemm_attrs.add((cls.name if cls else None, used))

    def add_divisor(self, root: Root, divisor: Optional[int]) -> None:
        if not divisor or divisor < 2:
            return
        value = root.mult * root.node.value
        if value % divisor == 0:  # a split the model relies on (heads); keep it exact
            self.divisors[root.key].add(divisor // math.gcd(divisor, root.mult))

    def _layer(self, call: ast.Call, name: str, ctx) -> None:
        dims, heads, groups = LAYERS[name]
        if groups is not None:
            g = argument(call, groups[1], groups[0])
            if g is not None:
                gv = ctx.evaluate(g)
                if gv is None or gv.value != 1:
                    return
        if heads is not None:
            h, first = argument(call, heads[1], heads[0]), argument(call, dims[0].keyword, dims[0].index)
            if h is not None and first is not None:
                root = find_root(ctx, first)
                hv = ctx.evaluate(h)
                if root is not None and root.kind == "literal" and hv is not None:
                    self.add_divisor(root, as_size(hv.value))
        sizes = []
        for dim in dims:
            expr = argument(call, dim.keyword, dim.index)
            if expr is not None:
                size = self._unaligned(expr, ctx, dim.keyword, dim.role, call)
                if size is not None:
                    sizes.append(size)
        if sizes:
            func = call.func
            plain = (func.attr if func.__class__ is ast.Attribute else getattr(func, "id", None)) == name
            label = f"`nn.{name}`" if plain else f"`{ast.unparse(func)}` (an `nn.{name}`)"
            self.pending.append((call, label, sizes))

    def _record(self, ctx, call: ast.AST, role: str, values) -> None:
        """Remember the sizes a layer (or a helper that builds one) has on each side."""
        scope = _scope(ctx, call)
        side = _SIDES.get(role, "both")
        for v in values:
            size = as_size(v.value)
            if size is not None:
                self.widths[(scope, side)][size].add(id(call))

    def _local_helper_call(self, call: ast.Call, name: str, ctx) -> None:
        """A call of this file's function or class whose parameters reach a layer size
        (``BranchSeparables(self.num_filters, self.num_filters, 5)``): its sizes are widths
        of the calling module, for telling hidden widths from inputs and heads."""
        entries = ctx.get(LayerParameters).by_name.get(name)
        if not entries:
            return
        values = ctx.get(SizeValues)
        for position, pname, factor, _, _, _, role in entries:
            expr = next((kw.value for kw in call.keywords if kw.arg == pname), None)
            if expr is None and position is not None and position < len(call.args):
                if not any(a.__class__ is ast.Starred for a in call.args[: position + 1]):
                    expr = call.args[position]
            if expr is not None:
                found = values.values(expr)
                self._record(ctx, call, role, [Value(v.value * factor) for v in found])

    def _helper_call(self, call: ast.Call, name: str, ctx) -> None:
        """A call of another file's function or class whose parameters reach a layer
        size (``conv_bn(True, 473, 256)``): the sizes this call passes, reported here."""
        func = call.func
        if func.__class__ is ast.Name:
            origin = ctx.import_origin(func.id)
            module = origin[0] if origin is not None else None
        elif func.__class__ is ast.Attribute and func.value.__class__ is ast.Name:
            module = ctx.import_path(func.value.id)
        else:
            module = None
        if module is None:
            return
        found = ctx.project.named(LayerParameters.KEY, name, module, exclude_path=ctx.path)
        formulas = ctx.project.named(LayerFormulas.KEY, name, module, exclude_path=ctx.path)
        sizes = self._formula_sizes(call, ctx, formulas[0]) if len(formulas) == 1 else []
        if len(found) != 1:
            if sizes:
                self.pending.append((call, f"`{name}`", sizes))
            return
        path, entries = found[0]
        for position, pname, factor, layer, arg, role, line, column in entries:
            expr = None
            for kw in call.keywords:
                if kw.arg == pname:
                    expr = kw.value
            if expr is None and position is not None and position < len(call.args):
                if not any(a.__class__ is ast.Starred for a in call.args[: position + 1]):
                    expr = call.args[position]
            if expr is None:
                continue
            layer_at = Related(path, line, column, f"`{pname}` reaches `{layer}` {arg} here")
            found = ctx.get(SizeValues).values(expr)
            self._record(ctx, call, role, [Value(v.value * factor) for v in found])
            judged = []
            for value in found:
                scaled = Value(value.value * factor, value.origin + (layer_at,), value.literal if factor == 1 else None)
                size = self._judge(expr, ctx, f"{arg} of `{layer}`", role, scaled, (pname,))
                if size is not None:
                    judged.append(size)
            if judged:
                # a size above the floor first (it needs no hidden-width test); every unaligned
                # value's trail, as for a layer of this file
                judged.sort(key=lambda s: s.small)
                size = judged[0]
                if len(judged) > 1:
                    origin = tuple(dict.fromkeys(r for s in judged for r in s.origin))[:_MAX_RELATED]
                    size = dataclasses.replace(size, root=None, choice=len({v.value for v in found}), origin=origin)
                elif factor != 1:
                    size = dataclasses.replace(size, root=None)
                sizes.append(size)
        if sizes:
            self.pending.append((call, f"`{name}`", sizes))

    def _formula_sizes(self, call: ast.Call, ctx, found) -> list[UnalignedSize]:
        """The sizes another file's helper computes from the arguments of ``call``
        (``d_model // n_head`` for ``Attention(d_model=768, n_head=12)``,
        :class:`~amplint.semantic.facts.LayerFormulas`): one per layer argument."""
        path, formulas = found
        values = ctx.get(SizeValues)
        sizes, seen = [], set()
        for entry in formulas[:32]:
            key = (entry["expr"], entry["layer"], entry["arg"])
            if key in seen:
                continue
            seen.add(key)
            bound, first = {}, None
            for pname, position in zip(entry["params"], entry["at"]):
                expr = next((kw.value for kw in call.keywords if kw.arg == pname), None)
                if expr is None and position is not None and position < len(call.args):
                    if not any(a.__class__ is ast.Starred for a in call.args[: position + 1]):
                        expr = call.args[position]
                found_values = values.values(expr) if expr is not None else []
                if not found_values:
                    break
                bound[pname], first = found_values, first or expr
            else:
                layer_at = Related(path, *entry["where"], f"`{entry['expr']}` reaches `{entry['layer']}` {entry['arg']} here")
                results = _formula_values(ast.parse(entry["expr"], mode="eval").body, bound)
                self._record(ctx, call, entry["role"], results)
                judged = [j for j in (self._judge(first, ctx, f"{entry['arg']} of `{entry['layer']}`", entry["role"],
                                                  Value(v.value, v.origin + (layer_at,)), tuple(entry["params"]))
                                      for v in results) if j is not None]
                if not judged:
                    continue
                judged.sort(key=lambda j: j.small)
                origin = tuple(dict.fromkeys(r for j in judged for r in j.origin))[:_MAX_RELATED]
                # a width the helper both writes and reads (one layer's output, the next one's
                # input) is a hidden width of that module, whatever its size
                small = judged[0].small and not entry["hidden"]
                sizes.append(dataclasses.replace(judged[0], root=None, origin=origin, small=small,
                                                 choice=len({v.value for v in results})))
        return sizes

    def _parameter(self, call: ast.Call, ctx) -> None:
        shape = parameter_shape(ctx, call)
        if shape is None:
            return
        stmt = ctx.parent(call)
        if not isinstance(stmt, (ast.Assign, ast.AnnAssign)) or stmt.value is not call:
            return
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        attr = _self_attr(targets[0]) if len(targets) == 1 else None
        if attr is None:
            return
        cls = ctx.enclosing_class(call)
        self.params.append((call, attr, cls.name if cls else None, shape))

    def _unaligned(self, expr: ast.AST, ctx, label: str, role: str = "", call: Optional[ast.AST] = None) -> Optional[UnalignedSize]:
        value = ctx.evaluate(expr)
        if value is not None and expr.__class__ in (ast.Name, ast.Attribute):
            # a parameter's default, as the call sites in this file bind it: what they
            # pass, the default only where one leaves it out
            # (an unaligned default is judged as before, with its fix: the sites may be examples)
            passed = ctx.get(SizeValues).defaulted_parameter(expr, value)
            if passed is not None and self._judge(expr, ctx, label, role, value) is None and any(
                    v is not value and self._judge(expr, ctx, label, role, v) is not None for v in passed):
                return self._candidates(expr, ctx, label, role, call, passed)
            if passed is not None and call is not None:
                self._record(ctx, call, role, passed)
        if value is not None:
            if call is not None:
                self._record(ctx, call, role, (value,))
            found = self._judge(expr, ctx, label, role, value)
            if found is None:
                return None
            # a config default every site that builds the config overrides is not the size
            passed = ctx.get(SizeValues).overridden(value)
            if passed and all(self._aligned(v) for v in passed):
                return None
            return found
        candidates = ctx.get(SizeValues).values(expr, folded=True)
        if not candidates:
            return self._never_aligned(expr, ctx, label, role)
        return self._candidates(expr, ctx, label, role, call, candidates)

    def _candidates(self, expr, ctx, label: str, role: str, call, candidates: list) -> Optional[UnalignedSize]:
        if call is not None:
            self._record(ctx, call, role, candidates)
        distinct = len({c.value for c in candidates})
        found = [f for f in (self._judge(expr, ctx, label, role, c) for c in candidates) if f is not None]
        if not found:
            return None
        found.sort(key=lambda f: f.small)  # a size above the floor first: it needs no hidden-width test
        # every unaligned value's trail (each call site that passes one): where to pad (one
        # of several values, another file's option) is the author's call
        origin = tuple(dict.fromkeys(r for f in found for r in f.origin))[:_MAX_RELATED]
        return dataclasses.replace(found[0], root=None, choice=distinct, origin=origin)

    def _never_aligned(self, expr: ast.AST, ctx, label: str, role: str) -> Optional[UnalignedSize]:
        """A size of unknown inputs that no value of them can align (``2 * dim + 1``)."""
        if expr.__class__ is ast.Constant or role == "vocab" or (role in ("in", "in_channels") and _pixels_in(expr)):
            return None
        residues = ctx.get(SizeValues).residues(expr, self.alignment)
        if 0 in residues or data_named(_names_in(expr)):
            return None
        if all(r % 2 for r in residues):
            how = "odd for every value of its inputs"
        else:
            how = f"{' or '.join(map(str, sorted(residues)))} modulo {self.alignment} for every value of its inputs"
        return UnalignedSize(label, 0, None, (), side=_SIDES.get(role, "both"),
                             never=f"`{ast.unparse(expr)}` is {how}")

    def _aligned(self, value) -> bool:
        size = as_size(value.value)
        return size is not None and size % self.alignment == 0

    def _judge(self, expr: ast.AST, ctx, label: str, role: str, value, extra_names=()) -> Optional[UnalignedSize]:
        size = as_size(value.value)
        if size is None or size % self.alignment == 0 or size < TINY_SIZE:
            return None
        # below the floor (or a narrow output): an input feature count, colour channels, a
        # head of classes or targets -- unless finish() sees it is a hidden width
        small = size < max(self.floor, MIN_SIZE) or (role == "out" and size < SMALL_HEAD)
        if role in ("in", "in_channels") and _pixels_in(expr):
            return None  # a patch embedding's input: patch_size * patch_size * 3 pixels of the data
        if self._model_edge(ctx, expr):
            return None  # the whole model's input or output width: the data's (100 mel bins)
        root = find_root(ctx, expr)
        names = list(root.names) if root is not None else _names_in(expr)
        names += [m.group(1) for m in (_NOTE_NAME.search(r.note) for r in value.origin) if m]
        names += list(extra_names)
        if data_named(names):
            return None
        if role == "vocab" and not (
            any(part in n.lower() for n in names for part in VOCAB_NAME_PARTS) or (not names and size >= 1000)
        ):
            return None  # a lookup table (positions, relative-position bias): its row count is no GEMM size
        if root is not None and (root.kind == "literal" and root.mult * root.node.value != size):
            root = None  # the evaluator and the root disagree: do not guess an edit
        return UnalignedSize(label, size, root, value.origin, small=small, side=_SIDES.get(role, "both"))

    def _model_edge(self, ctx, expr: ast.AST) -> bool:
        """``in_channels`` / ``out_channels`` (``in_features``, ``input_dim``...) at its
        default, a parameter of the ``__init__`` of a module class nothing in this file
        builds: the top model's input or output width, which the data fixes (tortoise's
        ``DiffusionTts(in_channels=100)`` mel bins), not a width the design chose."""
        if expr.__class__ is not ast.Name or _EDGE_NAME.match(expr.id) is None:
            return False
        func = ctx.enclosing_function(expr)
        if func is None or getattr(func, "name", None) != "__init__" or ctx.bindings(func).get(expr.id):
            return False
        cls = ctx.parent(func)
        param, default = parameter(func, expr.id)
        if param is None or default is None or cls.__class__ is not ast.ClassDef or not ctx.is_module_class(cls):
            return False
        calls, _ = ctx.evaluator._call_sites(func)
        return all(_under_main(ctx, c) for c in calls) and not any(
            any(b.__class__ is ast.Name and b.id == cls.name for b in other.bases) for other in ctx.classes.values())

    def _hidden(self, ctx, call: ast.AST, size: UnalignedSize) -> bool:
        """Whether another layer of the same module reads ``size`` as an input (for an
        output) or writes it as an output (for an input): a hidden width, the design's."""
        scope = _scope(ctx, call)
        sides = {"in": ("out", "both"), "out": ("in", "both")}.get(size.side, ("in", "out", "both"))
        me = id(call)
        for side in sides:
            ids = self.widths.get((scope, side), {}).get(size.size, ())
            if any(i != me for i in ids):
                return True
        return False

    def _hidden_where_passed(self, ctx, size: UnalignedSize) -> bool:
        """Whether a size passed down to this layer through calls of this file's helpers
        (``BranchSeparablesStem(self.stem_filters, self.num_filters)`` building
        ``SeparableConv2d(in_channels, out_channels)``) is a hidden width of a module it
        passed through: another layer or helper there has it on the other side."""
        if self._sites is None:
            self._sites = {(c.lineno, ctx.char_col(c.lineno, c.col_offset) + 1): c for c in ctx.calls}
        for r in size.origin:
            site = self._sites.get((r.line, r.column)) if r.path == ctx.path and r.note.endswith("is passed here") else None
            if site is not None and self._hidden(ctx, site, size):
                return True
        return False

    def padded(self, root: Root, extra_divisors=()) -> int:
        step = lcm(self.alignment, *self.divisors.get(root.key, ()), *extra_divisors)
        return next_multiple(root.node.value, step)

    def _scattered_literals(self, ctx) -> set:
        """Numbers written as bare literals in flagged layer calls that the file also
        writes somewhere else (``torch.zeros(b, 51)`` next to ``nn.LSTMCell(51, 51)``, or
        an unflagged layer): padding only the flagged literals would break the model."""
        flagged: dict = collections.defaultdict(set)
        for _, _, sizes in self.pending:
            for s in sizes:
                root = s.root
                if root is not None and root.kind == "literal" and not root.names:
                    flagged[root.node.value].add(root.key)
        scattered = set()
        for value, keys in flagged.items():
            if len(re.findall(rf"(?<![\w.]){value}(?![\w.])", ctx.source)) > len(keys):
                scattered.add(value)
        return scattered

    def finish(self, ctx) -> list[tuple[ast.AST, str, list[UnalignedSize]]]:
        """After the walk: (layer call or parameter, label, unaligned sizes) for each use
        to report, with the file's head splits collected for the padding."""
        if self.params:
            self._collect_matmuls(ctx)
        for call, attr, cls, shape in self.params:
            if (cls, attr) not in self.gemm_attrs and "weight" not in attr.lower():
                continue
            sizes = [s for s in (self._unaligned(e, ctx, f"dim {i}") for i, e in enumerate(shape)) if s is not None]
            if sizes:
                self.pending.append((call, f"`nn.Parameter` weight `self.{attr}`", sizes))
        kept = []
        for call, label, sizes in self.pending:
            sizes = [s for s in sizes if not s.small or self._hidden(ctx, call, s) or self._hidden_where_passed(ctx, s)]
            if sizes:
                kept.append((call, label, sizes))
        self.pending = kept
        if self.pending:
            self.collect_splits(ctx)
        self.scattered = self._scattered_literals(ctx)
        return self.pending


_FORMULA_OPS = {ast.Add: int.__add__, ast.Sub: int.__sub__, ast.Mult: int.__mul__, ast.FloorDiv: int.__floordiv__}


def _formula_values(expr: ast.AST, bound: dict) -> list[Value]:
    """The values of a helper's size formula with its parameters bound to lists of
    values (a product of the lists, a few dozen at most)."""
    if expr.__class__ is ast.Constant:
        return [Value(expr.value)]
    if expr.__class__ is ast.Name:
        return list(bound.get(expr.id, ()))
    if expr.__class__ is ast.BinOp and expr.op.__class__ in _FORMULA_OPS:
        op = _FORMULA_OPS[expr.op.__class__]
        out = []
        for a in _formula_values(expr.left, bound)[:24]:
            for b in _formula_values(expr.right, bound)[:24]:
                if type(a.value) is int and type(b.value) is int and not (op is int.__floordiv__ and b.value == 0):
                    out.append(Value(op(a.value, b.value), tuple(dict.fromkeys(a.origin + b.origin))))
        return out[:24]
    return []


def sizes_text(sizes: list[UnalignedSize], alignment: int) -> str:
    """How a message states a layer's unaligned sizes and what each pads to."""
    if len(sizes) == 1:
        s = sizes[0]
        if s.never:
            return f"{s.label} {s.never}: never a multiple of {alignment}"
        return f"{s.label} is {s.size}, not a multiple of {alignment}: pad to {next_multiple(s.size, alignment)}"
    parts = ", ".join(f"{s.label} {s.never}" if s.never else f"{s.label} {s.size} (pad to {next_multiple(s.size, alignment)})"
                      for s in sizes)
    return f"sizes not multiples of {alignment}: {parts}"
