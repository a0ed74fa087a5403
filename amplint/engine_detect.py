"""``engine = "auto"``: which mixed-precision engine the linted project trains with.

The engine decides two things: the op policy the rules read (``settings.engine``:
``amplint`` -- apex's O1 lists, which the bundled engine shares -- or ``torch`` for
``torch.autocast``), and which ``amp`` module a fix may import (``settings.amp_module``:
``apex``, ``amplint``, or None when the project uses neither, so no fix adds one).

Evidence is read from every linted file (:func:`evidence`, stored in each file's summary
under :data:`FACT`): a file's setup applies to it, to the files in its folder and below,
and to the modules it imports (a training script decides for the models it trains):

* ``from apex import amp`` / ``import apex.amp``                        -> apex
* ``from amplint import amp`` / ``import amplint.amp``                  -> amplint
* ``torch.autocast``, ``torch.amp`` / ``torch.cuda.amp`` (autocast, GradScaler),
  Lightning ``Trainer(precision="16-mixed" | "bf16-mixed")``, transformers
  ``TrainingArguments(fp16=True | bf16=True)``, accelerate ``mixed_precision="fp16" | "bf16"``
                                                                          -> torch, and the
  dtype they name becomes the target unless ``target`` was set;
* a whole model cast to half: ``model.half()`` or ``model.to(torch.float16)`` as a statement
  (a module casts itself in place; a tensor's cast whose result is dropped does nothing), or
  ``torch_dtype=torch.float16`` (``from_pretrained``)                    -> pure half: the
  amplint policy at O2 (nothing upcast: autocast's and O1's fp32 lists do not apply) unless
  ``opt-level`` was set, and that dtype as the target unless ``target`` was set.

When several engines are found, apex wins over amplint over torch over pure half (a project
that imports apex's ``amp`` trains with it even if a script also uses autocast; half weights
under autocast still get autocast's fp32 ops).  Nothing found: the
amplint policy (the bundled engine ``verify`` runs), and no ``amp`` import in fixes.
"""
from __future__ import annotations

import ast
import dataclasses
import re
from typing import Any, Iterable, Optional

from .bindings import node_fields
from .config import FileSettings

#: the key of the engine evidence in a file's summary facts (not a rule code)
FACT = "@engine"
#: substrings without which a file holds no evidence (cheap test before any walk)
MARKERS = ("apex", "amplint", "autocast", "torch.amp", "cuda.amp", "cpu.amp", "import amp", "GradScaler",
           "precision", "fp16", "bf16", ".half()", "float16")
#: precedence when a project shows several engines
_RANK = {"apex": 0, "amplint": 1, "torch": 2, "half": 3}
#: when sources disagree on the dtype, the narrower range wins (its hazards include the other's)
_TARGET_RANK = {"fp16": 0, "fp8": 1, "bf16": 2}
_LIGHTNING = {"16-mixed": "fp16", "16": "fp16", 16: "fp16", "bf16-mixed": "bf16", "bf16": "bf16"}
_ACCELERATE = {"fp16": "fp16", "bf16": "bf16", "fp8": "fp8"}
_TORCH_AMP_MODULES = ("torch.amp", "torch.cuda.amp", "torch.cpu.amp")
_TORCH_AMP_NAMES = ("autocast", "GradScaler")
_DTYPES = {"float16": "fp16", "half": "fp16", "bfloat16": "bf16"}
_LABELS = {"apex": "apex.amp", "amplint": "amplint.amp", "torch": "torch.autocast", "half": "pure half"}
#: the opt level pure-half evidence stands for: the model's weights and activations half,
#: nothing upcast (whether fp32 master weights exist, O2, or not, O3, the cast does not say)
PURE_HALF_LEVEL = "O2"


@dataclasses.dataclass(frozen=True)
class Evidence:
    engine: str  # apex | amplint | torch | half (a whole model cast to half, no autocast)
    target: Optional[str]  # the dtype it names, when it names one
    path: str
    line: int
    column: int  # 1-based
    what: str  # the code that shows it, short

    def to_json(self) -> list:
        return [self.engine, self.target, self.line, self.column, self.what]

    @classmethod
    def from_json(cls, path: str, data: list) -> "Evidence":
        engine, target, line, column, what = data
        return cls(engine, target, path, line, column, what)


def dotted_name(expr: ast.AST) -> Optional[str]:
    parts = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if isinstance(expr, ast.Name):
        parts.append(expr.id)
        return ".".join(reversed(parts))
    return None


