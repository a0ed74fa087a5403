"""Which module names a file has, and which files an import statement reaches.

Names are resolved against the project's import roots -- the folders a package layout
is based on -- never against arbitrary components of the absolute path: a checkout
cloned into a folder called ``amplint`` does not make ``fixtures/ops/model.py`` a
module of ``amplint``.  The roots of a file are

- the folder above its top-level regular package (the chain of folders with an
  ``__init__.py``), not walking above the config root;
- the config root (the folder of the ``pyproject.toml`` its settings came from, or the
  folder the run started in) and ``src/`` in it, which name namespace packages
  (folders without ``__init__.py``) the way ``python -m`` from that folder would.
"""
from __future__ import annotations

import os
from functools import lru_cache
from typing import Iterable


@lru_cache(maxsize=4096)
def _is_package(folder: str) -> bool:
    return os.path.isfile(os.path.join(folder, "__init__.py"))


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def import_roots(path: str, root: str) -> list[str]:
    """The folders on which ``path``'s importable names are based (absolute, most
    specific first)."""
    path, root = os.path.abspath(path), os.path.abspath(root)
    roots = []
    folder = os.path.dirname(path)
    if _is_package(folder):
        inside_root = _within(folder, root)
        while _is_package(folder) and not (inside_root and folder == root):
            parent = os.path.dirname(folder)
            if parent == folder:
                break
            folder = parent
        roots.append(folder)
    src = os.path.join(root, "src")
    for candidate in (src,) if _within(path, src) else (root,):  # a src layout: src/ is the root
        if candidate not in roots:
            roots.append(candidate)
    return [r for r in roots if _within(path, r) and path != r]


def module_names(path: str, root: str) -> set[str]:
    """Every dotted name ``path`` can be imported as (``pkg/__init__.py`` is ``pkg``)."""
    names = set()
    for base in import_roots(path, root):
        rel = os.path.splitext(os.path.relpath(os.path.abspath(path), base))[0]
        parts = rel.split(os.sep)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts and all(p.isidentifier() for p in parts):
            names.add(".".join(parts))
    return names


def imports_reach(imports: Iterable[str], path: str, root: str) -> bool:
    """Whether one of the dotted ``imports`` is ``path``'s module or one of its packages."""
    targets = set()
    for name in module_names(path, root):
        parts = name.split(".")
        targets.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return any(name in targets for name in imports)


def registration_reaches(registering: str, imports: Iterable[str], model: str, root: str) -> bool:
    """Whether registrations made when ``registering`` runs apply to ``model``: it sits in
    the model's folder or above (a package ``__init__``, a training script at the root),
    or it imports the model's module or one of its packages (``scripts/train.py`` doing
    ``from mypkg.models import XLNet``), resolved against the model's import roots."""
    reg_dir = os.path.dirname(os.path.abspath(registering))
    if os.path.abspath(model).startswith(reg_dir.rstrip(os.sep) + os.sep):
        return True
    return imports_reach(imports, model, root)
