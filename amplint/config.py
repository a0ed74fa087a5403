"""Settings: defaults, ``[tool.amplint]`` in the nearest pyproject.toml, CLI overrides.

Every key is validated here; a bad value raises :class:`ConfigError` with the file,
the line when it can be found, and the reason (the CLI turns it into exit code 2).
"""
from __future__ import annotations

import dataclasses
import fnmatch
import functools
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any, Optional

from . import trust
from .amp.policy import OPT_LEVELS
from .numerics import FORMATS, TARGETS, Format

DEVICES = ("cuda", "cpu", "any")
ENGINES = ("auto", "amplint", "apex", "torch")
FIX_STYLES = ("functional", "module")
SEVERITIES = ("error", "warning", "info")  # most severe first
CODE_RE = re.compile(r"^[A-Z]+[0-9]*$")

DEFAULT_EXCLUDE = (
    ".git", ".hg", ".svn", ".venv", "venv", ".env", "env", "__pycache__", "build", "dist",
    ".tox", ".nox", ".eggs", "*.egg-info", ".mypy_cache", ".pytest_cache", ".ruff_cache",
    ".amplint_cache", "node_modules", "site-packages",
)


class ConfigError(Exception):
    """A configuration problem: ``path:line: reason``."""

    def __init__(self, reason: str, path: Optional[str] = None, line: Optional[int] = None):
        self.reason, self.path, self.line = reason, path, line
        where = f"{path}:{line}: " if path and line else f"{path}: " if path else ""
        super().__init__(where + reason)


@dataclasses.dataclass(frozen=True)
class Settings:
    select: tuple[str, ...] = ()  # empty: every rule enabled by default
    ignore: tuple[str, ...] = ()
    extend_select: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: Ruff's semantics: ``exclude`` (config or --exclude) replaces the defaults,
    #: ``extend-exclude`` (config and --extend-exclude, both kept) adds to them
    exclude: tuple[str, ...] = DEFAULT_EXCLUDE
    extend_exclude: tuple[str, ...] = ()
    target: str = "fp16"
    opt_level: str = "O1"
    #: where the model runs under autocast: CUDA and CPU autocast upcast different ops
    device: str = "cuda"
    alignment: Optional[int] = None  # None: the target's Tensor Core alignment
    #: local rule folders to load: absolute, resolved against the config file, and empty
    #: unless local rules are allowed (see amplint/trust.py)
    rule_paths: tuple[str, ...] = ()
    #: load the plugins of the ``amplint.rules`` entry-point group (only when allowed)
    load_plugins: bool = False
    #: the mixed-precision engine: "auto" (read from the linted files, amplint/engine_detect.py),
    #: "amplint", "apex" or "torch".  A file is linted with :class:`FileSettings`, where
    #: ``engine`` is the op policy it resolved to
    engine: str = "auto"
    #: whether ``target`` was set (config or command line): auto then leaves it alone
    target_given: bool = False
    #: whether ``opt-level`` was set: auto's pure-half evidence (``model.half()``) leaves it alone then
    opt_level_given: bool = False
    fix_style: str = "functional"
    #: the lowest severity that fails the run (exit 1); lower ones are reported only
    fail_on: str = "warning"
    #: directory of the pyproject.toml the settings came from (resolves relative paths)
    root: str = "."
    config_path: Optional[str] = None

    @functools.cached_property
    def _fingerprint(self) -> str:
        data = dataclasses.asdict(self)
        data.pop("root"), data.pop("config_path"), data.pop("fail_on")  # fail_on decides the exit code only
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]

    def fingerprint(self) -> str:
        """Stable hash of everything that can change findings (the cache key uses it)."""
        return self._fingerprint

    def rules(self) -> list:
        """Every rule class these settings load: the bundled ones, the local rule folders
        and, where allowed, the plugins (selection not applied: ``registry.select_rules``).
        The one way to load them, so that no call site forgets the plugins."""
        from .registry import all_rules

        return all_rules(self.rule_paths, self.load_plugins)

    def effective_alignment(self) -> int:
        return self.alignment or FORMATS[self.target].alignment

    def ignored_for(self, path: str) -> tuple[str, ...]:
        rel = _relative(path, self.root)
        out: list[str] = []
        for pattern, codes in self.per_file_ignores:
            if _path_matches(rel, pattern):
                out.extend(codes)
        return tuple(out)

    def is_excluded(self, path: str, parents: bool = True) -> bool:
        """Whether an exclude pattern matches ``path`` (its path or its name), or with
        ``parents`` any folder above it.  A folder walk asks without ``parents``: it
        prunes excluded folders itself, and a folder named on the command line is
        linted even below an excluded one (Ruff's way)."""
        rel = _relative(path, self.root)
        patterns = self.exclude + self.extend_exclude
        if not parents:
            candidates = (rel, rel.rsplit("/", 1)[-1])
            return any(fnmatch.fnmatchcase(c, pattern.rstrip("/")) for pattern in patterns for c in candidates)
        return any(_path_matches(rel, pattern) for pattern in patterns)


