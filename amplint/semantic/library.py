"""Library files: modules of tensor functions that run inside their importers' models.

``torch_dct._dct`` (``dct``, ``idct``), ``kornia.geometry.transform.imgwarp``
(``warp_perspective``), ``espnet``'s ``beamformer`` (``get_mvdr_vector``) define no
``nn.Module`` and no training script: their public functions are the package's API, called
from a model's ``forward`` in another file, so under O1 they get what that forward
computes -- half activations.  :class:`LibraryFunctions` (``ctx.get(LibraryFunctions)``)
says which functions of such a file run there: the public module-level ones and the file's
functions they call.  A file with a module class (its ``forward`` is the root there, see
``FileContext.in_forward``) or a script (a ``__main__`` block, ``.backward()``, argparse)
is no library.  Never imports torch or the code it reads.
"""
from __future__ import annotations

import ast

_SCRIPT_CALLS = frozenset(("backward", "ArgumentParser", "zero_grad"))
_FUNCTION_BASES = ("torch.autograd.Function", "torch.autograd.function.Function")


class LibraryFunctions:
    """The functions of a library file that run in its importers' models (empty otherwise)."""

    def __init__(self, ctx):
        self._ids: set[int] = set()
        if not _is_library(ctx):
            return
        todo = [f for name, f in ctx.functions.items() if not name.startswith("_")]
        while todo:
            func = todo.pop()
            if id(func) in self._ids:
                continue
            self._ids.add(id(func))
            for node in ast.walk(func):
                if node.__class__ is ast.Call and node.func.__class__ is ast.Name:
                    callee = ctx.functions.get(node.func.id)
                    if callee is not None:
                        todo.append(callee)
                    else:  # an alias chosen at import: `if old: _rfft = _old_rfft else: ...`
                        todo += _aliased(ctx, node.func.id)

    def runs_in_callers(self, ctx, node: ast.AST) -> bool:
        """Whether ``node`` sits in one of those functions (or a function nested in one)."""
        return bool(self._ids) and any(id(anc) in self._ids for anc in ctx.ancestors(node))


def _is_library(ctx) -> bool:
    if not ctx.functions or not any(origin.split(".")[0] == "torch" for origin in ctx.imports.values()):
        return False
    if any(ctx.is_module_class(cls) and not _autograd_function(ctx, cls) for cls in ctx.classes.values()):
        return False
    for stmt in ctx.tree.body:
        if (isinstance(stmt, ast.If) and isinstance(stmt.test, ast.Compare)
                and isinstance(stmt.test.left, ast.Name) and stmt.test.left.id == "__name__"):
            return False  # if __name__ == "__main__": a script
    for call in ctx.calls:
        func = call.func
        name = func.attr if func.__class__ is ast.Attribute else getattr(func, "id", None)
        if name in _SCRIPT_CALLS:
            return False
    return True


def _autograd_function(ctx, cls: ast.ClassDef) -> bool:
    """A custom autograd Function (its ``forward`` is an op, not a model)."""
    return any((ctx.qualname(b) or "") in _FUNCTION_BASES for b in cls.bases)


def _aliased(ctx, name: str) -> list:
    """The file's functions a module-level alias ``name`` may be bound to."""
    out = []
    for value in ctx.module_level_values(name):
        for option in (value.body, value.orelse) if value.__class__ is ast.IfExp else (value,):
            if option.__class__ is ast.Name and option.id in ctx.functions:
                out.append(ctx.functions[option.id])
    return out
