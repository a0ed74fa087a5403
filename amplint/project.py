"""What one linted file tells the others: the project index.

Model constants often live in one file (``configuration_bert.py``:
``layer_norm_eps=1e-12``) and are used in another (``modeling_bert.py``:
``config.layer_norm_eps``); registrations (``amp.register_half_function(torch,
"einsum")``) usually sit in a package ``__init__`` or a training script.  The engine
therefore runs in two phases: every file is summarised (a small, JSON-able
:class:`FileSummary`), the summaries are merged into a :class:`ProjectIndex`, and
then every file is linted with that index in its context.

Rules contribute facts by overriding :meth:`amplint.rule.Rule.collect` (a classmethod:
``collect(ctx) -> JSON-able or None``, with ``collect_markers``: substrings a file needs
for ``collect`` to matter); the merged per-file results are available to every rule as
``ctx.project.facts(code)``.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from typing import Any, Iterable, Iterator, Optional, Sequence

#: a file needs one of these for the built-in config summary to be worth a parse
CONFIG_MARKERS = ("Config", "config", "dataclass", "Args", "Params", "Settings")


@dataclasses.dataclass(frozen=True)
class ConfigDefault:
    cls: str
    field: str
    value: float
    path: str
    line: int
    column: int


@dataclasses.dataclass
class FileSummary:
    path: str
    configs: list[ConfigDefault] = dataclasses.field(default_factory=list)
    facts: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict:
        return {"path": self.path, "configs": [dataclasses.asdict(c) for c in self.configs], "facts": self.facts}

    @classmethod
    def from_json(cls, data: dict) -> "FileSummary":
        return cls(data["path"], [ConfigDefault(**c) for c in data["configs"]], data["facts"])


def summarize(ctx, rules: Iterable) -> FileSummary:
    """Extract what other files may need from ``ctx`` (already walked)."""
    from . import engine_detect
    from .fp8 import setup as fp8_setup
    from .semantic import constants as module_constants
    from .semantic.configs import config_fields, is_config_class
    from .semantic.facts import collect_all

    ctx.ensure_walked()
    summary = FileSummary(ctx.path)
    for cls in ctx.classes.values():
        if not is_config_class(cls):
            continue
        for field, (node, default) in config_fields(ctx, cls).items():
            value = ctx.evaluator.evaluate(default, None, 1)
            if value is not None and isinstance(value.value, (int, float)):
                summary.configs.append(
                    ConfigDefault(cls.name, field, value.value, ctx.path, node.lineno, ctx.char_col(node.lineno, node.col_offset) + 1)
                )
    setup = ctx.get(engine_detect.SetupNodes)
    engine = engine_detect.collect(setup, ctx.path, ctx.source)
    if engine is not None:
        summary.facts[engine_detect.FACT] = engine
    fp8 = fp8_setup.collect(setup, ctx.path, ctx.source)
    if fp8 is not None:
        summary.facts[fp8_setup.FACT] = fp8
    constants = module_constants.collect(ctx)
    if constants is not None:
        summary.facts[module_constants.KEY] = constants
    summary.facts.update(collect_all(ctx))
    for rule in rules:
        if not rule.collects():
            continue
        markers = rule.collect_markers
        if markers and not any(m in ctx.source for m in markers):
            continue
        data = rule.collect(ctx)
        if data is not None:
            summary.facts[rule.code] = data
    return summary


def defines_constants(text: str) -> bool:
    """Whether ``text`` may hold a fact worth summarising without any other marker: a
    numeric constant, or one of :mod:`amplint.semantic.facts`' (width lists, argparse
    defaults, config constructions, layer helpers)."""
    from .semantic import constants
    from .semantic.facts import worth_collecting

    return constants.MARKER.search(text) is not None or worth_collecting(text)


def module_matches(path: str, module: str) -> int:
    """How many trailing components of the dotted ``module`` the file ``path`` matches
    (``a/b/seq2seq_constant.py`` and ``stanza.models.common.seq2seq_constant``: 1 or
    more; 0: not that module).  A package's ``__init__.py`` stands for its folder."""
    parts = path.replace("\\", "/").split("/")
    stem = parts[-1].rsplit(".", 1)[0]
    parts = parts[:-1] if stem == "__init__" else parts[:-1] + [stem]
    wanted = [m for m in module.split(".") if m]
    n = 0
    while n < len(wanted) and n < len(parts) and wanted[-1 - n] == parts[-1 - n]:
        n += 1
    return n


