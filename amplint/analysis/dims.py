"""Layer sizes: which arguments of which torch layers are Tensor Core dimensions, and
where the number a size comes from is written (its *root*), so that a fix can pad it
once at its definition.

Used by AMP201 (unaligned-dimension).  Never imports torch.

A root is found by following the same paths as :mod:`amplint.evaluate` (names bound
once in a function, parameter defaults, module constants, ``self.attr`` set once in
``__init__``, config-class field defaults) while recording how the number reaches the
use site: only through names and multiplication by integer literals (``4 * n_embd``),
so that padding the root to a multiple of the alignment keeps the use aligned too.
``n + 1`` or ``a * b`` of two names have no root (no fix is offered for them).
"""
from __future__ import annotations

import ast
import dataclasses
import math
from typing import Optional

from ..bindings import bound_names
from ..semantic.configs import LocalConfigs, annotation_class, config_fields, declares_field, is_config_expr, parameter

_MAX_DEPTH = 12

# --- which arguments are dimensions ---------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Dim:
    index: Optional[int]  # positional index (None: keyword only)
    keyword: str
    #: "in" (an input width), "in_channels" (a conv's input channels: images/audio),
    #: "out" (an output width, maybe a classifier head), "hidden", "vocab"
    role: str


def _dims(*items) -> tuple[Dim, ...]:
    return tuple(Dim(*item) for item in items)


_CONV = _dims((0, "in_channels", "in_channels"), (1, "out_channels", "out"))
_LAZY_CONV = _dims((0, "out_channels", "out"))
_EMBEDDING = _dims((0, "num_embeddings", "vocab"), (1, "embedding_dim", "hidden"))
_RNN = _dims((0, "input_size", "in"), (1, "hidden_size", "hidden"), (None, "proj_size", "hidden"))
_CELL = _dims((0, "input_size", "in"), (1, "hidden_size", "hidden"))
_ENCODER_LAYER = _dims((0, "d_model", "hidden"), (2, "dim_feedforward", "hidden"))

#: layer class name -> (dimension arguments, (index, keyword) of the head count or None,
#: (index, keyword) of ``groups`` or None)
LAYERS: dict[str, tuple[tuple[Dim, ...], Optional[tuple[int, str]], Optional[tuple[int, str]]]] = {
    "Linear": (_dims((0, "in_features", "in"), (1, "out_features", "out")), None, None),
    "LazyLinear": (_dims((0, "out_features", "out")), None, None),
    "Bilinear": (_dims((0, "in1_features", "in"), (1, "in2_features", "in"), (2, "out_features", "out")), None, None),
    "Conv1d": (_CONV, None, (6, "groups")),
    "Conv2d": (_CONV, None, (6, "groups")),
    "Conv3d": (_CONV, None, (6, "groups")),
    "ConvTranspose1d": (_CONV, None, (6, "groups")),
    "ConvTranspose2d": (_CONV, None, (6, "groups")),
    "ConvTranspose3d": (_CONV, None, (6, "groups")),
    "LazyConv1d": (_LAZY_CONV, None, (5, "groups")),
    "LazyConv2d": (_LAZY_CONV, None, (5, "groups")),
    "LazyConv3d": (_LAZY_CONV, None, (5, "groups")),
    "Embedding": (_EMBEDDING, None, None),
    "EmbeddingBag": (_EMBEDDING, None, None),
    "MultiheadAttention": (
        _dims((0, "embed_dim", "hidden"), (6, "kdim", "in"), (7, "vdim", "in")), (1, "num_heads"), None,
    ),
    "LSTM": (_RNN, None, None),
    "GRU": (_RNN[:2], None, None),
    "RNN": (_RNN[:2], None, None),
    "LSTMCell": (_CELL, None, None),
    "GRUCell": (_CELL, None, None),
    "RNNCell": (_CELL, None, None),
    "TransformerEncoderLayer": (_ENCODER_LAYER, (1, "nhead"), None),
    "TransformerDecoderLayer": (_ENCODER_LAYER, (1, "nhead"), None),
    "Transformer": (_dims((0, "d_model", "hidden"), (4, "dim_feedforward", "hidden")), (1, "nhead"), None),
}