@dataclasses.dataclass(frozen=True)
class FileSettings(Settings):
    """The settings one file is linted with: the user's :class:`Settings` resolved for that
    file by ``engine_detect.resolve`` (the only producer).  ``engine`` is the op policy
    ("amplint", which apex shares, or "torch"), ``target`` the file's target (auto may read
    it from the project), ``engine_configured`` what was asked, ``amp_module`` the ``amp``
    module fixes may import ("apex", "amplint", or None: none) and ``engine_origin``
    (path, line, column, note) where auto decided."""

    engine_configured: str = "auto"
    amp_module: Optional[str] = None
    engine_origin: Optional[tuple] = None

    @property
    def format(self) -> Format:
        """The target's format: its limits, alignment and names."""
        return FORMATS[self.target]

    @property
    def policy(self) -> str:
        """The op policy of :mod:`amplint.amp.policy` this file is judged under."""
        return self.engine

    @classmethod
    def of(cls, settings: Settings, **changes) -> "FileSettings":
        """``settings`` resolved: ``changes`` applied over its fields."""
        fields = {f.name: getattr(settings, f.name) for f in dataclasses.fields(settings)}
        return cls(**{**fields, **changes})


def _relative(path: str, root: str) -> str:
    try:
        return os.path.relpath(os.path.abspath(path), os.path.abspath(root)).replace(os.sep, "/")
    except ValueError:  # other drive on Windows
        return path.replace(os.sep, "/")


def _path_matches(rel: str, pattern: str) -> bool:
    """gitignore-like: a pattern matches the path, or any of its parent folders, or its name."""
    pattern = pattern.rstrip("/")
    parts = rel.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))] + parts
    return any(fnmatch.fnmatchcase(c, pattern) for c in candidates)


# --- loading -----------------------------------------------------------------------

_KEYS = {
    "select": "codes", "ignore": "codes", "extend-select": "codes", "per-file-ignores": "pfi",
    "exclude": "strings", "target": TARGETS, "opt-level": OPT_LEVELS, "device": DEVICES,
    "alignment": "alignment", "rule-paths": "strings", "engine": ENGINES, "fix-style": FIX_STYLES,
    "extend-exclude": "strings", "fail-on": SEVERITIES,
}
#: sub-tables other parts of amplint own (e.g. [tool.amplint.verify]); not settings here
_SUBTABLES = ("verify",)


def _line_of(text: str, key: str) -> Optional[int]:
    """Best-effort line of ``key =`` inside [tool.amplint] for error messages."""
    in_table = False
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("["):
            in_table = stripped.startswith("[tool.amplint")
        elif in_table and re.match(rf'^["\']?{re.escape(key)}["\']?\s*=', stripped):
            return number
    return None


def _key_line(text: str, key: str) -> Optional[int]:
    """The line of a top-level ``key =`` (before any table header)."""
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("["):
            return None
        if re.match(rf'^["\']?{re.escape(key)}["\']?\s*=', stripped):
            return number
    return None


