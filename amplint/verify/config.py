"""``[tool.amplint.verify]``: targets and default options, so that CI runs ``amplint verify``
with no arguments::

    [tool.amplint.verify]
    opt-level = ["O1", "O2"]       # defaults for every target
    dtype = "fp16"
    steps = 3
    targets = [
        "tests/harness.py::tiny_gpt",
        { target = "models/attention.py::example", opt-level = ["O2"], tolerance = 0.05 },
    ]
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

from amplint.amp.policy import OPT_LEVELS as LEVELS
from amplint.config import ConfigError, read_pyproject

DTYPES = ("fp16", "bf16")  # runner.DTYPES maps them to torch dtypes

OPTION_KEYS = {
    "opt-level": "levels", "dtype": "dtype", "device": "device", "steps": "steps", "loss": "loss", "seed": "seed",
    "tolerance": "tolerance", "optimizer": "optimizer", "lr": "lr", "fix": "fix", "unsafe-fixes": "unsafe_fixes",
    "report": "report", "threads": "threads",
}
OPTIMIZERS = ("adamw", "adam", "sgd")


def parse_levels(value) -> tuple[str, ...]:
    """``"O1"``, ``"O1,O2"``, ``["O1", "O2"]`` -> ("O1", "O2"); raises ValueError on junk."""
    if isinstance(value, str):
        value = [value]
    out: list[str] = []
    for item in value:
        if not isinstance(item, str):
            raise ValueError(f"opt levels must be strings, not {item!r}")
        for part in item.replace(" ", ",").split(","):
            part = part.strip().upper()
            if not part:
                continue
            if part not in LEVELS:
                raise ValueError(f"unknown opt level {part!r} (choose from O0 O1 O2 O3; the letter O, not zero)")
            if part != "O0" and part not in out:
                out.append(part)
    return tuple(out)


def _check_option(key: str, value: Any, where: str) -> tuple[str, Any]:
    attr = OPTION_KEYS.get(key)
    if attr is None:
        import difflib

        close = [k for k in OPTION_KEYS if k.replace("-", "_") == key.replace("-", "_")] or \
            difflib.get_close_matches(key, list(OPTION_KEYS) + ["targets"], n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else f"; known keys: targets, {', '.join(OPTION_KEYS)}"
        raise ConfigError(f"[tool.amplint.verify] {where}unknown key {key!r}{hint}")

    def bad(reason):
        raise ConfigError(f"[tool.amplint.verify] {where}{key}: {reason}")

    if attr == "levels":
        try:
            value = parse_levels(value)
        except ValueError as exc:
            bad(str(exc))
    elif attr == "dtype" and value not in DTYPES:
        bad(f"must be one of {', '.join(DTYPES)}, not {value!r}")
    elif attr == "device" and value not in ("auto", "cpu", "cuda"):
        bad(f"must be auto, cpu or cuda, not {value!r}")
    elif attr in ("steps", "seed", "threads") and (isinstance(value, bool) or not isinstance(value, int) or value < (0 if attr == "seed" else 1)):
        bad(f"must be {'a positive' if attr in ('steps', 'threads') else 'a non-negative'} integer, not {value!r}")
    elif attr in ("tolerance", "lr") and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
        bad(f"must be a positive number, not {value!r}")
    elif attr in ("fix", "unsafe_fixes") and not isinstance(value, bool):
        bad(f"must be true or false, not {value!r}")
    elif attr in ("loss", "report") and not isinstance(value, str):
        bad(f"must be a string, not {value!r}")
    elif attr == "optimizer" and value not in OPTIMIZERS:
        bad(f"must be one of {', '.join(OPTIMIZERS)}, not {value!r}")
    return attr, value


def find_pyproject(start: str = ".", explicit: Optional[str] = None) -> Optional[Path]:
    if explicit:
        return Path(explicit).resolve()
    here = Path(start).resolve()
    for folder in (here, *here.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            table = read_pyproject(candidate)
            if table is not None:
                return candidate
    return None


def load(path: Optional[Path]) -> tuple[dict, list[tuple[str, dict]], Optional[str]]:
    """(default options, [(target spec, per-target options)], base folder) from a pyproject."""
    if path is None:
        return {}, [], None
    table = read_pyproject(path) or {}
    table.pop("__text__", None)
    verify = table.get("verify")
    base = str(path.parent)
    if verify is None:
        return {}, [], base
    if not isinstance(verify, dict):
        raise ConfigError("[tool.amplint.verify] must be a table", str(path))
    defaults: dict = {}
    targets: list[tuple[str, dict]] = []
    try:
        for key, value in verify.items():
            if key == "targets":
                if not isinstance(value, list):
                    raise ConfigError("[tool.amplint.verify] targets: must be a list of \"PATH::FACTORY\" strings or tables")
                for i, item in enumerate(value):
                    if isinstance(item, str):
                        targets.append((item, {}))
                    elif isinstance(item, dict):
                        item = dict(item)
                        spec = item.pop("target", None)
                        if not isinstance(spec, str):
                            raise ConfigError(f"[tool.amplint.verify] targets[{i}]: a table needs target = \"PATH::FACTORY\"")
                        opts = dict(_check_option(k, v, f"targets[{i}]: ") for k, v in item.items())
                        targets.append((spec, opts))
                    else:
                        raise ConfigError(f"[tool.amplint.verify] targets[{i}]: must be a string or a table, not {item!r}")
            else:
                attr, v = _check_option(key, value, "")
                defaults[attr] = v
    except ConfigError as exc:
        raise ConfigError(exc.reason, str(path)) from None
    return defaults, targets, base


def resolve_report_path(report: Optional[str], base: Optional[str]) -> Optional[str]:
    if not report:
        return None
    return report if os.path.isabs(report) or base is None else os.path.join(base, report)