#: the node classes the setup detectors read (here and :mod:`amplint.fp8.setup`); ``ast.Expr``
#: for a model cast written as a statement (``model.half()``)
_SETUP_CLASSES = frozenset((ast.Import, ast.ImportFrom, ast.Call, ast.Attribute, ast.Expr))
_FIELDS: dict[type, tuple[str, ...]] = {}
def setup_nodes(tree: ast.Module) -> list[ast.AST]:
    """The tree's imports, calls, attributes and expression statements in :func:`ast.walk`'s
    order (breadth first), found in one walk.  Breadth first because the import aliases
    :func:`evidence` applies to a call are those met before it in that order.  Kept per
    file by :class:`SetupNodes`."""
    order = [tree]
    found = []
    fields_of, wanted, AST = _FIELDS, _SETUP_CLASSES, ast.AST
    push, keep = order.append, found.append
    for node in order:  # the list grows while it is read: a queue, as ast.walk's
        cls = node.__class__
        if cls in wanted:
            keep(node)
        fields = fields_of.get(cls)
        if fields is None:
            fields = fields_of[cls] = node_fields(cls)
        for field in fields:
            value = getattr(node, field, None)
            if value.__class__ is list:
                for child in value:
                    if isinstance(child, AST):
                        push(child)
            elif isinstance(value, AST):
                push(value)
    return found


class SetupNodes:
    """A file's setup nodes (:func:`setup_nodes`), walked for once on first use
    (``ctx.get(SetupNodes).nodes``): engine detection reads them twice per file (the
    settings, the summary), the fp8 detection, the bf16-cast count and the
    ``amp.initialize`` lookup once each -- five walks of the whole tree cost more than
    the rules' own work on some files.  A per-file analysis, not a memo keyed on the
    tree: a module-level map from a tree to its nodes kept every tree alive (the nodes'
    parent links lead back to the key)."""

    def __init__(self, ctx):
        self.tree: ast.Module = ctx.tree
        self._nodes: Optional[list[ast.AST]] = None
        self._evidence: Optional[tuple[Evidence, ...]] = None

    @classmethod
    def of_tree(cls, tree: ast.Module) -> "SetupNodes":
        """For a tree without a context (the settings of a file resolved on their own)."""
        found = cls.__new__(cls)
        found.tree, found._nodes, found._evidence = tree, None, None
        return found

    def evidence(self, path: str, source: str) -> tuple[Evidence, ...]:
        """:func:`evidence` of this file (``path``, ``source``: its own), found once: the
        settings and the summary both ask."""
        if self._evidence is None:
            self._evidence = tuple(evidence(self, path, source))
        return self._evidence

    @property
    def nodes(self) -> list[ast.AST]:
        if self._nodes is None:
            self._nodes = setup_nodes(self.tree)
        return self._nodes


def _dtype_target(expr: Optional[ast.AST]) -> Optional[str]:
    name = dotted_name(expr) if expr is not None else None
    return _DTYPES.get(name.rsplit(".", 1)[-1]) if name else None