#: tensor factories whose 2-D result, wrapped in nn.Parameter, is a GEMM weight
FACTORIES = frozenset({
    "empty", "zeros", "ones", "randn", "rand", "Tensor", "FloatTensor", "HalfTensor", "BFloat16Tensor",
})
#: torch functions whose weight argument is a GEMM operand: name -> positional indexes
GEMM_FUNCTIONS = {
    "torch.nn.functional.linear": (1,), "torch.matmul": (0, 1), "torch.mm": (0, 1),
    "torch.addmm": (1, 2), "torch.bmm": (0, 1), "torch.nn.functional.bilinear": (2,),
}

#: names that say a size is fixed by the data set (number of classes / labels)
DATA_NAME_PARTS = ("class", "label")

#: text in a file that loads pretrained weights into the model it defines
CHECKPOINT_MARKERS = ("from_pretrained", "PreTrainedModel", "load_pretrained")
#: text in a file that may define or use a layer size
LAYER_MARKERS = ("Linear", "Conv", "Embedding", "LSTM", "GRU", "RNN", "Attention", "Transformer", "Parameter")
#: output widths below this are usually heads (classes, regression targets, box
#: coordinates): reported only when another layer of the module reads them (a hidden width)
SMALL_HEAD = 64
#: sizes below this are usually the data's (input features, colour channels, pixel rows, a
#: latent code): reported only when they are a hidden width of the module -- one layer's
#: output and another's input (MTCNN's 10- and 28-channel convs, NASNet-mobile's 44)
MIN_SIZE = 32
#: sizes below this are never reported: scalar outputs, binary heads, token types
TINY_SIZE = 3
#: an embedding's row count is a GEMM size only for a vocabulary (tied to the output layer)
VOCAB_NAME_PARTS = ("vocab", "token", "word", "char")