def validate(table: dict[str, Any], path: Optional[str] = None, text: str = "") -> dict[str, Any]:
    """Check a ``[tool.amplint]`` table; return keyword arguments for :class:`Settings`."""
    out: dict[str, Any] = {}

    def fail(key: str, reason: str):
        raise ConfigError(f"[tool.amplint] {key}: {reason}", path, _line_of(text, key))

    for key, value in table.items():
        if key in _SUBTABLES:
            continue
        kind = _KEYS.get(key)
        if kind is None:
            close = [k for k in _KEYS if k.replace("-", "_") == key.replace("-", "_")]
            hint = f" (did you mean '{close[0]}'?)" if close else f"; known keys: {', '.join(_KEYS)}"
            fail(key, f"unknown key{hint}")
        attr = key.replace("-", "_")
        if isinstance(kind, tuple):
            if value not in kind:
                fail(key, f"must be one of {', '.join(kind)}, not {value!r}")
            out[attr] = value
        elif kind in ("codes", "strings"):
            if isinstance(value, str):
                value = [value]
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                fail(key, "must be a list of strings")
            if kind == "codes":
                bad = [v for v in value if not CODE_RE.match(v) and v != "ALL"]
                if bad:
                    fail(key, f"not a rule code or prefix: {', '.join(map(repr, bad))}")
            out[attr] = tuple(value)
        elif kind == "pfi":
            if not isinstance(value, dict):
                fail(key, 'must be a table of "glob" = ["CODE", ...]')
            items = []
            for pattern, codes in value.items():
                if isinstance(codes, str):
                    codes = [codes]
                if not isinstance(codes, list) or not all(isinstance(c, str) and CODE_RE.match(c) for c in codes):
                    fail(key, f"{pattern!r} must map to a list of rule codes")
                items.append((pattern, tuple(codes)))
            out[attr] = tuple(items)
        elif kind == "alignment":
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0 or value & (value - 1):
                fail(key, f"must be a positive power of two (8, 16, 64...), not {value!r}")
            out[attr] = value
    return out


def _check_codes_known(values: dict[str, Any], path: str, text: str, plugins: bool) -> None:
    """A code or prefix in ``select``/``ignore``/``extend-select``/``per-file-ignores``
    that names no rule is an error (``select = ["AMP999"]`` would turn the linter off).
    Loads the rules (and the config's rule-paths) only when the config names codes.
    The caller skips the check when local rules or plugins were withheld (not allowed):
    their codes cannot be known without running them."""
    lists = [(key, values.get(key.replace("-", "_"), ())) for key in ("select", "ignore", "extend-select")]
    lists += [(pattern, codes) for pattern, codes in values.get("per_file_ignores", ())]
    if not any(codes for _, codes in lists):
        return
    from .registry import RuleLoadError, all_rules, unknown_codes

    try:
        rules = all_rules(values.get("rule_paths", ()), plugins)
    except RuleLoadError:
        return  # reported where the rules are loaded for linting
    for where, codes in lists:
        bad = unknown_codes(codes, rules)
        if bad:
            key = where if where in ("select", "ignore", "extend-select") else "per-file-ignores"
            label = key if key == where else f"per-file-ignores {where!r}"
            line = _line_of(text, where) or _line_of(text, key)
            raise ConfigError(f"[tool.amplint] {label}: unknown rule code or prefix: {', '.join(bad)} "
                              f"(see `amplint rules`)", path, line)


def read_pyproject(path: Path) -> Optional[dict[str, Any]]:
    """The ``[tool.amplint]`` table of ``path`` (None when the file has none)."""
    from .reading import REPO_FILE_LIMIT, read_regular

    try:  # imported here: a run with no pyproject.toml above its files never needs it
        import tomllib
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    try:  # a regular file of a sane size only: a repository may commit a FIFO or a link to /dev/zero
        text = read_regular(str(path), limit=REPO_FILE_LIMIT).decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read: {exc}", str(path)) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"line (\d+)", str(exc))
        raise ConfigError(f"invalid TOML: {exc}", str(path), int(m.group(1)) if m else None) from None
    tool = data.get("tool", {})
    if not isinstance(tool, dict):  # `tool = 5`: the file is not ours to judge, but it cannot hold settings
        raise ConfigError("`tool` must be a table", str(path), _key_line(text, "tool"))
    table = tool.get("amplint")
    if table is None:
        return None
    if not isinstance(table, dict):
        raise ConfigError("[tool.amplint] must be a table", str(path))
    return {"__text__": text, **table}


