"""Per-file facts about a file's classes and functions, each a named analysis of the
file context (``ctx.get(...)``), built on first use:

* :class:`ModuleClasses` -- which classes are (very likely) ``nn.Module`` subclasses;
* :class:`ForwardReachable` -- the functions a module's ``forward`` reaches in this file;
* :class:`LocalBindings` -- the statements binding each local name (and ``self.attr``)
  in each function's own body.

The context's accessors (``ctx.is_module_class``, ``ctx.in_forward``, ``ctx.bindings``,
``ctx.self_assignments``) ask these.
"""
from __future__ import annotations

import ast
from typing import Optional

from .bindings import bound_names, parent_of

#: base-class names that, when not resolvable, still mark a class as a torch module
_MODULE_BASE_SUFFIXES = ("Module", "PreTrainedModel", "ModuleList", "ModuleDict", "Sequential")
_MODULE_BASE_QUALNAMES = {
    "torch.nn.Module", "torch.nn.modules.module.Module", "torch.nn.Sequential",
    "torch.nn.ModuleList", "torch.nn.ModuleDict", "torch.jit.ScriptModule",
    "pytorch_lightning.LightningModule", "lightning.LightningModule", "lightning.pytorch.LightningModule",
}
_FORWARD_NAMES = ("forward", "__call__")
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


class ModuleClasses:
    """``ctx.get(ModuleClasses).names``: the names of the file's ``nn.Module`` classes --
    a torch module base (or one named like it that this file does not define), a base
    from elsewhere plus a ``forward``, or a module class of this file as a base."""

    def __init__(self, ctx):
        found: set[str] = set()
        classes = list(ctx.all_classes())
        for cls in classes:
            if _direct_module(ctx, cls):
                found.add(cls.name)
        changed = True
        while changed:  # classes deriving from a module class defined in this file
            changed = False
            for cls in classes:
                if cls.name not in found and any(isinstance(b, ast.Name) and b.id in found for b in cls.bases):
                    found.add(cls.name)
                    changed = True
        self.names: set[str] = found


def _direct_module(ctx, cls: ast.ClassDef) -> bool:
    for base in cls.bases:
        qn = ctx.qualname(base)
        if qn and (qn in _MODULE_BASE_QUALNAMES or qn.startswith("torch.nn.")):
            return True
        name = base.attr if isinstance(base, ast.Attribute) else base.id if isinstance(base, ast.Name) else ""
        if name.endswith(_MODULE_BASE_SUFFIXES) and name not in ctx.classes:
            return True
    # a base imported from elsewhere (a project's own BaseLayer) plus a forward method
    bases = [b for b in cls.bases if not (isinstance(b, ast.Name) and b.id in ("object", "ABC", "Protocol"))]
    return bool(bases) and ctx.method(cls, "forward") is not None


class ForwardReachable:
    """``ctx.get(ForwardReachable).functions``: ids of the functions a module's
    ``forward`` (or ``__call__``) calls in this file, transitively -- by name, as
    ``self.method``, through a local alias (``f = a if fast else b``) or passed on as a
    value (``partial(loss_fn, ...)``, ``checkpoint(block, x)``); the call graph is read
    off the Call nodes the engine's walk collected."""

    def __init__(self, ctx):
        methods_by_name: dict[str, list[ast.AST]] = {}
        roots: list[ast.AST] = []
        for cls in ctx.all_classes():
            module = ctx.is_module_class(cls)
            for stmt in cls.body:
                if isinstance(stmt, _FUNCTIONS):
                    methods_by_name.setdefault(stmt.name, []).append(stmt)
                    if module and stmt.name in _FORWARD_NAMES:
                        roots.append(stmt)
        # caller function -> callees
        callees: dict[int, list[ast.AST]] = {}
        functions = ctx.functions
        aliases = _function_aliases(ctx)
        stored: dict[str, tuple] = {}
        self_stores: Optional[dict] = None
        for call in ctx.calls:
            target = call.func
            if target.__class__ is ast.Name:
                found = functions.get(target.id)
                found = (found,) if found is not None else ()
                # called through a local alias: softmax = torch.softmax if fast else stable_softmax
                if not found and target.id in aliases:
                    found = _aliased_functions(ctx, call)
            elif target.__class__ is ast.Attribute and target.value.__class__ is ast.Name and target.value.id in ("self", "cls"):
                found = tuple(methods_by_name.get(target.attr, ()))
                if not found:  # self._contract = get_contract_fun(weight): a function stored on self
                    if self_stores is None:
                        self_stores = _self_stores_of_factory_calls(ctx)
                    if target.attr in self_stores:
                        if target.attr not in stored:
                            stored[target.attr] = _stored_functions(ctx, self_stores[target.attr])
                        found = stored[target.attr]
            else:
                found = ()
            # a function passed on as a value: partial(loss_fn, ...), checkpoint(block, x)
            found += tuple(functions[a.id] for a in call.args if a.__class__ is ast.Name and a.id in functions)
            if found:
                # nested functions belong to their method (or module-level function)
                caller = None
                for anc in ctx.ancestors(call):
                    if isinstance(anc, _FUNCTIONS):
                        caller = anc
                    elif anc.__class__ is ast.ClassDef:
                        break
                if caller is not None:
                    callees.setdefault(id(caller), []).extend(found)
        reachable: set[int] = set()
        todo = list(roots)
        while todo:
            func = todo.pop()
            if id(func) in reachable:
                continue
            reachable.add(id(func))
            todo.extend(callees.get(id(func), ()))
        self.functions: set[int] = reachable


