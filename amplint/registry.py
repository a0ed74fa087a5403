"""Where rules come from: the bundled ``amplint.rules`` package (the top-level
``rules/`` folder, one file per rule), third-party packages through the
``amplint.rules`` entry-point group, and a project's own ``rule-paths`` folders (the
last two only when allowed: see amplint/trust.py).

Selection follows Ruff: ``select`` / ``ignore`` take codes or prefixes (``AMP1``),
``ALL`` selects everything including rules that are off by default, the longest
matching prefix wins, and with no ``select`` the rules on by default run.
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import pkgutil
import sys
from functools import lru_cache
from typing import Iterable

from . import trust
from .rule import Rule


class RuleLoadError(Exception):
    pass


def _rules_in_module(module) -> list[type[Rule]]:
    return [
        obj for obj in vars(module).values()
        if inspect.isclass(obj) and issubclass(obj, Rule) and obj.code and obj.__module__ == module.__name__
    ]


def _builtin_rules() -> list[type[Rule]]:
    import amplint.rules as package

    found = []
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        found.extend(_rules_in_module(importlib.import_module(f"{package.__name__}.{info.name}")))
    return found


def _entry_point_rules() -> list[type[Rule]]:
    from importlib.metadata import entry_points

    found = []
    for ep in entry_points(group="amplint.rules"):
        try:
            obj = ep.load()
        except Exception as exc:  # a broken plugin must not take the linter down silently
            raise RuleLoadError(f"entry point {ep.name!r} ({ep.value}) failed to load: {exc}") from exc
        if inspect.ismodule(obj):
            found.extend(_rules_in_module(obj))
        elif inspect.isclass(obj) and issubclass(obj, Rule):
            found.append(obj)
        else:
            raise RuleLoadError(f"entry point {ep.name!r} is neither a Rule subclass nor a module of rules")
    return found


def _local_rules(folder: str) -> list[type[Rule]]:
    """The rules of one ``rule-paths`` folder (already resolved and allowed by the config,
    see amplint/trust.py); a file that links out of the folder is not loaded."""
    if not os.path.isdir(folder):
        raise RuleLoadError(f"rule-paths: {folder}: no such folder")
    real_folder = os.path.realpath(folder)
    found = []
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".py") or name.startswith("_"):
            continue
        path = os.path.join(folder, name)
        if not trust.within(os.path.realpath(path), real_folder):
            raise RuleLoadError(f"rule-paths: {path}: links outside {folder}; local rules load only from inside it")
        mod_name = f"amplint_local_rules.{abs(hash(os.path.abspath(folder)))}.{name[:-3]}"
        spec = importlib.util.spec_from_file_location(mod_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            raise RuleLoadError(f"rule-paths: {path}: {type(exc).__name__}: {exc}") from exc
        found.extend(_rules_in_module(module))
    return found


@lru_cache(maxsize=None)
def all_rules(rule_paths: tuple[str, ...] = (), plugins: bool = False) -> tuple[type[Rule], ...]:
    """The bundled rules, plus the plugins when ``plugins`` and the local rules of
    ``rule_paths`` -- both run code, so the caller loads them only when allowed."""
    rules: dict[str, type[Rule]] = {}
    loaded = _entry_point_rules() if plugins else []
    for rule in _builtin_rules() + loaded + [r for p in rule_paths for r in _local_rules(p)]:
        other = rules.get(rule.code)
        if other is not None and other is not rule:
            raise RuleLoadError(f"two rules claim {rule.code}: {other.__module__}.{other.__name__} and {rule.__module__}.{rule.__name__}")
        rules[rule.code] = rule
    return tuple(sorted(rules.values(), key=lambda r: r.code))


@lru_cache(maxsize=None)
def rules_fingerprint(rule_paths: tuple[str, ...] = (), plugins: bool = False) -> str:
    """Changes when any rule may behave differently: the source files of the bundled rules
    and of the code they use (stat only, nothing imported), the local rule folders, and
    the installed plugins.  Part of the cache key, so editing a rule invalidates it."""
    import hashlib
    from importlib.metadata import entry_points

    import amplint
    import amplint.rules

    package = os.path.dirname(amplint.__file__)
    folders = [package, os.path.join(package, "analysis"), os.path.join(package, "amp"), *amplint.rules.__path__, *rule_paths]
    h = hashlib.sha256()
    for folder in folders:
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            if entry.name.endswith(".py"):
                st = entry.stat()
                h.update(f"{entry.path}:{st.st_mtime_ns}:{st.st_size}\n".encode())
    h.update(f"plugins={plugins}\n".encode())
    for ep in entry_points(group="amplint.rules") if plugins else ():
        version = getattr(ep.dist, "version", "") if getattr(ep, "dist", None) else ""
        h.update(f"{ep.name}={ep.value}@{version}\n".encode())
    return h.hexdigest()[:16]


def _match_length(code: str, patterns: Iterable[str]) -> int:
    """Length of the longest pattern that selects ``code`` (0: none; ALL counts as 1)."""
    best = 0
    for p in patterns:
        if p == "ALL":
            best = max(best, 1)
        elif code.startswith(p):
            best = max(best, len(p) + 1)
    return best


def is_selected(rule: type[Rule], select: Iterable[str], ignore: Iterable[str], extend_select: Iterable[str] = ()) -> bool:
    """Longest match wins between select and ignore; a prefix does not turn on a rule
    that is off by default (its full code or ALL does)."""
    patterns = tuple(select) + tuple(extend_select)
    chosen = _match_length(rule.code, patterns)
    if not rule.enabled_by_default and chosen > 1 and rule.code not in patterns:
        chosen = 0
    if not tuple(select) and rule.enabled_by_default:
        chosen = max(chosen, 1)
    return chosen > 0 and chosen > _match_length(rule.code, ignore)


def select_rules(rules: Iterable[type[Rule]], settings) -> list[type[Rule]]:
    return [r for r in rules if is_selected(r, settings.select, settings.ignore, settings.extend_select)]


#: the code of the engine's unused-suppression findings (``--report-unused-suppressions``);
#: no Rule class makes them, but selecting or ignoring the code is valid
UNUSED_SUPPRESSION = "AMP900"


def unknown_codes(patterns: Iterable[str], rules: Iterable[type[Rule]]) -> list[str]:
    """The patterns (codes or prefixes) that name none of ``rules`` nor AMP900."""
    codes = [r.code for r in rules] + [UNUSED_SUPPRESSION]
    return [p for p in patterns if p != "ALL" and not any(c.startswith(p) for c in codes)]