class ProjectIndex:
    """The merged summaries of every file linted in this run.

    Every question asked is recorded in ``queries``: the engine lints each file once
    against an empty index, then re-lints only the files that asked a question another
    file can answer (see :meth:`answers_any`), so most files are parsed once."""

    def __init__(self, summaries: Iterable[FileSummary] = ()):
        self.queries: list[tuple] = []
        self.summaries: dict[str, FileSummary] = {s.path: s for s in summaries}
        self._by_field: dict[str, list[ConfigDefault]] = {}
        #: (fact code, name) -> [(path, data)] for facts shaped {"by_name": {...}}
        self._named: dict[tuple[str, str], list[tuple[str, Any]]] = {}
        for summary in self.summaries.values():
            for code, data in summary.facts.items():
                if isinstance(data, dict) and isinstance(data.get("by_name"), dict):
                    for name, value in data["by_name"].items():
                        self._named.setdefault((code, name), []).append((summary.path, value))
        for summary in self.summaries.values():
            for default in summary.configs:
                self._by_field.setdefault(default.field, []).append(default)

    def config_defaults(self, field: str, cls: Optional[str] = None, exclude_path: Optional[str] = None) -> Iterator[ConfigDefault]:
        self.queries.append(("config", field, cls))
        for default in self._by_field.get(field, ()):
            if default.path == exclude_path:
                continue
            if cls is None or default.cls == cls:
                yield default

    def facts(self, code: str) -> list[tuple[str, Any]]:
        """(path, data) for every file whose summary has facts from rule ``code``."""
        self.queries.append(("facts", code))
        return [(s.path, s.facts[code]) for s in self.summaries.values() if code in s.facts]

    def named(self, code: str, name: str, module: Optional[str] = None, exclude_path: Optional[str] = None) -> list[tuple[str, Any]]:
        """(path, data) for the files whose ``code`` facts have ``{"by_name": {name:
        data}}`` -- a function, class or constant of that name.  With ``module`` (the
        dotted or relative module it is imported from), only the files that module can
        be, best match first; a name defined in several files no module picks is left
        unanswered."""
        self.queries.append(("named", code, name))
        found = [(module_matches(path, module) if module else 0, path, data)
                 for path, data in self._named.get((code, name), ()) if path != exclude_path]
        if module:
            found = [f for f in found if f[0] > 0]
        if not found:
            return []
        best = max(f[0] for f in found)
        found = [f for f in found if f[0] == best]
        return [(p, d) for _, p, d in found] if len(found) == 1 or not module else []

    def answers_any(self, queries: Iterable[Sequence], path: str) -> bool:
        """Whether another file than ``path`` answers one of ``queries``."""
        for query in queries:
            if query[0] == "named":
                if any(p != path for p, _ in self._named.get((query[1], query[2]), ())):
                    return True
                continue
            if query[0] == "config":
                if any(d.path != path for d in self._by_field.get(query[1], ()) if query[2] is None or d.cls == query[2]):
                    return True
            elif query[0] == "facts":
                if any(p != path and query[1] in s.facts for p, s in self.summaries.items()):
                    return True
        return False

    def fingerprint(self) -> str:
        """Changes whenever any summary changes (part of the cache key)."""
        blob = json.dumps([self.summaries[p].to_json() for p in sorted(self.summaries)], sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]