def _self_stores_of_factory_calls(ctx) -> dict[str, list[ast.Assign]]:
    """``self.<attr> = f(...)`` with ``f`` a function of this file (one pass over the
    file's assignments): attr -> those statements."""
    functions = ctx.functions
    out: dict[str, list[ast.Assign]] = {}
    for node in ctx.binding_nodes:
        if node.__class__ is not ast.Assign:
            continue
        value = node.value
        options = (value.body, value.orelse) if value.__class__ is ast.IfExp else (value,)
        if not any(o.__class__ is ast.Call and o.func.__class__ is ast.Name and o.func.id in functions for o in options):
            continue
        for t in node.targets:
            if t.__class__ is ast.Attribute and t.value.__class__ is ast.Name and t.value.id == "self":
                out.setdefault(t.attr, []).append(node)
    return out


def _stored_functions(ctx, stores: list) -> tuple:
    """This file's functions a factory of this file returns, stored as ``self.<attr>``
    (``self._contract = get_contract_fun(weight)`` with ``return _contract_dense`` among
    its returns).  A function stored by name (``self.act = gelu``) is left out: its
    callers' tensors (a raw waveform, an activation) are not followed into it, so
    reaching it from ``forward`` would judge it without them."""
    functions = ctx.functions
    found: list = []
    for node in stores:
        value = node.value
        for option in ([value.body, value.orelse] if value.__class__ is ast.IfExp else [value]):
            if option.__class__ is ast.Call and option.func.__class__ is ast.Name and option.func.id in functions:
                found += _returned_functions(functions, functions[option.func.id])
    return tuple(dict.fromkeys(found))


def _returned_functions(functions: dict, factory: ast.AST) -> list:
    """The functions of this file a factory returns by name (its own ``return``s)."""
    out = []
    stack = list(factory.body)
    while stack:
        stmt = stack.pop()
        if stmt.__class__ is ast.Return:
            value = stmt.value
            if value.__class__ is ast.Name and value.id in functions:
                out.append(functions[value.id])
        elif not isinstance(stmt, (_FUNCTIONS, ast.ClassDef)):
            stack += [c for c in ast.iter_child_nodes(stmt) if isinstance(c, ast.stmt)]
    return out


def _function_aliases(ctx) -> set:
    """Names assigned a function of this file, or a choice of them (``f = a if c else b``)."""
    found = set()
    functions = ctx.functions
    for node in ctx.binding_nodes:
        if node.__class__ is ast.Assign:
            value = node.value
            options = (value.body, value.orelse) if value.__class__ is ast.IfExp else (value,)
            if any(o.__class__ is ast.Name and o.id in functions for o in options):
                found.update(t.id for t in node.targets if t.__class__ is ast.Name)
    return found


def _aliased_functions(ctx, call: ast.Call) -> tuple:
    """Functions of this file a call's name may be bound to in its function
    (``f = a if cond else b``, ``f = a``)."""
    from .dtypes import reaching_value

    if ctx.enclosing_function(call) is None:
        return ()
    value = reaching_value(ctx, call.func)
    # a module-level alias, possibly chosen at import (`if new_fft is None: _rfft = _old_rfft
    # else: _rfft = _new_rfft`): any of its module-level values
    values = [value] if value is not None else ctx.module_level_values(call.func.id)
    names = []
    for value in values:
        if value.__class__ is ast.IfExp:
            names += [v for v in (value.body, value.orelse) if v.__class__ is ast.Name]
        elif value.__class__ is ast.Name:
            names.append(value)
    functions = ctx.functions
    return tuple(functions[n.id] for n in names if n.id in functions)


class LocalBindings:
    """The binding statements of each function's (or lambda's) own body, not nested
    scopes, from the binding nodes the engine's walk collected: ``by_scope`` (id of the
    function -> local name -> statements) and ``self_attributes`` (id -> attribute ->
    the ``self.attr = ...`` statements)."""

    def __init__(self, ctx):
        by_scope: dict[int, dict[str, list[ast.AST]]] = {}
        self_attrs: dict[int, dict[str, list[ast.AST]]] = {}
        for node in ctx.binding_nodes:
            scope = _scope_of_binding(node)
            if scope is None:
                continue
            table = by_scope.setdefault(id(scope), {})
            for name in bound_names(node):
                table.setdefault(name, []).append(node)
            if node.__class__ is ast.Assign or node.__class__ is ast.AnnAssign:
                for t in node.targets if node.__class__ is ast.Assign else (node.target,):
                    if t.__class__ is ast.Attribute and t.value.__class__ is ast.Name and t.value.id == "self":
                        self_attrs.setdefault(id(scope), {}).setdefault(t.attr, []).append(node)
        self.by_scope = by_scope
        self.self_attributes = self_attrs


def _scope_of_binding(node: ast.AST):
    """The function or lambda whose own body binds at ``node`` (None: class or module level)."""
    node = parent_of(node)
    while node is not None:
        if isinstance(node, _SCOPES):
            return node
        if node.__class__ is ast.ClassDef:
            return None
        node = parent_of(node)
    return None
