"""The shared analysis context every rule receives for one file.

Built once per file by the engine from one ``ast`` parse and one walk:

* parent links (``ctx.parent(node)``) and enclosing class / function lookups;
* torch import aliases resolved (``ctx.qualname(expr)``: ``F.softmax`` ->
  ``torch.nn.functional.softmax``; ``einsum`` -> ``torch.einsum``);
* which classes are ``nn.Module`` subclasses and which code runs in ``forward``
  (``ctx.in_forward(node)``: inside a module's ``forward`` or a function / method that
  ``forward`` calls in the same file, transitively);
* a constant evaluator (``ctx.evaluate(expr)``, see :mod:`amplint.evaluate`) that follows
  names to module constants, default arguments, ``self.attr`` set in ``__init__`` and
  config-class field defaults, in this file or (through the project index) another.

Every per-file fact beyond these is a named analysis built once on first use through
``ctx.get(Analysis)`` (the evaluator, the dtype flows, precision facts, magnitude bounds,
``semantic.library.LibraryFunctions``...); the accessors below only ask it.
"""
from __future__ import annotations

import ast
import dataclasses
import re
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Optional, Sequence

from .bindings import BINDING_NAMES as _BINDING_NAMES
from .bindings import bound_names, parent_of
from .config import FileSettings
from .dtypes import DtypeClass, DtypeFlow, ExplicitDtypeFlow, Precision, PrecisionFacts, dtype_branch
from .rule import Edit, Finding, Fix, Position, Related, Rule, Severity

if TYPE_CHECKING:
    from .config import Settings
    from .numerics import Format
    from .evaluate import Value
    from .project import ProjectIndex

_NEWLINE_RE = re.compile(r"\r\n|\r|\n")
FunctionNode = (ast.FunctionDef, ast.AsyncFunctionDef)
ScopeNode = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)

#: base-class names that, when not resolvable, still mark a class as a torch module
_MODULE_BASE_SUFFIXES = ("Module", "PreTrainedModel", "ModuleList", "ModuleDict", "Sequential")
_MODULE_BASE_QUALNAMES = {
    "torch.nn.Module", "torch.nn.modules.module.Module", "torch.nn.Sequential",
    "torch.nn.ModuleList", "torch.nn.ModuleDict", "torch.jit.ScriptModule",
    "pytorch_lightning.LightningModule", "lightning.LightningModule", "lightning.pytorch.LightningModule",
}
_FORWARD_NAMES = ("forward", "__call__")


#: fields that hold shared singletons (Load/Store contexts, operators): never walked
_SKIPPED_FIELDS = frozenset(("ctx", "op", "ops"))
_CHILD_FIELDS: dict[type, tuple[str, ...]] = {}
#: node types every walk collects, whatever the rules ask for (call graph, rule summaries)
_ALWAYS_BUCKETED = frozenset(("Call", "BinOp"))


def _child_fields(cls: type) -> tuple[str, ...]:
    return tuple(reversed([f for f in cls._fields if f not in _SKIPPED_FIELDS]))


