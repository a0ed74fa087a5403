"""Config classes and the names that hold them, read from the ``ast`` alone (no file
context): which classes are configs (``GPTConfig``, dataclasses, ``PretrainedConfig``
subclasses), their fields and defaults, and the expressions that name a config
(``config``, ``self.cfg``).  Shared by the evaluator, the project summary and the
size analyses; depends on nothing else of amplint (a file context is only asked for
its named analyses)."""
from __future__ import annotations

import ast
from typing import Optional

#: names of the variable that usually holds a model config
CONFIG_NAMES = ("config", "cfg", "conf", "model_config", "hparams", "args", "params", "opt", "hp")
CONFIG_CLASS_SUFFIXES = ("Config", "Configuration", "Args", "Arguments", "Params", "HParams", "Settings")



def parameter(func: ast.AST, name: str):
    """(arg node, default expr or None) of parameter ``name`` of ``func``, or (None, None)."""
    args = func.args
    positional = args.posonlyargs + args.args
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    for arg, default in zip(positional, defaults):
        if arg.arg == name:
            return arg, default
    for arg, default in zip(args.kwonlyargs, args.kw_defaults):
        if arg.arg == name:
            return arg, default
    for arg in (args.vararg, args.kwarg):
        if arg is not None and arg.arg == name:
            return arg, None
    return None, None


def is_config_expr(expr: ast.AST) -> bool:
    """``config`` / ``self.config`` / ``cfg`` / ``self.cfg`` ..."""
    if isinstance(expr, ast.Name):
        return expr.id in CONFIG_NAMES or expr.id.endswith(("_config", "_cfg"))
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self":
        return expr.attr in CONFIG_NAMES or expr.attr.endswith(("_config", "_cfg"))
    return False


def annotation_class(ctx, base: ast.AST, use: ast.AST) -> Optional[str]:
    """The class a config parameter is annotated with (``config: GPT2Config``)."""
    if not isinstance(base, ast.Name):
        return None
    func = ctx.enclosing_function(use)
    while func is not None:
        param, _ = parameter(func, base.id)
        if param is not None and param.annotation is None:
            # `def __init__(self, config)` in a transformers modeling file: the config the
            # file's PreTrainedModel declares (`config_class = DebertaConfig`)
            return ctx.get(ModelConfigClass).name if is_config_expr(base) else None
        if param is not None:
            ann = param.annotation
            if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
                return ann.value.split(".")[-1]
            if isinstance(ann, ast.Name):
                return ann.id
            if isinstance(ann, ast.Attribute):
                return ann.attr
            return None
        func = ctx.enclosing_function(func)
    return None


def is_config_class(cls: ast.ClassDef) -> bool:
    if cls.name.endswith(CONFIG_CLASS_SUFFIXES):
        return True
    for deco in cls.decorator_list:
        target = deco.func if isinstance(deco, ast.Call) else deco
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if name == "dataclass":
            return True
    for base in cls.bases:
        name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")
        if name.endswith(("Config", "PretrainedConfig", "NamedTuple")):
            return True
    return False


def config_fields(ctx, cls: ast.ClassDef) -> dict[str, tuple[ast.AST, ast.AST]]:
    """field -> (definition node, default expression) of a config-like class of
    ``ctx``'s file (computed once per class: :class:`ConfigFields`)."""
    return ctx.get(ConfigFields).of(cls)


class ConfigFields:
    """The fields of this file's config classes, found once per class:
    ``ctx.get(ConfigFields).of(cls)``.  A per-file analysis rather than a map keyed on
    the class node: such a map kept every tree alive (its values hold nodes whose
    parent links lead back to the key)."""

    def __init__(self, ctx):
        self._by_class: dict[int, dict[str, tuple[ast.AST, ast.AST]]] = {}

    def of(self, cls: ast.ClassDef) -> dict[str, tuple[ast.AST, ast.AST]]:
        found = self._by_class.get(id(cls))
        if found is None:
            found = self._by_class[id(cls)] = _config_fields(cls)
        return found


