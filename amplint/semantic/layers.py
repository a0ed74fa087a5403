"""Which calls build a torch layer: ``torch_layer(ctx, call)`` -> the layer class name
(``"Linear"``, ``"LSTM"``) or None.

One answer for every size analysis (AMP201's survey, :class:`~amplint.semantic.sizes.
LayerSizes`, the fp8 survey): ``nn.Linear(...)`` / ``torch.nn.Conv2d(...)`` by their
qualified name, and a layer class bound to a name first (:class:`LayerAliases`), as
espnet writes ``RNN = torch.nn.LSTM if "lstm" in typ else torch.nn.GRU; rnn = RNN(idim,
cdim)``, and library builders with a torch layer's size arguments (mmcv's ``ConvModule``).
Never imports torch.
"""
from __future__ import annotations

import ast
import re
from typing import Optional

from ..analysis.dims import LAYERS, is_torch_layer, layer_name

#: a line that may bind a layer class to a name (the file is searched for aliases only then)
_ALIAS_LINE = re.compile(r"^\s*\w+\s*=\s*\(?\s*[\w.]*\.(?:" + "|".join(LAYERS) + r")\s*(?:\)|if\b|$)", re.M)
#: its tail alone, searched first: far cheaper than trying every line start, and most
#: files have none (``isinstance(m, nn.Linear)`` matches it, not the alias line)
_ALIAS_TAIL = re.compile(r"\.(?:" + "|".join(LAYERS) + r")\s*(?:\)|if\b|$)", re.M)


class LayerAliases:
    """``RNN = torch.nn.LSTM if c else torch.nn.GRU`` / ``Conv = nn.Conv2d``: (enclosing
    function, name) -> the layer class name (the first branch's; the branches must take
    the same size arguments).  A name bound more than once in its scope is left out."""

    def __init__(self, ctx):
        self.by_name: dict[tuple[Optional[int], str], Optional[str]] = {}
        if _ALIAS_TAIL.search(ctx.source) is None or _ALIAS_LINE.search(ctx.source) is None:
            return
        for stmt in ctx.nodes("Assign"):
            if len(stmt.targets) != 1 or stmt.targets[0].__class__ is not ast.Name:
                continue
            value = stmt.value
            if value.__class__ not in (ast.Attribute, ast.IfExp):
                continue
            func = ctx.enclosing_function(stmt)
            key = (id(func) if func is not None else None, stmt.targets[0].id)
            name = _layer_class(ctx, value)
            self.by_name[key] = None if key in self.by_name else name

    def of(self, ctx, call: ast.Call) -> Optional[str]:
        func = ctx.enclosing_function(call)
        while True:
            key = (id(func) if func is not None else None, call.func.id)
            if key in self.by_name:
                return self.by_name[key]
            if func is None:
                return None
            func = ctx.enclosing_function(func)


def _layer_class(ctx, value: ast.AST) -> Optional[str]:
    leaves = [value.body, value.orelse] if value.__class__ is ast.IfExp else [value]
    names = []
    for leaf in leaves:
        if leaf.__class__ is not ast.Attribute or leaf.attr not in LAYERS or ctx.qualname(leaf) != f"torch.nn.{leaf.attr}":
            return None
        names.append(leaf.attr)
    first = LAYERS[names[0]][0]
    if any([d.keyword for d in LAYERS[n][0][:2]] != [d.keyword for d in first[:2]] for n in names):
        return None
    return names[0]


#: layer builders of libraries that take the torch layer's size arguments in the same
#: places: qualified name -> the torch layer whose sizes they are
LIBRARY_LAYERS = {
    "mmcv.cnn.ConvModule": "Conv2d",  # ConvModule(in_channels, out_channels, kernel_size, ..., groups=)
    "mmcv.cnn.bricks.ConvModule": "Conv2d",
    "mmcv.cnn.bricks.conv_module.ConvModule": "Conv2d",
}
_LIBRARY_NAMES = frozenset(q.rsplit(".", 1)[1] for q in LIBRARY_LAYERS)


def torch_layer(ctx, call: ast.Call) -> Optional[str]:
    """The torch layer class ``call`` builds, or None."""
    name = layer_name(call)
    if name is not None and is_torch_layer(ctx, call, name):
        return name
    func = call.func
    last = func.attr if func.__class__ is ast.Attribute else func.id if func.__class__ is ast.Name else None
    if last in _LIBRARY_NAMES:
        found = LIBRARY_LAYERS.get(ctx.qualname(func) or "")
        if found is not None:
            return found
    if call.func.__class__ is ast.Name:
        aliases = ctx.get(LayerAliases)
        if aliases.by_name:
            return aliases.of(ctx, call)
    return None