class ConfigResolver:
    """Finds, per linted path, the nearest pyproject.toml with a [tool.amplint] table
    and builds its Settings with the CLI overrides on top.  Results are cached per folder."""

    def __init__(self, overrides: Optional[dict[str, Any]] = None, config_file: Optional[str] = None,
                 allow_local_rules: bool = False):
        self.overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
        self.config_file = config_file
        self.allow_local_rules = allow_local_rules
        #: the repository the run started in: configs above it never load local rules
        self.repository = trust.repository_root()
        #: config path -> why its rule-paths were not loaded (trust.NOT_ALLOWED / OUTSIDE)
        self.rules_not_loaded: dict[str, str] = {}
        self._by_dir: dict[str, Settings] = {}
        self._by_file: dict[str, Settings] = {}

    def _from_file(self, pyproject: Path, table: Optional[dict] = None) -> Settings:
        key = str(pyproject)
        if key not in self._by_file:
            table = dict(table if table is not None else read_pyproject(pyproject) or {})
            text = table.pop("__text__", "")
            values = validate(table, key, text)
            if values.get("rule_paths"):
                values["rule_paths"] = self._local_rule_paths(values["rule_paths"], pyproject, text)
            withheld = key in self.rules_not_loaded or (not self.allow_local_rules and trust.installed_plugins())
            if not withheld:
                _check_codes_known(values, key, text, self.allow_local_rules)
            self._by_file[key] = self._build(values, str(pyproject.parent), key)
        return self._by_file[key]

    def _local_rule_paths(self, paths: tuple[str, ...], pyproject: Path, text: str) -> tuple[str, ...]:
        """The folders of ``rule-paths`` to load, resolved against the config's folder:
        none unless local rules are allowed and the config is inside the repository (or
        named with --config); a folder outside the config's own tree is an error."""
        config = str(pyproject)
        if not self.allow_local_rules:
            self.rules_not_loaded[config] = trust.NOT_ALLOWED
            return ()
        folder = os.path.realpath(pyproject.parent)
        if self.config_file is None and not trust.within(folder, self.repository):
            self.rules_not_loaded[config] = trust.OUTSIDE
            return ()
        out = []
        for entry in paths:
            resolved = os.path.realpath(os.path.join(folder, entry))
            if not trust.within(resolved, folder):
                raise ConfigError(f"[tool.amplint] rule-paths: {entry!r} resolves outside this config's folder ({resolved}); "
                                  "local rules load only from inside it", config, _line_of(text, "rule-paths"))
            if not os.path.isdir(resolved):
                raise ConfigError(f"[tool.amplint] rule-paths: {entry!r}: no such folder", config, _line_of(text, "rule-paths"))
            out.append(resolved)
        return tuple(out)

    def _build(self, values: dict[str, Any], root: str, config_path: Optional[str]) -> Settings:
        extend = tuple(values.get("extend_exclude", ())) + tuple(self.overrides.get("extend_exclude", ()))
        values = {"load_plugins": self.allow_local_rules, **values, **self.overrides}
        if extend:  # the config's extend-exclude and --extend-exclude both apply
            values["extend_exclude"] = extend
        values["target_given"] = "target" in values
        values["opt_level_given"] = "opt_level" in values
        return Settings(root=root, config_path=config_path, **values)

    def defaults(self) -> Settings:
        """Built-in defaults with the command-line overrides, and no config file."""
        return self._build({}, os.getcwd(), None)

    def for_path(self, path: str) -> Settings:
        if self.config_file:
            return self._from_file(Path(self.config_file).resolve())
        quick = os.path.dirname(os.path.abspath(path)) if not os.path.isdir(path) else os.path.abspath(path)
        if quick in self._by_dir:
            return self._by_dir[quick]
        try:
            start = Path(path).resolve()
        except (OSError, RuntimeError):  # a symlink loop: discovery reports it; find the config by name
            start = Path(os.path.abspath(path))
        try:
            is_dir = start.is_dir()
        except OSError:  # under a folder that cannot be searched: discovery reports it
            is_dir = False
        directory = start if is_dir else start.parent
        key = str(directory)
        if key in self._by_dir:
            return self._by_dir[key]
        settings = None
        for folder in (directory, *directory.parents):
            candidate = folder / "pyproject.toml"
            try:
                present = candidate.is_file()
            except OSError:  # a folder that cannot be searched: discovery reports it, no config there
                present = False
            table = read_pyproject(candidate) if present and str(candidate) not in self._by_file else None
            if str(candidate) in self._by_file or table is not None:
                settings = self._from_file(candidate, table)
                break
        if settings is None:
            settings = self._build({}, os.getcwd(), None)
        self._by_dir[key] = self._by_dir[quick] = settings
        return settings