def evidence(setup: SetupNodes, path: str, source: str) -> list[Evidence]:
    """What a file (its :class:`SetupNodes`) shows about the engine, in source order."""
    if not any(m in source for m in MARKERS):
        return []
    found: list[Evidence] = []
    aliases: dict[str, str] = {}  # local name -> qualified name, for torch's amp names

    def add(engine, target, node, what):
        found.append(Evidence(engine, target, path, node.lineno, node.col_offset + 1, what))

    for node in setup.nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "apex.amp" or alias.name.startswith("apex.amp."):
                    add("apex", None, node, f"import {alias.name}")
                elif alias.name == "amplint.amp" or alias.name.startswith("amplint.amp."):
                    add("amplint", None, node, f"import {alias.name}")
                elif alias.name in _TORCH_AMP_MODULES:
                    add("torch", None, node, f"import {alias.name}")
                aliases[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            module, names = node.module, [a.name for a in node.names]
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"{module}.{alias.name}"
            if module == "apex" and "amp" in names or module.startswith("apex.amp"):
                add("apex", None, node, f"from {module} import {', '.join(names)}")
            elif module == "amplint" and "amp" in names or module.startswith("amplint.amp"):
                add("amplint", None, node, f"from {module} import {', '.join(names)}")
            elif module == "torch" and "amp" in names or module in _TORCH_AMP_MODULES and any(
                    n in _TORCH_AMP_NAMES for n in names):
                add("torch", None, node, f"from {module} import {', '.join(names)}")
        elif isinstance(node, ast.Call):
            _call_evidence(node, aliases, add)
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            _model_cast_evidence(node.value, add)
    found.sort(key=lambda e: (e.line, e.column))
    return found


def _call_evidence(node: ast.Call, aliases: dict, add) -> None:
    name = dotted_name(node.func)
    if name is None:
        return
    head, _, rest = name.partition(".")
    qualified = aliases.get(head, head) + ("." + rest if rest else "")
    last = name.rsplit(".", 1)[-1]
    keywords = {k.arg: k.value for k in node.keywords if k.arg}
    if qualified in ("torch.autocast",) or any(qualified == f"{m}.autocast" for m in _TORCH_AMP_MODULES):
        dtype = keywords.get("dtype")
        if dtype is None and len(node.args) > 1:
            dtype = node.args[1]
        enabled = keywords.get("enabled")
        if isinstance(enabled, ast.Constant) and enabled.value is False:
            return  # a region kept out of autocast says nothing about the dtype trained in
        add("torch", _dtype_target(dtype), node, f"{name}(...)")
        return
    if last in ("Trainer", "Fabric"):
        value = keywords.get("precision")
        if isinstance(value, ast.Constant) and value.value in _LIGHTNING:
            add("torch", _LIGHTNING[value.value], node, f"{last}(precision={value.value!r})")
        return
    if last.endswith("Arguments"):
        for key, target in (("fp16", "fp16"), ("bf16", "bf16")):
            value = keywords.get(key)
            if isinstance(value, ast.Constant) and value.value is True:
                add("torch", target, node, f"{last}({key}=True)")
        return
    value = keywords.get("mixed_precision")
    if isinstance(value, ast.Constant) and value.value in _ACCELERATE:
        add("torch", _ACCELERATE[value.value], node, f"{last}(mixed_precision={value.value!r})")
        return
    target = _dtype_target(keywords.get("torch_dtype"))
    if target is not None:  # from_pretrained(..., torch_dtype=torch.float16): the weights load half
        add("half", target, node, f"{last}(torch_dtype={dotted_name(keywords['torch_dtype'])})")


_HALF_METHODS = {"half": "fp16", "bfloat16": "bf16"}


def _model_cast_evidence(call: ast.Call, add) -> None:
    """``model.half()`` / ``model.to(torch.float16)`` / ``model.to(device, dtype=torch.float16)``
    as a statement: only a module casts itself in place, so the result is not needed."""
    func = call.func
    if not isinstance(func, ast.Attribute) or dotted_name(func.value) is None:
        return
    receiver = dotted_name(func.value)
    if func.attr in _HALF_METHODS and not call.args and not call.keywords:
        add("half", _HALF_METHODS[func.attr], call, f"{receiver}.{func.attr}()")
    elif func.attr == "to":
        for arg in [*call.args, *(k.value for k in call.keywords if k.arg == "dtype")]:
            target = _dtype_target(arg)
            if target is not None:
                add("half", target, call, f"{receiver}.to({dotted_name(arg)})")
                return


#: text of a call :func:`initialize_calls` can find (``amp.initialize``, ``apex_amp.initialize``):
#: most files say "initialize" only in ``initializer_range`` and ``_init_weights`` docs
_INITIALIZE_TEXT = re.compile(r"amp\w*\s*\.\s*initialize\b")


def initialize_calls(setup: SetupNodes) -> list[int]:
    """Lines of ``amp.initialize(...)`` calls (where registrations must come before)."""
    return [n.lineno for n in setup.nodes
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "initialize"
            and isinstance(n.func.value, ast.Name) and "amp" in n.func.value.id]


def collect(setup: SetupNodes, path: str, source: str) -> Optional[dict]:
    """This file's summary fact: its evidence and its ``amp.initialize`` lines."""
    found = setup.evidence(path, source)
    init = initialize_calls(setup) if _INITIALIZE_TEXT.search(source) else []
    if not found and not init:
        return None
    imported = set()
    for node in setup.nodes:
        if isinstance(node, ast.Import):
            imported.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            imported.add(node.module)
            imported.update(f"{node.module}.{a.name}" for a in node.names)
    return {"evidence": [e.to_json() for e in found], "initialize": init, "imports": sorted(imported)}


def _project_facts(project, path: str, root: str) -> Iterable[tuple[str, Any]]:
    """The other files whose setup applies to ``path``: like registrations, a training
    script reaches the files in its folder and below, and the modules it imports."""
    if project is None:
        return ()
    from .imports import registration_reaches

    return [(p, data) for p, data in project.facts(FACT)
            if p != path and registration_reaches(p, data.get("imports", ()), path, root)]


def resolve(settings, path: str, source: str, tree: ast.Module, project,
            setup: Optional[SetupNodes] = None) -> FileSettings:
    """The settings one file is linted with: with ``engine = "auto"``, the engine (and,
    unless ``target`` was set, the dtype) the project shows; with a named engine, that
    engine.  ``engine`` becomes the op policy (``amplint`` or ``torch``).  ``setup``:
    the file context's :class:`SetupNodes` (walked for here when not given)."""
    if isinstance(settings, FileSettings):
        return settings  # resolved already
    configured = settings.engine
    if configured != "auto":
        if configured == "apex":
            return FileSettings.of(settings, engine="amplint", amp_module="apex", engine_configured="apex")
        return FileSettings.of(settings, amp_module="amplint" if configured == "amplint" else None,
                               engine_configured=configured)
    if setup is None:
        setup = SetupNodes.of_tree(tree)
    found = list(setup.evidence(path, source))
    for other, data in _project_facts(project, path, settings.root):
        found.extend(Evidence.from_json(other, e) for e in data.get("evidence", ()))
    if settings.opt_level_given:  # a configured opt level is how the project trains: a cast decides nothing
        found = [e for e in found if e.engine != "half"]
    if not any(e.target for e in found) and not settings.target_given and cast_target(setup, source) == "bf16":
        settings = dataclasses.replace(settings, target="bf16")  # the file runs its tensors in bf16 itself
    if not found:
        return FileSettings.of(settings, engine="amplint", amp_module=None, engine_configured="auto")
    engine = min((e.engine for e in found), key=_RANK.__getitem__)
    ours = [e for e in found if e.engine == engine]
    decided = min(ours, key=lambda e: (e.path != path, e.path, e.line, e.column))
    changes: dict[str, Any] = {}
    targets = [e.target for e in ours if e.target]
    if targets and not settings.target_given:
        changes["target"] = min(targets, key=_TARGET_RANK.__getitem__)
    origin = (decided.path, decided.line, decided.column,
              f"engine assumed here: `{decided.what}` -> {_LABELS[engine]}"
              + (f", target {changes['target']}" if "target" in changes else ""))
    if engine == "half":
        if not settings.opt_level_given:
            changes["opt_level"] = PURE_HALF_LEVEL
        origin = origin[:3] + (origin[3] + (f", opt level {changes['opt_level']}" if "opt_level" in changes else ""),)
        return FileSettings.of(settings, engine="amplint", amp_module=None, engine_configured="auto",
                               engine_origin=origin, **changes)
    return FileSettings.of(settings, engine="amplint" if engine == "apex" else engine,
                           amp_module=engine if engine != "torch" else None,
                           engine_configured="auto", engine_origin=origin, **changes)


#: how many explicit casts to bf16 (and none to fp16) make a file's own target bf16
_CASTS_FOR_TARGET = 2


def cast_target(setup: SetupNodes, source: str) -> Optional[str]:
    """``"bf16"`` when the file casts its tensors to bfloat16 itself, throughout:
    ``.to(torch.bfloat16)``, ``dtype=torch.bfloat16``, ``.bfloat16()`` at least
    :data:`_CASTS_FOR_TARGET` times and never to float16 (gpt-fast's ``quantize.py``).
    Such code runs in bf16 with or without an autocast setup, so bf16's limits apply."""
    if "bfloat16" not in source:
        return None
    bf16 = 0
    for node in setup.nodes:
        if node.__class__ is ast.Attribute:
            if node.attr in ("float16", "half") and dotted_name(node.value) == "torch":
                return None
            if node.attr == "bfloat16" and dotted_name(node.value) == "torch":
                bf16 += 1
        elif node.__class__ is ast.Call and node.func.__class__ is ast.Attribute and not node.args:
            if node.func.attr == "half":
                return None
            if node.func.attr == "bfloat16":
                bf16 += 1
    return "bf16" if bf16 >= _CASTS_FOR_TARGET else None


def label(settings) -> str:
    """How a message names the engine assumed for a file: ``torch.autocast (auto:
    train.py:12)``, ``amplint (auto: no mixed-precision setup found)``."""
    if settings.engine_configured != "auto":
        return ""
    if settings.engine_origin is None:
        return "engine amplint (auto: no mixed-precision setup found in the linted files)"
    path, line, _, _ = settings.engine_origin
    if settings.engine == "amplint" and settings.amp_module is None:  # only pure-half evidence leaves no amp module
        name = _LABELS["half"]
    else:
        name = "apex.amp" if settings.amp_module == "apex" else _LABELS[settings.engine]
    return f"engine {name} (auto: {path}:{line})"


def initialize_sites(project, path: str, root: str, setup: Optional[SetupNodes] = None) -> list[tuple[str, int]]:
    """(path, line) of each ``amp.initialize`` call in the linted files, this file first."""
    own = [(path, line) for line in initialize_calls(setup)] if setup is not None else []
    others = [(p, line) for p, data in _project_facts(project, path, root) for line in data.get("initialize", ())]
    return own + sorted(others)
