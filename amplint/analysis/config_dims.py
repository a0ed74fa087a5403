"""Layer sizes across files: a config field defined in one file and used as a layer
size in another (``configuration_x.py``: ``hidden_size: int = 770``;
``modeling_x.py``: ``nn.Linear(config.hidden_size, ...)``).

Two halves, run in the engine's two phases (see :mod:`amplint.project`):

* :func:`layer_size_uses` -- in the summary pass, for the file that *uses* the
  fields: which config fields it passes to which layers, and how it splits them into
  heads (``config.hidden_size // config.num_heads``);
* :func:`unaligned_definitions` -- when the defining file is linted: which of its
  config defaults those uses make unaligned layer sizes.

Used by AMP201 (unaligned-dimension).  Never imports torch.
"""
from __future__ import annotations

import ast
import dataclasses
import math
import os
import re
from typing import Optional

from ..semantic.configs import LocalConfigs, config_fields
from ..semantic.sizes import SizeValues
from .calls import argument
from .dims import (
    CHECKPOINT_MARKERS,
    LAYER_MARKERS,
    LAYERS,
    MIN_SIZE,
    SMALL_HEAD,
    VOCAB_NAME_PARTS,
    Root,
    as_size,
    data_named,
    find_root,
    is_torch_layer,
    layer_name,
)


def layer_size_uses(ctx) -> Optional[dict]:
    """Config fields this file uses as layer sizes (and head splits of them), for the
    file that defines the config: ``{"uses": [...], "divisors": [...]}``, or None."""
    source = ctx.source
    if not any(m in source for m in LAYER_MARKERS):
        return None
    checkpoint = any(m in source for m in CHECKPOINT_MARKERS)
    uses, divisors, splits = [], [], []
    for node in ctx.nodes("Call") + ctx.nodes("BinOp"):  # collected by the engine's walk
        if isinstance(node, ast.Call):
            name = layer_name(node)
            if name is None or not is_torch_layer(ctx, node, name):
                continue
            dims, heads, _ = LAYERS[name]
            for dim in dims:
                expr = argument(node, dim.keyword, dim.index)
                if not isinstance(expr, (ast.Attribute, ast.Name, ast.BinOp)):
                    continue
                root = find_root(ctx, expr)
                if root is not None and root.kind == "config":
                    uses.append({
                        "field": root.field, "cls": root.cls, "mult": root.mult, "names": list(root.names),
                        "line": node.lineno, "column": ctx.char_col(node.lineno, node.col_offset) + 1,
                        "layer": f"nn.{name}", "arg": dim.keyword, "role": dim.role, "checkpoint": checkpoint,
                    })
            if heads is not None:
                first, h = argument(node, dims[0].keyword, dims[0].index), argument(node, heads[1], heads[0])
                if first is not None and h is not None:
                    splits.append((first, h))
        elif (
            isinstance(node, ast.BinOp) and isinstance(node.op, (ast.FloorDiv, ast.Mod))
            and isinstance(node.left, (ast.Attribute, ast.Name))
        ):
            splits.append((node.left, node.right))
    if not uses:
        return None
    for left, right in splits:
        divisors.extend(_divisor_fact(ctx, left, right))
    return {"uses": uses, "divisors": divisors}


def _divisor_fact(ctx, left, right) -> list:
    root = find_root(ctx, left)
    if root is None or root.kind != "config":
        return []
    fact = {"field": root.field, "cls": root.cls, "mult": root.mult}
    divisor = find_root(ctx, right)
    if divisor is not None and divisor.kind == "config" and divisor.mult == 1:
        return [{**fact, "div_field": divisor.field}]
    value = ctx.evaluate(right)
    size = as_size(value.value) if value is not None else None
    return [{**fact, "value": size}] if size else []


@dataclasses.dataclass
class UnalignedDefinition:
    """A config default of this file that other files use as unaligned layer sizes."""

    cls: str
    field: str
    #: the default's expression and the literal it comes from (what a fix pads)
    default: ast.AST
    root: Root
    base: int
    #: (path, use fact, size) for each unaligned use
    uses: list[tuple[str, dict, int]]
    #: head counts the other files split the field by (the padded size must keep them)
    divisors: set[int]


def _literal_root(ctx, default) -> bool:
    root = find_root(ctx, default)
    return root is not None and root.kind == "literal"


def _resolves_here(ctx, path: str, use: dict) -> bool:
    """Whether the use in ``path`` reads this file's definition: this file is the only
    one defining that field (of that class), or the use sits in this file's folder."""
    definers = {d.path for d in ctx.project.config_defaults(use["field"], use["cls"])}
    if definers <= {ctx.path}:
        return True
    return os.path.dirname(os.path.abspath(path)) == os.path.dirname(os.path.abspath(ctx.path))


