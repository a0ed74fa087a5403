"""``.gitignore`` and ``.ignore`` files, as git (and ripgrep) read them.

Every folder may hold a ``.gitignore`` and an ``.ignore`` (same syntax; ``.ignore``
wins over ``.gitignore`` in the same folder); at the repository root, the file git's
``core.excludesFile`` names (default ``$XDG_CONFIG_HOME/git/ignore``) comes first, then
``info/exclude`` of the git folder (both found by amplint/gitconfig.py, without running
git).  A pattern is relative to the folder of its file;
the deepest file that has a matching pattern decides, and within a file the last
matching pattern (``!pattern`` re-includes).  The files are read from the repository
root (the nearest folder above with a ``.git``) down; outside a repository, from the
folder being walked down.  Pattern matching -- anchoring, ``**``, dir-only ``name/``,
negation, escapes -- is ``pathspec``'s ``GitIgnoreSpec``, which follows git's rules.

A folder that is ignored is not entered, so a file in it cannot be re-included (as in
git).  As git does while it walks, a path is matched by itself -- a pattern matches the
path, not a folder above it (the walk never entered those) -- so ``dir/**`` ignores
what is inside ``dir`` but not ``dir`` itself, and ``!dir/keep.py`` re-includes that file.
"""
from __future__ import annotations

import os
from typing import Optional

IGNORE_FILES = (".gitignore", ".ignore")  # later wins


def repository_root(folder: str) -> Optional[str]:
    """The nearest folder at or above ``folder`` holding a ``.git`` (None: not in a
    repository).  ``folder`` is taken as given (made absolute, links not resolved)."""
    folder = os.path.abspath(folder)
    while True:
        if os.path.exists(os.path.join(folder, ".git")):
            return folder
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent


def _read_lines(path: str) -> list[str]:
    """The lines of an ignore file; none when it is not a regular file of a sane size (a
    repository can commit ``.gitignore`` as a FIFO or a link to ``/dev/zero``)."""
    from .reading import read_repo_text

    try:
        return read_repo_text(path).splitlines()
    except OSError:
        return []


class IgnoreFiles:
    """Answers "is this path ignored?" for paths under the folders it was asked about."""

    def __init__(self):
        self._specs: dict[str, object] = {}  # folder -> GitIgnoreSpec or None
        #: walk root -> (where its ignore files start, the repository root or None)
        self._roots: dict[str, tuple[str, Optional[str]]] = {}
        self._chains: dict[str, list] = {}  # folder -> the specs that apply in it, deepest first

    def _spec(self, folder: str, repository: Optional[str]):
        if folder not in self._specs:
            lines: list[str] = []
            if folder == repository:  # git's order: lowest precedence first
                from .gitconfig import excludes_file, git_dirs

                personal = excludes_file(repository)
                if personal is not None:
                    lines += _read_lines(personal)
                common = git_dirs(repository)[1]
                if common is not None:
                    lines += _read_lines(os.path.join(common, "info", "exclude"))
            for name in IGNORE_FILES:
                lines += _read_lines(os.path.join(folder, name))
            spec = None
            if any(line.strip() and not line.startswith("#") for line in lines):
                import pathspec  # only when there is something to match

                spec = pathspec.GitIgnoreSpec.from_lines(lines)
            self._specs[folder] = spec
        return self._specs[folder]

    def _chain(self, folder: str, top: str, repository: Optional[str]) -> list:
        """The (folder, spec) pairs that apply to files in ``folder``, deepest first."""
        chain = self._chains.get(folder)
        if chain is None:
            above = [] if folder == top or os.path.dirname(folder) == folder else self._chain(os.path.dirname(folder), top, repository)
            spec = self._spec(folder, repository)
            chain = self._chains[folder] = ([(folder, spec)] if spec is not None else []) + above
        return chain

    def ignored(self, path: str, is_dir: bool, walk_root: str, parents: bool = False) -> bool:
        """Whether ``path`` (found while walking ``walk_root``) is ignored; with
        ``parents``, also when a folder above it (up to where the ignore files start) is:
        for a path named on the command line with --force-exclude, which no walk reached."""
        path = os.path.abspath(path)
        found = self._roots.get(walk_root)
        if found is None:
            repository = repository_root(walk_root)
            found = self._roots[walk_root] = (repository or os.path.abspath(walk_root), repository)
        top, repository = found
        if parents:
            folder = os.path.dirname(path)
            above = []
            while folder.startswith(top) and len(folder) > len(top):
                above.append(folder)
                folder = os.path.dirname(folder)
            if any(self._decide(f, True, top, repository) for f in reversed(above)):
                return True
        return self._decide(path, is_dir, top, repository)

    def _decide(self, path: str, is_dir: bool, top: str, repository: Optional[str]) -> bool:
        for folder, spec in self._chain(os.path.dirname(path), top, repository):
            # the deepest file with a matching pattern decides
            rel = path[len(folder):].lstrip(os.sep).replace(os.sep, "/")
            decision = _decision(spec, rel, is_dir)
            if decision is not None:
                return decision
        return False


def _decision(spec, rel: str, is_dir: bool) -> Optional[bool]:
    """The last pattern of ``spec`` that matches ``rel`` itself: True ignores, False
    re-includes, None no pattern matches.  pathspec's regexes also match what lies
    below a matched folder (``dir/`` matches ``dir/x.py``); that is cut off here by
    asking for a match that ends where the path ends (a folder with its ``/``).  A
    pattern ending in ``/**`` matches only what is strictly inside its folder (``/**/``:
    the folders inside it)."""
    decision = None
    target = rel + "/" if is_dir else rel
    for pattern in spec.patterns:
        if pattern.include is None or pattern.regex is None:
            continue
        text = pattern.pattern.rstrip()
        if text.endswith(("/**", "/**/")):
            # rel without the folder's "/": the folder itself does not match
            hit = (is_dir or not text.endswith("/")) and pattern.regex.search(rel) is not None
        else:
            hit = _anchored(pattern.regex).search(target) is not None
        if hit:
            decision = pattern.include
    return decision


_ANCHORED: dict = {}


def _anchored(regex):
    """``regex`` that must end where the path ends."""
    out = _ANCHORED.get(regex)
    if out is None:
        import re

        out = _ANCHORED[regex] = re.compile(f"(?:{regex.pattern})\\Z", regex.flags)
    return out
