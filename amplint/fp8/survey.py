"""One file's facts for the AMP7xx (fp8) rules, built once per file (``ctx.get(Fp8Survey)``):
its ``nn.Linear`` layers with their sizes, the parameters its forward uses through
``F.linear`` / ``matmul`` / ``@`` (which module swapping never converts), and which
layers are output heads or input projections.

Sizes come from the semantic core (``ctx.get(LayerSizes).of(call)``, the values AMP201
follows: literals, constants, config defaults, call sites, ``**kwargs`` dicts, width
lists): :func:`_sizes` is the one place this module asks it, so a better resolver
changes every AMP7xx rule at once.  Never imports torch.
"""
from __future__ import annotations

import ast
import dataclasses
from typing import Optional

from ..analysis.calls import argument
from ..analysis.dims import as_size, layer_name
from ..semantic.layers import torch_layer
from ..semantic.facts import LayerParameters
from ..semantic.sizes import LayerSizes, SizeValues

#: attribute names of an output projection (the logits): torchao's example filters
#: ``fqn == "output"`` (torchtitan's Llama), Hugging Face and nanoGPT say ``lm_head``
HEAD_NAMES = frozenset({"lm_head", "output", "head", "classifier", "decoder", "score", "logits", "output_layer",
                        "output_projection", "out_head", "generator"})
#: a Linear reading the model's raw input: a patch / feature embedding
FIRST_PARTS = ("embed", "input_proj", "in_proj", "proj_in", "stem", "patch")
_GEMM_CALLS = {"torch.nn.functional.linear": (1,), "torch.matmul": (0, 1), "torch.mm": (0, 1), "torch.bmm": (0, 1),
               "torch.addmm": (1, 2), "torch.einsum": None}
_PARAMETER = ("torch.nn.Parameter", "torch.nn.parameter.Parameter")
#: calls whose first argument is not the tensor they return a view of
_NOT_VIEWS = frozenset({"len", "getattr", "isinstance", "print", "range", "zip", "dict", "list", "tuple"})


@dataclasses.dataclass
class LinearSite:
    """One ``nn.Linear(...)`` call."""

    call: ast.Call
    #: the attribute or name it is bound to (``self.lm_head = nn.Linear(...)`` -> lm_head)
    name: Optional[str]
    in_features: Optional[int]
    out_features: Optional[int]
    in_expr: Optional[ast.AST]
    out_expr: Optional[ast.AST]
    #: "head" / "first" / None
    role: Optional[str] = None
    role_reason: str = ""
    #: every value each size takes (the call sites, options and configs that reach it);
    #: ``in_features`` / ``out_features`` are set when there is exactly one
    in_sizes: tuple[int, ...] = ()
    out_sizes: tuple[int, ...] = ()


@dataclasses.dataclass
class Bypass:
    """A GEMM in forward on a parameter of the module itself (not an nn.Linear's)."""

    node: ast.AST  # the call or the ``@``
    how: str  # "F.linear" / "torch.matmul" / "@" ...
    operand: str  # "self.w" / "self.wte.weight"
    #: the ``nn.Parameter(...)`` that creates it in this file, when found
    parameter: Optional[ast.Call]
    #: F.linear(x, self.w) on the module's own 2-D parameter: an nn.Linear can replace it
    plain_linear: bool
    #: the operand is a submodule's weight (``self.wte.weight``): a tied head
    submodule_weight: bool
    #: ``self.weight`` of an ``nn.Linear`` subclass whose forward calls ``F.linear`` itself
    #: (LoRA layers): a swap to an fp8 Linear either skips it or drops that forward
    inherited: bool = False


def _sizes(values) -> tuple[int, ...]:
    """The distinct positive integer sizes among a layer argument's values."""
    return tuple(sorted({s for s in (as_size(v.value) for v in values) if s is not None and s > 0}))


def _bound_name(ctx, call: ast.Call) -> Optional[str]:
    value, stmt = call, ctx.parent(call)
    while isinstance(stmt, ast.IfExp):  # self.head = nn.Linear(d, n) if n > 0 else nn.Identity()
        value, stmt = stmt, ctx.parent(stmt)
    if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is value:
        target = stmt.targets[0] if isinstance(stmt, ast.Assign) else stmt.target
        if isinstance(target, ast.Attribute):
            return target.attr
        if isinstance(target, ast.Name):
            return target.id
    if isinstance(stmt, ast.keyword):
        return stmt.arg
    return None


