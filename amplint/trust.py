"""What amplint agrees to run: local rules (``[tool.amplint] rule-paths``) and plugins
(the ``amplint.rules`` entry-point group) are Python code, so they load only when the
user allows it -- ``--allow-local-rules`` or ``AMPLINT_ALLOW_LOCAL_RULES=1`` -- never
because a file in the linted tree asks for it.  Even then a ``rule-paths`` folder loads
only from a config inside the repository the run starts in, and only from inside that
config's own folder.  Otherwise the rules are left out with a one-line warning.
"""
from __future__ import annotations

import functools
import os
from typing import Optional

ENV_VAR = "AMPLINT_ALLOW_LOCAL_RULES"
HOW_TO_ALLOW = f"pass --allow-local-rules or set {ENV_VAR}=1 to load them"


def allowed_by_env() -> bool:
    return os.environ.get(ENV_VAR, "").strip().lower() not in ("", "0", "false", "no")


def within(path: str, folder: str) -> bool:
    """``path`` is ``folder`` or inside it (both already resolved)."""
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def repository_root(start: Optional[str] = None) -> str:
    """The git work tree containing ``start`` (default: the current folder), else
    ``start`` itself: configs above it are not the project's."""
    from .ignorefiles import repository_root as git_work_tree

    start = os.path.realpath(start or os.getcwd())
    return git_work_tree(start) or start


@functools.lru_cache(maxsize=1)
def installed_plugins() -> tuple[str, ...]:
    """``name (distribution)`` of every ``amplint.rules`` entry point; reads metadata only
    (once per process: the installed distributions do not change during a run)."""
    from importlib.metadata import entry_points

    out = []
    for ep in entry_points(group="amplint.rules"):
        dist = getattr(getattr(ep, "dist", None), "name", None)
        out.append(f"{ep.name} ({dist})" if dist else ep.name)
    return tuple(sorted(set(out)))


NOT_ALLOWED = "not allowed"
OUTSIDE = "outside the repository"


def _shown(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        return path
    return path if rel.startswith(os.pardir) else rel


def not_loaded_warnings(configs: dict[str, str], plugins: list[str], repository: str) -> list[str]:
    """The warning lines for rules that were configured but not loaded (``configs``:
    config path -> NOT_ALLOWED or OUTSIDE; ``plugins``: entry points not loaded)."""
    lines = []
    refused = [_shown(p) for p, why in sorted(configs.items()) if why == NOT_ALLOWED]
    what = [f"rule-paths in {', '.join(refused)}"] if refused else []
    if plugins:
        what.append(f"plugin{'s' if len(plugins) > 1 else ''} {', '.join(plugins)}")
    if what:
        lines.append(f"amplint: warning: local rules not loaded (they run code): {'; '.join(what)}; {HOW_TO_ALLOW}")
    outside = [_shown(p) for p, why in sorted(configs.items()) if why == OUTSIDE]
    if outside:
        lines.append(f"amplint: warning: rule-paths in {', '.join(outside)} not loaded: "
                     f"a config outside the repository ({_shown(repository) or '.'}) never loads code")
    return lines