class FileContext:
    """Everything a rule may ask about one file.  Cheap attributes are computed by the
    engine's single walk; the rest lazily, on first use, once per file."""

    def __init__(
        self,
        path: str,
        source: str,
        tree: ast.Module,
        settings: "Settings",
        project: Optional["ProjectIndex"] = None,
    ):
        if not isinstance(settings, FileSettings):  # the user's settings (tests, tools): resolve them for this file
            from .engine_detect import resolve

            settings = resolve(settings, path, source, tree, project)
        self.path = path
        self.source = source
        self.tree = tree
        self.settings = settings
        self.project = project
        self.newline = "\r\n" if "\r\n" in source[:10000] else "\n"
        self.findings: list[Finding] = []
        #: each rule's per-file state, as its ``begin_file`` returned it
        self._rule_states: dict[type, Any] = {}
        self._lines: Optional[list[str]] = None
        self._ascii = source.isascii()
        self._imports: dict[str, str] = {}
        #: local name -> "module.name" of relative imports (leading dots dropped)
        self._relative_imports: dict[str, str] = {}
        self._import_nodes: list[ast.AST] = []
        self._calls: list[ast.Call] = []
        self._buckets: dict[str, list[ast.AST]] = {}
        self._binding_nodes: list[ast.AST] = []
        self._bindings_by_scope: Optional[dict[int, dict[str, list[ast.AST]]]] = None
        self._self_attrs_by_scope: Optional[dict[int, dict[str, list[ast.AST]]]] = None
        self._classes: dict[str, ast.ClassDef] = {}
        self._functions: dict[str, ast.AST] = {}
        self._module_assignments: dict[str, list[ast.AST]] = {}
        self._module_classes: Optional[set[str]] = None
        self._forward_reachable: Optional[set[int]] = None
        self._walked = False
        #: the named analyses built so far (see :meth:`get`)
        self._analyses: dict[type, Any] = {}
        self._index_module_level()

    @property
    def format(self) -> "Format":
        """The target's format (limits, alignment, names): read it rather than ``settings.target``."""
        return self.settings.format

    def get(self, analysis: type):
        """The analysis ``analysis`` of this file, built on first use (``analysis(self)``)
        and shared by every rule after that: the one memo for per-file facts."""
        found = self._analyses.get(analysis)
        if found is None:
            found = self._analyses[analysis] = analysis(self)
        return found

    # --- walking ---------------------------------------------------------------------

    def walk_and_bucket(self, wanted: set[str]) -> dict[str, list[ast.AST]]:
        """One pass over the tree: set parent links, collect imports, and bucket the
        nodes whose class name is in ``wanted`` (pre-order: parents before children,
        siblings in field order -- source order except decorators)."""
        buckets: dict[str, list[ast.AST]] = {name: [] for name in set(wanted) | _ALWAYS_BUCKETED}
        self._buckets = buckets
        self._walked = True
        imports, bindings = self._import_nodes, self._binding_nodes
        stack: list[ast.AST] = [self.tree]
        pop, push = stack.pop, stack.append
        fields_of = _CHILD_FIELDS
        AST = ast.AST
        #: node class -> (child fields, its bucket or None, binding / import list or None):
        #: decided once per class, not by name for every node
        plans: dict[type, tuple] = {}
        while stack:
            node = pop()
            cls = node.__class__
            plan = plans.get(cls)
            if plan is None:
                fields = fields_of.get(cls)
                if fields is None:
                    fields = fields_of[cls] = _child_fields(cls)
                name = cls.__name__
                also = bindings if name in _BINDING_NAMES else imports if name in ("Import", "ImportFrom") else None
                plan = plans[cls] = (fields, buckets.get(name), also)
            fields, bucket, also = plan
            # children pushed last-first so that nodes come off the stack in source order
            for field in fields:
                value = getattr(node, field, None)
                if value.__class__ is list:
                    for child in reversed(value):
                        if isinstance(child, AST):
                            child.amplint_parent = node
                            push(child)
                elif isinstance(value, AST):
                    value.amplint_parent = node
                    push(value)
            if bucket is not None:
                bucket.append(node)
            if also is not None:
                also.append(node)
        self._calls = buckets["Call"]
        self._resolve_imports()
        return buckets

    def ensure_walked(self) -> None:
        """Parent links and imports for a context the engine skipped (no rule needed it)."""
        if not self._walked:
            self.walk_and_bucket(set())

    def _index_module_level(self) -> None:
        for stmt in self.tree.body:
            if isinstance(stmt, ast.ClassDef):
                self._classes[stmt.name] = stmt
            elif isinstance(stmt, FunctionNode):
                self._functions[stmt.name] = stmt
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                for target in targets:
                    if isinstance(target, ast.Name):
                        self._module_assignments.setdefault(target.id, []).append(stmt)
            elif isinstance(stmt, (ast.If, ast.Try)):
                # `if TYPE_CHECKING:` / version switches; `try: from apex... import
                # FusedLayerNorm as X` / `except ImportError: class X(nn.Module)`: the
                # fallback is analysed, since it is what runs without the fused package
                inner_body = stmt.body + stmt.orelse
                if isinstance(stmt, ast.Try):
                    inner_body = inner_body + [s for h in stmt.handlers for s in h.body]
                for inner in inner_body:
                    if isinstance(inner, ast.ClassDef):
                        self._classes.setdefault(inner.name, inner)
                    elif isinstance(inner, FunctionNode):
                        self._functions.setdefault(inner.name, inner)

    # --- imports -----------------------------------------------------------------------

    def _resolve_imports(self) -> None:
        aliases = self._imports
        for node in self._import_nodes:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        aliases[alias.asname] = alias.name
                    else:  # `import torch.nn` binds `torch`
                        top = alias.name.split(".")[0]
                        aliases[top] = top
            elif node.level == 0 and node.module:
                for alias in node.names:
                    if alias.name != "*":
                        aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
            else:  # `from .modeling import BertLayerNorm as LayerNorm`, `from . import constants`
                for alias in node.names:
                    if alias.name != "*":
                        self._relative_imports[alias.asname or alias.name] = f"{node.module or ''}.{alias.name}".lstrip(".")

    def import_origin(self, local: str) -> Optional[tuple[str, str]]:
        """(module, name) a local name is imported as: ``from .modeling import
        BertLayerNorm as LayerNorm`` -> ("modeling", "BertLayerNorm") (relative modules
        without their dots); ``import a.b as c`` -> ("a", "b"); None when not imported."""
        full = self._imports.get(local) or self._relative_imports.get(local)
        if not full:
            return None
        module, _, name = full.rpartition(".")
        return module, name

    @property
    def relative_imports(self) -> dict[str, str]:
        """Local name -> "module.name" of this file's relative imports (leading dots dropped)."""
        return self._relative_imports

    @property
    def binding_nodes(self) -> list[ast.AST]:
        """Every statement or expression that binds a name, in walk order."""
        self.ensure_walked()
        return self._binding_nodes

    @property
    def is_ascii(self) -> bool:
        """Whether the source is ASCII (byte and character columns agree)."""
        return self._ascii

    def import_path(self, local: str) -> Optional[str]:
        """The dotted module path a local name stands for (absolute or relative)."""
        return self._imports.get(local) or self._relative_imports.get(local)

    def nodes(self, type_name: str) -> list[ast.AST]:
        """Every node of the ast class ``type_name`` in the file, in walk order, without
        walking again when the engine's walk collected that type (always: Call, BinOp)."""
        self.ensure_walked()
        found = self._buckets.get(type_name)
        if found is None:
            cls = getattr(ast, type_name)
            found = self._buckets[type_name] = [n for n in ast.walk(self.tree) if isinstance(n, cls)]
        return found

    @property
    def calls(self) -> list[ast.Call]:
        return self.nodes("Call")

    @property
    def imports(self) -> dict[str, str]:
        """Local name -> fully qualified name for every import in the file."""
        return self._imports

    def qualname(self, expr: ast.AST) -> Optional[str]:
        """``F.softmax`` -> ``torch.nn.functional.softmax``; None when the base name is
        not an import (a local variable, ``self``...)."""
        parts: list[str] = []
        while isinstance(expr, ast.Attribute):
            parts.append(expr.attr)
            expr = expr.value
        if not isinstance(expr, ast.Name):
            return None
        base = self._imports.get(expr.id)
        if base is None:
            return None
        parts.append(base)
        return _canonical(".".join(reversed(parts)))

    def call_name(self, call: ast.Call) -> Optional[str]:
        return self.qualname(call.func)

    def imports_module(self, prefix: str) -> bool:
        """Whether the file imports ``prefix`` or anything under it."""
        return any(v == prefix or v.startswith(prefix + ".") for v in self._imports.values())

    def import_nodes(self) -> Sequence[ast.AST]:
        return self._import_nodes

    # --- structure -----------------------------------------------------------------------

    @staticmethod
    def parent(node: ast.AST) -> Optional[ast.AST]:
        return parent_of(node)

    @staticmethod
    def ancestors(node: ast.AST) -> Iterator[ast.AST]:
        node = parent_of(node)
        while node is not None:
            yield node
            node = parent_of(node)

    def enclosing_function(self, node: ast.AST) -> Optional[ast.AST]:
        for anc in self.ancestors(node):
            if isinstance(anc, FunctionNode):
                return anc
        return None

    def enclosing_class(self, node: ast.AST) -> Optional[ast.ClassDef]:
        for anc in self.ancestors(node):
            if isinstance(anc, ast.ClassDef):
                return anc
        return None

    def enclosing_method(self, node: ast.AST) -> tuple[Optional[ast.ClassDef], Optional[ast.AST]]:
        """The (class, method) whose body contains ``node`` (a method is a function
        defined directly in a class body)."""
        func = None
        for anc in self.ancestors(node):
            if isinstance(anc, FunctionNode):
                func = anc
            elif isinstance(anc, ast.ClassDef):
                return (anc, func) if func is not None and parent_of(func) is anc else (anc, None)
        return None, None

    def enclosing_statement(self, node: ast.AST) -> ast.AST:
        while node is not None and not isinstance(node, ast.stmt):
            node = parent_of(node)
        return node

    @property
    def classes(self) -> dict[str, ast.ClassDef]:
        return self._classes

    @property
    def functions(self) -> dict[str, ast.AST]:
        return self._functions

    def module_assignments(self, name: str) -> list[ast.AST]:
        return self._module_assignments.get(name, [])

    def method(self, cls: ast.ClassDef, name: str) -> Optional[ast.AST]:
        for stmt in cls.body:
            if isinstance(stmt, FunctionNode) and stmt.name == name:
                return stmt
        return None

    def base_classes(self, cls: ast.ClassDef) -> Iterator[ast.ClassDef]:
        """Base classes defined in this file, nearest first (cycles are cut)."""
        seen = {cls.name}
        todo = list(cls.bases)
        while todo:
            base = todo.pop(0)
            name = base.id if isinstance(base, ast.Name) else None
            if name and name not in seen and name in self._classes:
                seen.add(name)
                found = self._classes[name]
                yield found
                todo.extend(found.bases)

    def is_module_class(self, cls: ast.ClassDef) -> bool:
        """Whether ``cls`` is (very likely) a ``torch.nn.Module`` subclass."""
        if self._module_classes is None:
            self._module_classes = self._find_module_classes()
        return cls.name in self._module_classes

    def _find_module_classes(self) -> set[str]:
        found: set[str] = set()

        def direct(cls: ast.ClassDef) -> bool:
            for base in cls.bases:
                qn = self.qualname(base)
                if qn and (qn in _MODULE_BASE_QUALNAMES or qn.startswith("torch.nn.")):
                    return True
                name = base.attr if isinstance(base, ast.Attribute) else base.id if isinstance(base, ast.Name) else ""
                if name.endswith(_MODULE_BASE_SUFFIXES) and name not in self._classes:
                    return True
            # a base imported from elsewhere (a project's own BaseLayer) plus a forward method
            bases = [b for b in cls.bases if not (isinstance(b, ast.Name) and b.id in ("object", "ABC", "Protocol"))]
            return bool(bases) and self.method(cls, "forward") is not None

        classes = [c for c in self._all_classes()]
        for cls in classes:
            if direct(cls):
                found.add(cls.name)
        changed = True
        while changed:  # classes deriving from a module class defined in this file
            changed = False
            for cls in classes:
                if cls.name not in found and any(
                    isinstance(b, ast.Name) and b.id in found for b in cls.bases
                ):
                    found.add(cls.name)
                    changed = True
        return found

    def _all_classes(self) -> Iterator[ast.ClassDef]:
        stack = list(self.tree.body)
        while stack:
            stmt = stack.pop()
            if isinstance(stmt, ast.ClassDef):
                yield stmt
                stack.extend(stmt.body)
            elif isinstance(stmt, (ast.If, ast.Try)):
                stack.extend(stmt.body + stmt.orelse)
                if isinstance(stmt, ast.Try):
                    stack.extend(s for h in stmt.handlers for s in h.body)

    def in_model_code(self, node: ast.AST) -> bool:
        """Inside any method of an ``nn.Module`` subclass, or in a function those
        methods call (same file)."""
        cls, method = self.enclosing_method(node)
        if cls is not None and method is not None and self.is_module_class(cls):
            return True
        return self.in_forward(node)

    def in_forward(self, node: ast.AST) -> bool:
        """Inside a module's ``forward`` or anything it calls in this file, transitively."""
        if self._forward_reachable is None:
            self._forward_reachable = self._compute_forward_reachable()
        for anc in self.ancestors(node):
            if isinstance(anc, FunctionNode) and id(anc) in self._forward_reachable:
                return True
        return False

    def _compute_forward_reachable(self) -> set[int]:
        methods_by_name: dict[str, list[ast.AST]] = {}
        roots: list[ast.AST] = []
        for cls in self._all_classes():
            module = self.is_module_class(cls)
            for stmt in cls.body:
                if isinstance(stmt, FunctionNode):
                    methods_by_name.setdefault(stmt.name, []).append(stmt)
                    if module and stmt.name in _FORWARD_NAMES:
                        roots.append(stmt)
        # call graph from the Call nodes the walk collected: caller function -> callees
        callees: dict[int, list[ast.AST]] = {}
        functions = self._functions
        aliases = self._function_aliases()
        stored: dict[str, tuple] = {}
        self_stores: Optional[dict] = None
        for call in self._calls:
            target = call.func
            if target.__class__ is ast.Name:
                found = functions.get(target.id)
                found = (found,) if found is not None else ()
                # called through a local alias: softmax = torch.softmax if fast else stable_softmax
                if not found and target.id in aliases:
                    found = self._aliased_functions(call)
            elif target.__class__ is ast.Attribute and target.value.__class__ is ast.Name and target.value.id in ("self", "cls"):
                found = tuple(methods_by_name.get(target.attr, ()))
                if not found:  # self._contract = get_contract_fun(weight): a function stored on self
                    if self_stores is None:
                        self_stores = self._self_stores_of_factory_calls()
                    if target.attr in self_stores:
                        if target.attr not in stored:
                            stored[target.attr] = self._stored_functions(self_stores[target.attr])
                        found = stored[target.attr]
            else:
                found = ()
            # a function passed on as a value: partial(loss_fn, ...), checkpoint(block, x)
            found += tuple(functions[a.id] for a in call.args if a.__class__ is ast.Name and a.id in functions)
            if found:
                # nested functions belong to their method (or module-level function)
                caller = None
                for anc in self.ancestors(call):
                    if isinstance(anc, FunctionNode):
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
        return reachable

    def _self_stores_of_factory_calls(self) -> dict[str, list[ast.Assign]]:
        """``self.<attr> = f(...)`` with ``f`` a function of this file (one pass over the
        file's assignments): attr -> those statements."""
        functions = self._functions
        out: dict[str, list[ast.Assign]] = {}
        for node in self._binding_nodes:
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

    def _stored_functions(self, stores: list) -> tuple:
        """This file's functions a factory of this file returns, stored as ``self.<attr>``
        (``self._contract = get_contract_fun(weight)`` with ``return _contract_dense`` among
        its returns).  A function stored by name (``self.act = gelu``) is left out: its
        callers' tensors (a raw waveform, an activation) are not followed into it, so
        reaching it from ``forward`` would judge it without them."""
        functions = self._functions
        found: list = []
        for node in stores:
            value = node.value
            for option in ([value.body, value.orelse] if value.__class__ is ast.IfExp else [value]):
                if option.__class__ is ast.Call and option.func.__class__ is ast.Name and option.func.id in functions:
                    found += self._returned_functions(functions[option.func.id])
        return tuple(dict.fromkeys(found))

    def _returned_functions(self, factory: ast.AST) -> list:
        """The functions of this file a factory returns by name (its own ``return``s)."""
        functions = self._functions
        out = []
        stack = list(factory.body)
        while stack:
            stmt = stack.pop()
            if stmt.__class__ is ast.Return:
                value = stmt.value
                if value.__class__ is ast.Name and value.id in functions:
                    out.append(functions[value.id])
            elif not isinstance(stmt, (FunctionNode, ast.ClassDef)):
                stack += [c for c in ast.iter_child_nodes(stmt) if isinstance(c, ast.stmt)]
        return out

    def _function_aliases(self) -> set:
        """Names assigned a function of this file, or a choice of them (``f = a if c else b``)."""
        found = set()
        for node in self._binding_nodes:
            if node.__class__ is ast.Assign:
                value = node.value
                options = (value.body, value.orelse) if value.__class__ is ast.IfExp else (value,)
                if any(o.__class__ is ast.Name and o.id in self._functions for o in options):
                    found.update(t.id for t in node.targets if t.__class__ is ast.Name)
        return found

    def _aliased_functions(self, call: ast.Call) -> tuple:
        """Functions of this file a call's name may be bound to in its function
        (``f = a if cond else b``, ``f = a``)."""
        from .dtypes import reaching_value

        if self.enclosing_function(call) is None:
            return ()
        value = reaching_value(self, call.func)
        # a module-level alias, possibly chosen at import (`if new_fft is None: _rfft = _old_rfft
        # else: _rfft = _new_rfft`): any of its module-level values
        values = [value] if value is not None else self.module_level_values(call.func.id)
        names = []
        for value in values:
            if value.__class__ is ast.IfExp:
                names += [v for v in (value.body, value.orelse) if v.__class__ is ast.Name]
            elif value.__class__ is ast.Name:
                names.append(value)
        return tuple(self._functions[n.id] for n in names if n.id in self._functions)

    def module_level_values(self, name: str) -> list[ast.AST]:
        """The values ``name = value`` assigns at module level, in ``if`` / ``try`` blocks too."""
        out, todo = [], list(self.tree.body)
        while todo:
            stmt = todo.pop()
            if stmt.__class__ is ast.Assign and any(t.__class__ is ast.Name and t.id == name for t in stmt.targets):
                out.append(stmt.value)
            elif stmt.__class__ in (ast.If, ast.Try):
                todo += stmt.body + stmt.orelse + [s for h in getattr(stmt, "handlers", ()) for s in h.body]
        return out

    # --- local bindings ------------------------------------------------------------

    def _scope_of_binding(self, node: ast.AST) -> Optional[ast.AST]:
        """The function or lambda whose own body binds at ``node`` (None: class or module level)."""
        for anc in self.ancestors(node):
            if isinstance(anc, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                return anc
            if anc.__class__ is ast.ClassDef:
                return None
        return None

    def _build_binding_tables(self) -> None:
        self.ensure_walked()
        by_scope: dict[int, dict[str, list[ast.AST]]] = {}
        self_attrs: dict[int, dict[str, list[ast.AST]]] = {}
        for node in self._binding_nodes:
            scope = self._scope_of_binding(node)
            if scope is None:
                continue
            table = by_scope.setdefault(id(scope), {})
            for name in bound_names(node):
                table.setdefault(name, []).append(node)
            if node.__class__ is ast.Assign or node.__class__ is ast.AnnAssign:
                for t in node.targets if node.__class__ is ast.Assign else (node.target,):
                    if t.__class__ is ast.Attribute and t.value.__class__ is ast.Name and t.value.id == "self":
                        self_attrs.setdefault(id(scope), {}).setdefault(t.attr, []).append(node)
        self._bindings_by_scope, self._self_attrs_by_scope = by_scope, self_attrs

    def bindings(self, func: ast.AST) -> dict[str, list[ast.AST]]:
        """Local name -> the statements of ``func``'s own body (not nested scopes) that bind it."""
        if self._bindings_by_scope is None:
            self._build_binding_tables()
        return self._bindings_by_scope.get(id(func), {})

    def self_assignments(self, func: ast.AST) -> dict[str, list[ast.AST]]:
        """Attribute -> the ``self.attr = ...`` statements in ``func``'s own body."""
        if self._self_attrs_by_scope is None:
            self._build_binding_tables()
        return self._self_attrs_by_scope.get(id(func), {})

    # --- constants -------------------------------------------------------------------

    @property
    def evaluator(self):
        from .evaluate import Evaluator

        return self.get(Evaluator)

    def evaluate(self, expr: ast.AST) -> Optional["Value"]:
        """The number ``expr`` evaluates to, with where it came from, or None."""
        return self.evaluator.evaluate(expr)

    # --- dtypes ----------------------------------------------------------------------

    @property
    def dtype_flow(self) -> DtypeFlow:
        return self.get(DtypeFlow)

    def dtype_of(self, expr: Optional[ast.AST], explicit: bool = False) -> DtypeClass:
        """The dtype class of a tensor expression under the settings (target, opt level,
        engine, device): ``HALF`` / ``FP32`` / ``FP64`` / ``INTEGER`` / ``BOOL`` /
        ``SCALAR`` (a Python number) / ``INPUT`` (loader data: fp32 or integer) /
        ``UNKNOWN`` (may be half).  Computed on demand, cached per node; see
        :class:`amplint.dtypes.DtypeFlow`.  ``explicit``: fp32 only where the code itself
        asks for it (casts, ``dtype=``, factories, weights), not where the O1 policy
        upcast an op upstream -- an fp32 table the author built, not an activation O1
        happened to leave in fp32."""
        return self.get(ExplicitDtypeFlow if explicit else DtypeFlow).of(expr)

    def precision_of(self, expr: Optional[ast.AST]) -> Optional[Precision]:
        """When ``expr`` is half, whatever the selected opt level: an explicit cast (every
        level), a dtype borrowed from the activations (from O1) or from a weight or buffer
        (once the model is cast, O2 / O3), with the format and the cast that made it half;
        or "int" / "fp32" / "number"; None when the file does not show.  The same dtype
        analysis as :meth:`dtype_of`, run at each level without the policy's op casts
        (:class:`amplint.dtypes.PrecisionFacts`)."""
        return self.get(PrecisionFacts).of(expr)

    def fp32_until_model_cast(self, expr: ast.AST) -> bool:
        """An activation fp32 under O1 only because an fp32 weight or buffer promotes it;
        in the activation's dtype once O2 / O3 / ``model.half()`` casts the model."""
        return self.get(PrecisionFacts).fp32_until_cast(expr)

    def magnitude_bound(self, expr: Optional[ast.AST]) -> Optional[float]:
        """An upper bound on ``|x|`` for the elements of ``expr`` where the file shows one
        (probabilities, unit vectors, their products and sums), else None
        (:class:`amplint.ranges.MagnitudeBounds`)."""
        from .ranges import MagnitudeBounds

        return self.get(MagnitudeBounds).of(expr)

    def in_model_forward(self, node: ast.AST) -> bool:
        """Part of the model's forward computation: reached from a module's ``forward``,
        not under ``torch.no_grad()`` / ``inference_mode`` and not in ``__init__``."""
        return self.dtype_flow.in_model_forward(node)

    def branch_runs_in_half(self, node: ast.AST, target: Optional[str] = None) -> Optional[bool]:
        """Whether ``node`` runs when tensors have the target dtype (default: the
        settings' ``target``), judged from enclosing dtype checks: False inside the
        ``else`` of ``if x.dtype == torch.float16:`` (or the body of ``if x.dtype ==
        torch.float32:``), True in a branch only half reaches, None when no dtype check
        decides it.  ``-1e4 if x.dtype == torch.half else -1e9`` works the same way."""
        return dtype_branch(self, node, target)

    # --- source text -----------------------------------------------------------------

    @staticmethod
    def split_lines(text: str) -> list[str]:
        """Split on exactly the line endings Python's tokenizer knows (not \\f, \\x1c...)."""
        return _NEWLINE_RE.split(text)

    @property
    def lines(self) -> list[str]:
        """Source lines without their line endings; ``lines[0]`` is line 1."""
        if self._lines is None:
            self._lines = _NEWLINE_RE.split(self.source)
        return self._lines

    def line_text(self, line: int) -> str:
        lines = self.lines
        return lines[line - 1] if 0 < line <= len(lines) else ""

    def char_col(self, line: int, byte_col: int) -> int:
        """0-based character column of an ast (UTF-8 byte) column."""
        if self._ascii:
            return byte_col
        return len(self.line_text(line).encode("utf-8", "surrogatepass")[:byte_col].decode("utf-8", "replace"))

    def segment(self, node: ast.AST) -> str:
        """The exact source text of ``node``."""
        return self.text_between(node.lineno, node.col_offset, node.end_lineno, node.end_col_offset)

    def text_between(self, line: int, col: int, end_line: int, end_col: int) -> str:
        if self._ascii:
            if line == end_line:
                return self.line_text(line)[col:end_col]
            parts = [self.line_text(line)[col:]]
            parts += [self.line_text(n) for n in range(line + 1, end_line)]
            parts.append(self.line_text(end_line)[:end_col])
            return self.newline.join(parts)
        encoded = [self.line_text(n).encode("utf-8") for n in range(line, end_line + 1)]
        if line == end_line:
            return encoded[0][col:end_col].decode("utf-8")
        encoded[0] = encoded[0][col:]
        encoded[-1] = encoded[-1][:end_col]
        return self.newline.encode().join(encoded).decode("utf-8")

    def indentation(self, node: ast.AST) -> str:
        """The leading whitespace of the line ``node`` starts on."""
        text = self.line_text(node.lineno)
        return text[: len(text) - len(text.lstrip(" \t"))]

    # --- rule state ------------------------------------------------------------------

    def begin(self, rule: Rule) -> None:
        """Run ``rule.begin_file`` and keep the state it returns for :meth:`state`."""
        self._rule_states[type(rule)] = rule.begin_file(self)

    def state(self, rule: Rule) -> Any:
        """The state ``rule.begin_file`` returned for this file."""
        return self._rule_states.get(type(rule))

    # --- reporting -------------------------------------------------------------------

    def report(
        self,
        rule: Rule,
        node: ast.AST,
        message: str,
        *,
        fix: Optional[Fix] = None,
        related: Iterable[Related] = (),
        severity: Optional[Severity] = None,
    ) -> Finding:
        line, end_line = node.lineno, node.end_lineno or node.lineno
        if rule.uses_engine:
            message, related = self._engine_note(message, related)
        finding = Finding(
            path=self.path,
            line=line,
            column=self.char_col(line, node.col_offset) + 1,
            end_line=end_line,
            end_column=self.char_col(end_line, node.end_col_offset if node.end_col_offset is not None else node.col_offset) + 1,
            code=rule.code,
            rule=rule.name,
            message=message,
            severity=Severity(severity) if severity is not None else rule.severity,
            fix=self.in_characters(fix),
            related=list(related),
            node=node,
        )
        self.findings.append(finding)
        return finding

    def in_characters(self, fix: Optional[Fix]) -> Optional[Fix]:
        """``fix`` as a rule made it (``ast`` byte columns) in character columns, the one
        coordinate system of a reported finding (its own columns, its fix's edits)."""
        if fix is None or self._ascii:
            return fix

        def moved(p: Position) -> Position:
            return Position(p.line, self.char_col(p.line, p.col))

        return dataclasses.replace(fix, edits=tuple(Edit(moved(e.start), moved(e.end), e.text) for e in fix.edits))

    def _engine_note(self, message: str, related: Iterable[Related]) -> tuple[str, list[Related]]:
        """With ``engine = "auto"``: the engine assumed, in the message, and where it was
        decided, as a related location."""
        from .engine_detect import label

        related = list(related)
        name = label(self.settings)
        if name:
            message = f"{message} [{name}]"
            origin = self.settings.engine_origin
            if origin is not None:
                related.append(Related(*origin))
        return message, related

    def related(self, node: ast.AST, note: str, path: Optional[str] = None) -> Related:
        """A :class:`Related` location for a node of this file (or of ``path``)."""
        return Related(path or self.path, node.lineno, self.char_col(node.lineno, node.col_offset) + 1, note)


def _canonical(name: str) -> str:
    """Normalise a few spellings of the same torch object."""
    if name.startswith("torch.nn.modules."):
        # torch.nn.modules.linear.Linear -> torch.nn.Linear
        rest = name[len("torch.nn.modules."):].split(".")
        if len(rest) >= 2:
            return "torch.nn." + rest[-1]
    if name.startswith("torch.functional."):
        return "torch." + name[len("torch.functional."):]
    return name