def layer_name(call: ast.Call) -> Optional[str]:
    """Cheap first look: the last name of the called expression, when it is a layer."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    return name if name in LAYERS else None


def is_torch_layer(ctx, call: ast.Call, name: str) -> bool:
    qn = ctx.qualname(call.func)
    return qn == f"torch.nn.{name}"


def parameter_shape(ctx, call: ast.Call) -> Optional[list[ast.AST]]:
    """``nn.Parameter(torch.empty(a, b))`` -> [a, b] (2-D only); else None."""
    if not call.args:
        return None
    inner = call.args[0]
    if not isinstance(inner, ast.Call) or not isinstance(inner.func, ast.Attribute) or inner.func.attr not in FACTORIES:
        return None
    qn = ctx.qualname(inner.func)
    if qn is None or not qn.startswith("torch."):
        return None
    args = inner.args
    if len(args) == 1 and isinstance(args[0], (ast.Tuple, ast.List)):
        args = args[0].elts
    if len(args) != 2 or any(isinstance(a, ast.Starred) for a in args):
        return None
    return list(args)


# --- roots ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Root:
    """Where a size is written.  ``kind`` is "literal" (an int literal in this file:
    ``node``) or "config" (a config-class field not defined in this file: ``field`` of
    ``cls``, which may be None).  The size at the use is ``mult`` times the root."""

    kind: str
    mult: int = 1
    node: Optional[ast.AST] = None
    field: Optional[str] = None
    cls: Optional[str] = None
    #: the names the number passed through on its way to the use (nearest first)
    names: tuple[str, ...] = ()
    #: whether it passed through a config class (a checkpoint may fix it)
    via_config: bool = False

    @property
    def key(self):
        if self.kind == "literal":
            return ("literal", self.node.lineno, self.node.col_offset)
        return ("config", self.cls, self.field)

    def scaled(self, factor: int) -> "Root":
        return dataclasses.replace(self, mult=self.mult * factor)

    def named(self, name: str, config: bool = False) -> "Root":
        return dataclasses.replace(self, names=(name,) + self.names, via_config=self.via_config or config)


def find_root(ctx, expr: ast.AST, depth: int = 0) -> Optional[Root]:
    """The root of the size ``expr`` (see :class:`Root`), or None."""
    if expr is None or depth > _MAX_DEPTH:
        return None
    if isinstance(expr, ast.Constant):
        v = expr.value
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return Root("literal", 1, expr)
        return None
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mult):
        for const, other in ((expr.left, expr.right), (expr.right, expr.left)):
            if isinstance(const, ast.Constant) and isinstance(const.value, int) and not isinstance(const.value, bool) and const.value > 0:
                inner = find_root(ctx, other, depth + 1)
                return None if inner is None else inner.scaled(const.value)
        return None
    if isinstance(expr, ast.Call):  # int(x)
        if isinstance(expr.func, ast.Name) and expr.func.id == "int" and len(expr.args) == 1 and not expr.keywords:
            return find_root(ctx, expr.args[0], depth + 1)
        return None
    if isinstance(expr, ast.Name):
        return _name_root(ctx, expr, depth)
    if isinstance(expr, ast.Attribute):
        return _attribute_root(ctx, expr, depth)
    return None


def _name_root(ctx, name: ast.Name, depth: int) -> Optional[Root]:
    func = ctx.enclosing_function(name)
    while func is not None:
        assigned = ctx.bindings(func).get(name.id, ())
        param, default = parameter(func, name.id)
        if assigned:
            if param is not None or len(assigned) > 1:
                return None
            stmt = assigned[0]
            if not isinstance(stmt, (ast.Assign, ast.AnnAssign)) or stmt.value is None:
                return None
            inner = find_root(ctx, stmt.value, depth + 1)
            return None if inner is None else inner.named(name.id)
        if param is not None:
            if default is None:
                return None
            inner = find_root(ctx, default, depth + 1)
            return None if inner is None else inner.named(name.id)
        func = ctx.enclosing_function(func)
    assignments = ctx.module_assignments(name.id)
    if len(assignments) == 1 and isinstance(assignments[0], (ast.Assign, ast.AnnAssign)) and assignments[0].value is not None:
        inner = find_root(ctx, assignments[0].value, depth + 1)
        return None if inner is None else inner.named(name.id)
    return None


def _attribute_root(ctx, attr: ast.Attribute, depth: int) -> Optional[Root]:
    base = attr.value
    if isinstance(base, ast.Name) and base.id in ("self", "cls"):
        cls = ctx.enclosing_class(attr)
        if cls is None:
            return None
        for klass in (cls, *ctx.base_classes(cls)):
            values = []
            for stmt in klass.body:
                if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and attr.attr in bound_names(stmt) and stmt.value is not None:
                    values.append(stmt.value)
            init = ctx.method(klass, "__init__")
            if init is not None:
                values.extend(n.value for n in ctx.self_assignments(init).get(attr.attr, ()) if n.value is not None)
            if not values:
                continue
            if len(values) != 1:
                return None
            inner = find_root(ctx, values[0], depth + 1)
            return None if inner is None else inner.named(attr.attr)
        return None
    if is_config_expr(base):
        class_name = annotation_class(ctx, base, attr)
        local = ctx.get(LocalConfigs).by_name
        names = [class_name] if class_name in local else ([] if class_name else list(local))
        found = []
        for cname in names:
            entry = config_fields(ctx, local[cname]).get(attr.attr)
            if entry is not None:
                found.append(entry[1])
        if len(found) == 1:
            inner = find_root(ctx, found[0], depth + 1)
            return None if inner is None else inner.named(attr.attr, config=True)
        if found or any(declares_field(ctx, local[c], attr.attr) for c in names):
            return None  # ambiguous, or this file's config has the field without a default
        return Root("config", 1, None, attr.attr, class_name, (attr.attr,), True)
    return None


# --- arithmetic ----------------------------------------------------------------------


def next_multiple(value: int, step: int) -> int:
    return -(-value // step) * step


def lcm(*values: int) -> int:
    out = 1
    for v in values:
        out = out * v // math.gcd(out, v)
    return out


def as_size(value) -> Optional[int]:
    """A folded value as a positive integer size, or None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float):
        if not value.is_integer():
            return None
        value = int(value)
    return value if value > 0 else None


def data_named(names) -> bool:
    return any(part in n.lower() for n in names for part in DATA_NAME_PARTS)