def _config_fields(cls: ast.ClassDef) -> dict[str, tuple[ast.AST, ast.AST]]:
    fields: dict[str, tuple[ast.AST, ast.AST]] = {}
    for stmt in cls.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            value = stmt.value
            # dataclasses.field(default=...)
            if isinstance(value, ast.Call):
                for kw in value.keywords:
                    if kw.arg == "default":
                        value = kw.value
            fields[stmt.target.id] = (stmt, value)
        elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            fields[stmt.targets[0].id] = (stmt, stmt.value)
    for stmt in cls.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == "__init__":
            args = stmt.args
            positional = args.posonlyargs + args.args
            defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
            pairs = list(zip(positional, defaults)) + list(zip(args.kwonlyargs, args.kw_defaults))
            for arg, default in pairs:
                if default is not None and arg.arg != "self":
                    fields.setdefault(arg.arg, (default, default))
            for name, value in _stored_parameters(stmt, dict((a.arg, d) for a, d in pairs)).items():
                fields.setdefault(name, value)
    return fields


def declares_field(ctx, cls: ast.ClassDef, field: str) -> bool:
    """Whether a config class has ``field`` at all, with or without a default
    (``vocab_size: int``, ``self.vocab_size = vocab_size``): then the field is this
    file's, and another file's default of the same name is not it."""
    if field in config_fields(ctx, cls):
        return True
    for stmt in cls.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == field:
            return True
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == "__init__":
            if field in _stored_parameter_names(stmt):
                return True
    return False


def _stored_parameter_names(init: ast.AST) -> dict[str, str]:
    """field -> the ``__init__`` parameter stored in it (``self.vocab_size = vocab``)."""
    params = {a.arg for a in init.args.posonlyargs + init.args.args + init.args.kwonlyargs}
    out = {}
    for node in ast.walk(init):
        if node.__class__ is ast.Assign and node.value.__class__ is ast.Name and node.value.id in params:
            for target in node.targets:
                if target.__class__ is ast.Attribute and target.value.__class__ is ast.Name and target.value.id == "self":
                    out.setdefault(target.attr, node.value.id)
    return out


def _stored_parameters(init: ast.AST, defaults: dict) -> dict[str, tuple[ast.AST, ast.AST]]:
    """``self.vocab_size = vocab_size_or_config_json_file`` anywhere in ``__init__``, also
    under branches (``elif isinstance(x, int):``, pytorch-pretrained-bert's configs): field
    -> (default, default) of the parameter stored.  The union of the values a field may
    get is taken: a field stored from several different parameters (or assigned
    anything else as well) has no single default and is left out."""
    stored: dict[str, set] = {}
    for node in ast.walk(init):
        if node.__class__ is not ast.Assign:
            continue
        for target in node.targets:
            if (target.__class__ is ast.Attribute and target.value.__class__ is ast.Name
                    and target.value.id == "self"):
                value = node.value
                key = value.id if value.__class__ is ast.Name and defaults.get(value.id) is not None else None
                stored.setdefault(target.attr, set()).add(key)
    out = {}
    for field, sources in stored.items():
        if len(sources) == 1:
            (param,) = sources
            if param is not None:
                default = defaults[param]
                out[field] = (default, default)
    return out


class LocalConfigs:
    """This file's config classes by name: ``ctx.get(LocalConfigs).by_name``."""

    def __init__(self, ctx):
        self.by_name: dict[str, ast.ClassDef] = {c.name: c for c in ctx.classes.values() if is_config_class(c)}


class ModelConfigClass:
    """The config class this file's models declare -- ``config_class = DebertaConfig`` on
    a ``PreTrainedModel`` subclass -- when they all name the same one:
    ``ctx.get(ModelConfigClass).name``.  The layers of such a file take that config as an
    unannotated ``config`` parameter."""

    def __init__(self, ctx):
        names = set()
        for cls in ctx.classes.values():
            for stmt in cls.body:
                if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
                        and stmt.targets[0].id == "config_class"):
                    value = stmt.value
                    names.add(value.id if isinstance(value, ast.Name) else value.attr
                              if isinstance(value, ast.Attribute) else None)
        self.name: Optional[str] = names.pop() if len(names) == 1 else None
