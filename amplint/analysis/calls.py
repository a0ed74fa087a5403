"""Reading calls and import aliases: the small questions every rule asks.

* :func:`argument` / :func:`keyword` -- what a call passes for a parameter;
* :func:`torch_alias` / :func:`nn_alias` -- how this file spells ``torch`` and
  ``torch.nn`` (what a fix may write);
* :func:`module_level_names` -- names bound by unconditional top-level imports (what
  a line inserted after the imports may refer to).

Never imports torch.
"""
from __future__ import annotations

import ast
from typing import Optional


def keyword(call: ast.Call, name: str) -> Optional[ast.keyword]:
    """The ``name=...`` keyword of ``call`` (None: not passed by keyword)."""
    for kw in call.keywords:
        if kw.arg == name:
            return kw
    return None


def argument(call: ast.Call, name: str, position: Optional[int] = None) -> Optional[ast.AST]:
    """The expression passed for parameter ``name``: by keyword, or positionally at
    ``position`` (None or negative: keyword-only).  None when absent or hidden behind a
    ``*args`` before that position."""
    kw = keyword(call, name)
    if kw is not None:
        return kw.value
    if position is not None and 0 <= position < len(call.args) and not any(
        isinstance(a, ast.Starred) for a in call.args[: position + 1]
    ):
        return call.args[position]
    return None


def has_double_star(call: ast.Call) -> bool:
    """Whether ``call`` passes ``*args`` or ``**kwargs`` (its arguments are not all visible)."""
    return any(kw.arg is None for kw in call.keywords) or any(isinstance(a, ast.Starred) for a in call.args)


def module_level_names(ctx) -> set[str]:
    """Names bound by unconditional top-level imports: what a line inserted after the
    imports may refer to (not names from ``try:`` / ``if`` blocks, which may be ``None``
    or missing, e.g. ``except ImportError: oe = None``)."""
    names = set()
    for stmt in ctx.tree.body:
        if isinstance(stmt, ast.Import):
            names.update(a.asname or a.name.split(".")[0] for a in stmt.names)
        elif isinstance(stmt, ast.ImportFrom):
            names.update(a.asname or a.name for a in stmt.names)
    return names


def torch_alias(ctx, unconditional: bool = False) -> Optional[str]:
    """The local name the ``torch`` module is imported as (``import torch`` -> ``torch``),
    or None.  ``unconditional``: only a name from a top-level import outside any
    ``try``/``if`` (for code inserted right after the imports)."""
    allowed = module_level_names(ctx) if unconditional else None
    if ctx.imports.get("torch") == "torch" and (allowed is None or "torch" in allowed):
        return "torch"
    for local, full in ctx.imports.items():
        if full == "torch" and (allowed is None or local in allowed):
            return local
    return None


def nn_alias(ctx) -> Optional[str]:
    """How to spell ``torch.nn`` in this file: its alias, else ``<torch>.nn``."""
    for local, full in ctx.imports.items():
        if full == "torch.nn":
            return local
    t = torch_alias(ctx)
    return f"{t}.nn" if t else None


def amp_alias(ctx) -> tuple[str, str]:
    """How to call the ``amplint.amp`` engine in this file, and the import line to add
    for it ("" when the file already imports it, or apex's ``amp``, at module level)."""
    names = module_level_names(ctx)
    for local, target in ctx.imports.items():
        if target in ("amplint.amp", "apex.amp") and local in names:
            return local, ""
    taken = set(ctx.imports) | set(ctx.classes) | set(ctx.functions)
    if "amp" not in taken and not ctx.module_assignments("amp"):
        return "amp", "from amplint import amp\n"
    return "amplint_amp", "from amplint import amp as amplint_amp\n"