def _self_operand(expr: ast.AST) -> Optional[str]:
    """``self.w`` / ``self.w.t()`` / ``self.w.T`` / ``self.emb.weight`` -> its dotted text."""
    while True:
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in (
                "t", "transpose", "to", "type_as", "half", "float", "bfloat16", "contiguous", "permute"):
            expr = expr.func.value
        elif isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.args and expr.func.id not in _NOT_VIEWS:
            expr = expr.args[0]  # a helper that transposes the weight: transpose(self.weight, fan_in_fan_out), T(w)
        elif isinstance(expr, ast.Attribute) and expr.attr in ("T", "mT"):
            expr = expr.value
        else:
            break
    parts = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if isinstance(expr, ast.Name) and expr.id == "self" and parts:
        return "self." + ".".join(reversed(parts))
    return None


class Fp8Survey:
    def __init__(self, ctx):
        self.linears: list[LinearSite] = []
        self.bypasses: list[Bypass] = []
        #: (class name, attribute) -> nn.Parameter call with a 2-D shape or unknown shape
        self.parameters: dict[tuple[Optional[str], str], ast.Call] = {}
        #: attributes whose weight is tied to an embedding: ``self.lm_head.weight = self.wte.weight``
        self.tied: dict[str, str] = {}
        self._build(ctx)

    def _build(self, ctx) -> None:
        for node in ctx.calls:
            if layer_name(node) == "Linear" and torch_layer(ctx, node) == "Linear":
                in_expr, out_expr = argument(node, "in_features", 0), argument(node, "out_features", 1)
                found = ctx.get(LayerSizes).of(node)
                ins, outs = _sizes(found.get("in_features", ())), _sizes(found.get("out_features", ()))
                self.linears.append(LinearSite(node, _bound_name(ctx, node), ins[0] if len(ins) == 1 else None,
                                               outs[0] if len(outs) == 1 else None, in_expr, out_expr,
                                               in_sizes=ins, out_sizes=outs))
            elif node.func.__class__ is ast.Name and node.func.id in ctx.get(LayerParameters).by_name:
                self._wrapper_site(ctx, node)
            elif ctx.qualname(node.func) in _PARAMETER:
                stmt = ctx.parent(node)
                if isinstance(stmt, ast.Assign) and stmt.value is node and isinstance(stmt.targets[0], ast.Attribute):
                    cls = ctx.enclosing_class(node)
                    self.parameters[(cls.name if cls else None, stmt.targets[0].attr)] = node
        for node in ctx.nodes("Assign"):
            # self.lm_head.weight = self.wte.weight (or the other way round): a tied head
            if len(node.targets) == 1:
                left, right = _self_operand(node.targets[0]), _self_operand(node.value)
                if left and right and left.endswith(".weight") and right.endswith(".weight"):
                    a, b = left.split(".")[1], right.split(".")[1]
                    self.tied[a] = b
                    self.tied[b] = a
        self._roles()
        self._bypasses(ctx)

    def _wrapper_site(self, ctx, call: ast.Call) -> None:
        """A call of this file's class that wraps one ``nn.Linear`` with its own in and out
        sizes (litgpt's ``LoRALinear(config.n_embd, config.padded_vocab_size)``): a Linear
        site too, named where it is bound (``self.lm_head``), sized by the call's arguments."""
        entries = [e for e in ctx.get(LayerParameters).by_name[call.func.id] if e[4] == "nn.Linear" and e[2] == 1]
        layers = {id(e[3]) for e in entries}
        if len(layers) != 1:
            return
        exprs = {}
        for position, pname, _, _, _, arg, _ in entries:
            expr = next((kw.value for kw in call.keywords if kw.arg == pname), None)
            if expr is None and position is not None and position < len(call.args):
                if any(a.__class__ is ast.Starred for a in call.args[: position + 1]):
                    return
                expr = call.args[position]
            exprs[arg] = expr
        if set(exprs) != {"in_features", "out_features"}:
            return
        values = ctx.get(SizeValues)
        ins, outs = (_sizes(values.values(exprs[a])) if exprs[a] is not None else () for a in ("in_features", "out_features"))
        self.linears.append(LinearSite(call, _bound_name(ctx, call), ins[0] if len(ins) == 1 else None,
                                       outs[0] if len(outs) == 1 else None, exprs["in_features"], exprs["out_features"],
                                       in_sizes=ins, out_sizes=outs))

    def _roles(self) -> None:
        for site in self.linears:
            name = (site.name or "").lower()
            if name in self.tied:
                site.role, site.role_reason = "head", f"the output head (its weight is tied to `{self.tied[name]}`)"
            elif name in HEAD_NAMES:
                site.role, site.role_reason = "head", "the output projection (the logits)"
            elif any(part in name for part in FIRST_PARTS):
                site.role, site.role_reason = "first", "the first projection (it reads the model's raw input)"

    def _bypasses(self, ctx) -> None:
        candidates: list[tuple[ast.AST, str, list[ast.AST]]] = []
        for node in ctx.calls:
            qn = ctx.qualname(node.func) or ""
            if qn in _GEMM_CALLS:
                idx = _GEMM_CALLS[qn]
                args = node.args[1:] if idx is None else [node.args[i] for i in idx if i < len(node.args)]
                if qn == "torch.nn.functional.linear" and len(node.args) < 2:
                    w = argument(node, "weight", 1)
                    args = [w] if w is not None else []
                short = {"torch.nn.functional.linear": "F.linear"}.get(qn, qn)
                candidates.append((node, short, args))
            elif isinstance(node.func, ast.Attribute) and node.func.attr in ("matmul", "mm") and node.args:
                candidates.append((node, f".{node.func.attr}()", [node.func.value, node.args[0]]))
        for node in ctx.nodes("BinOp"):
            if isinstance(node.op, ast.MatMult):
                candidates.append((node, "@", [node.left, node.right]))
        for node, how, operands in candidates:
            if not ctx.in_forward(node):
                continue
            texts = [_self_operand(o) for o in operands]
            if len(operands) > 1 and all(texts):
                continue  # weight times weight (lora_B.weight @ lora_A.weight): a merge, no activation
            cls = ctx.enclosing_class(node)
            for operand, text in zip(operands, texts):
                if text is None:
                    continue
                parts = text.split(".")[1:]
                param = self.parameters.get((cls.name if cls else None, parts[0])) if len(parts) == 1 else None
                submodule = len(parts) == 2 and parts[1] == "weight"
                inherited = param is None and parts == ["weight"] and how == "F.linear" and _linear_subclass(ctx, cls)
                if param is None and not submodule and not inherited:
                    continue  # a buffer, a tensor attribute, a cached mask: not a trained weight we know of
                plain = how == "F.linear" and param is not None and operand is (node.args[1] if len(node.args) > 1 else operand)
                self.bypasses.append(Bypass(node, how, text, param, plain, submodule, inherited))
                break


def _linear_subclass(ctx, cls: Optional[ast.ClassDef]) -> bool:
    """Whether ``cls`` subclasses ``nn.Linear`` (its ``self.weight`` is the Linear's)."""
    return cls is not None and any(ctx.qualname(b) == "torch.nn.Linear" for b in cls.bases)


def site_label(site: LinearSite) -> str:
    """How a message names the layer: ``self.lm_head`` (nn.Linear(768, 50257))."""
    sizes = f"nn.Linear({site.in_features if site.in_features is not None else '?'}, " \
            f"{site.out_features if site.out_features is not None else '?'})"
    return f"`{site.name}` ({sizes})" if site.name else f"`{sizes}`"


def linear_flops_share(survey: "Fp8Survey", site: LinearSite) -> Optional[float]:
    """This layer's K x N over the sum of K x N of the file's Linear layers whose sizes are
    known (each written layer once: a share per token of one forward)."""
    sized = [s for s in survey.linears if s.in_features and s.out_features]
    total = sum(s.in_features * s.out_features for s in sized)
    if not total or site not in sized:
        return None
    return site.in_features * site.out_features / total