def unaligned_definitions(ctx, code: str, alignment: int, floor: int, fixed_keys: set) -> list[UnalignedDefinition]:
    """This file's config defaults that layer uses in other files (the project facts of
    rule ``code``) make sizes not a multiple of ``alignment``.  Roots in ``fixed_keys``
    (already fixed at a use in this file) are skipped; those found are added to it."""
    local = ctx.get(LocalConfigs).by_name
    if not local or ctx.project is None:
        return []
    if not any(_literal_root(ctx, default) for c in local.values() for _, default in config_fields(ctx, c).values()):
        # nothing here a use elsewhere could make unaligned; not asking the index keeps
        # the engine from linting this file a second time (ModelOutput dataclasses)
        return []
    by_field: dict = {}  # (class, field) -> [(path, use)]
    divisor_facts = []
    for path, data in ctx.project.facts(code):
        if path == ctx.path:
            continue
        divisor_facts.extend(data.get("divisors", ()))
        for use in data.get("uses", ()):
            owners = [use["cls"]] if use["cls"] else [n for n, c in local.items() if use["field"] in config_fields(ctx, c)]
            if len(owners) == 1 and owners[0] in local and _resolves_here(ctx, path, use):
                by_field.setdefault((owners[0], use["field"]), []).append((path, use))
    found = []
    for (cname, field), uses in by_field.items():
        entry = config_fields(ctx, local[cname]).get(field)
        if entry is None:
            continue
        default = entry[1]
        root = find_root(ctx, default)
        value = ctx.evaluate(default)
        if root is None or root.kind != "literal" or value is None or as_size(value.value) != root.mult * root.node.value:
            continue
        if root.key in fixed_keys:
            continue
        base = root.mult * root.node.value
        bad = []
        for path, use in uses:
            size = base * use["mult"]
            if size % alignment == 0 or size < max(floor, MIN_SIZE) or data_named(use["names"] + [field]):
                continue
            if use.get("role") == "vocab" and not any(
                part in n.lower() for n in use["names"] + [field] for part in VOCAB_NAME_PARTS
            ):
                continue
            if use.get("role") == "out" and size < SMALL_HEAD:
                continue
            if use["checkpoint"]:
                bad = []  # the use site reports it as checkpoint-bound
                break
            bad.append((path, use, size))
        if not bad:
            continue
        extra = set()
        for fact in divisor_facts:
            if fact["field"] != field or fact["cls"] not in (None, cname):
                continue
            d = fact.get("value")
            if d is None and fact.get("div_field"):
                dv = ctx.evaluator.config_default(fact["div_field"], cname)
                d = as_size(dv.value) if dv is not None else None
            if d and d > 1 and (base * fact["mult"]) % d == 0:
                extra.add(d // math.gcd(d, fact["mult"]))
        fixed_keys.add(root.key)
        found.append(UnalignedDefinition(cname, field, default, root, base, bad, extra))
    return found


#: config fields that are layer sizes by name (a lone config's defaults are judged by them)
SIZE_FIELD = re.compile(
    r"^(?:vocab_size|n_vocab|num_tokens|hidden_size|hidden_dim|d_model|n_embd|n_embed|embed_dim|emb_dim|"
    r"embedding_dim|embedding_size|intermediate_size|d_ff|ffn_dim|ffn_hidden_size|dim_feedforward|d_inner|n_inner|"
    r"dim|model_dim|width|d_hidden|encoder_embed_dim|decoder_embed_dim|encoder_ffn_embed_dim|decoder_ffn_embed_dim)$"
)


def lone_size_defaults(ctx, code: str, alignment: int, floor: int, fixed_keys: set) -> list[UnalignedDefinition]:
    """This file's config-class defaults named like layer sizes (``vocab_size=30522``),
    written as a literal, not a multiple of ``alignment``, that no layer reads in this
    file or (by the facts of rule ``code``) in another linted file -- the config is
    linted without its model -- and that not every site building the class overrides
    with an aligned value.  Their roots are added to ``fixed_keys``."""
    local = list(ctx.get(LocalConfigs).by_name.values())
    candidates = []
    for cls in local:
        for field, (node, default) in config_fields(ctx, cls).items():
            if SIZE_FIELD.match(field) is None:
                continue
            root = find_root(ctx, default)
            if root is None or root.kind != "literal" or root.mult != 1 or root.key in fixed_keys:
                continue
            base = root.node.value
            if base % alignment and base >= max(floor, MIN_SIZE):
                candidates.append(UnalignedDefinition(cls.name, field, default, root, base, [], set()))
    if not candidates:
        return []
    # a field read in this file outside its class: the model is here, its layers decide
    used = {n.attr for n in ctx.nodes("Attribute")
            if n.ctx.__class__ is ast.Load and not (n.value.__class__ is ast.Name and n.value.id == "self")}
    if ctx.project is not None:
        for path, data in ctx.project.facts(code):
            if path != ctx.path:
                used.update(u["field"] for u in data.get("uses", ()) if u["cls"] in (None, *(c.name for c in local))
                            and _resolves_here(ctx, path, u))
    found = []
    for d in candidates:
        if d.field in used or d.field in _post_init_reads(ctx.get(LocalConfigs).by_name[d.cls]):
            continue
        passed = ctx.get(SizeValues).construction_values(d.cls, d.field)
        if passed and all(as_size(v.value) and as_size(v.value) % alignment == 0 for v in passed):
            continue
        fixed_keys.add(d.root.key)
        found.append(d)
    return found


def _post_init_reads(cls: ast.ClassDef) -> set[str]:
    """Fields a dataclass's ``__post_init__`` derives other values from (litgpt:
    ``self.padded_vocab_size = find_multiple(self.vocab_size, 512)``): the layer size is
    the derived value, not the default."""
    out = set()
    for stmt in cls.body:
        if stmt.__class__ is ast.FunctionDef and stmt.name == "__post_init__":
            for n in ast.walk(stmt):
                if (n.__class__ is ast.Attribute and n.ctx.__class__ is ast.Load
                        and n.value.__class__ is ast.Name and n.value.id == "self"):
                    out.add(n.attr)
    return out
