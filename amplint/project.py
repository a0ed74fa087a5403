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
    from .evaluate import config_fields, is_config_class

    ctx.ensure_walked()
    summary = FileSummary(ctx.path)
    for cls in ctx.classes.values():
        if not is_config_class(cls):
            continue
        for field, (node, default) in config_fields(cls).items():
            value = ctx.evaluator.evaluate(default, None, 1)
            if value is not None and isinstance(value.value, (int, float)):
                summary.configs.append(
                    ConfigDefault(cls.name, field, value.value, ctx.path, node.lineno, ctx.char_col(node.lineno, node.col_offset) + 1)
                )
    engine = engine_detect.collect(ctx.tree, ctx.path, ctx.source)
    if engine is not None:
        summary.facts[engine_detect.FACT] = engine
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


class ProjectIndex:
    """The merged summaries of every file linted in this run.

    Every question asked is recorded in ``queries``: the engine lints each file once
    against an empty index, then re-lints only the files that asked a question another
    file can answer (see :meth:`answers_any`), so most files are parsed once."""

    def __init__(self, summaries: Iterable[FileSummary] = ()):
        self.queries: list[tuple] = []
        self.summaries: dict[str, FileSummary] = {s.path: s for s in summaries}
        self._by_field: dict[str, list[ConfigDefault]] = {}
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

    def answers_any(self, queries: Iterable[Sequence], path: str) -> bool:
        """Whether another file than ``path`` answers one of ``queries``."""
        for query in queries:
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
