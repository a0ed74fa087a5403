"""What git's configuration says about ignored files, read without running git.

git ignores, besides the ``.gitignore`` files of the work tree, the patterns of
``$GIT_COMMON_DIR/info/exclude`` and of the file ``core.excludesFile`` names (default
``$XDG_CONFIG_HOME/git/ignore``, or ``~/.config/git/ignore``).  This module finds both
for a repository: the git folder (``.git``, or the one a ``.git`` file points at in a
linked worktree or submodule, and its ``commondir``) and ``core.excludesFile`` from the
configuration files git reads, in git's order (system, then global, then the
repository's; the last one that sets it wins), following ``[include] path`` and
``[includeIf "gitdir:..."]``.  Running ``git config`` instead would cost a process per run
and fail where git is not installed.
"""
from __future__ import annotations

import fnmatch
import os
import re
from typing import Iterator, Optional

from .reading import read_repo_text

_SECTION = re.compile(r'^\[\s*([A-Za-z0-9.-]+)(?:\s+"((?:[^"\\]|\\.)*)")?\s*\]\s*(.*)$')
_ESCAPES = {"n": "\n", "t": "\t", "b": "\b", "\\": "\\", '"': '"'}


def git_dirs(repository: str) -> tuple[Optional[str], Optional[str]]:
    """The git folder of the work tree ``repository`` and its common folder (where
    ``config`` and ``info/exclude`` live; the same folder except in a linked worktree)."""
    dot_git = os.path.join(repository, ".git")
    if os.path.isdir(dot_git):
        git_dir = dot_git
    else:
        try:
            first = (read_repo_text(dot_git).splitlines() or [""])[0].strip()
        except OSError:
            return None, None
        if not first.startswith("gitdir:"):
            return None, None
        git_dir = os.path.normpath(os.path.join(repository, first[len("gitdir:"):].strip()))
    common = git_dir
    try:
        first = (read_repo_text(os.path.join(git_dir, "commondir")).splitlines() or [""])[0].strip()
        common = os.path.normpath(os.path.join(git_dir, first))
    except OSError:
        pass
    return git_dir, common


def _xdg_config_home() -> str:
    return os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")


def _config_files(common_dir: Optional[str]) -> list[str]:
    """git's configuration files, lowest precedence first."""
    files = []
    if not os.environ.get("GIT_CONFIG_NOSYSTEM"):
        files.append(os.environ.get("GIT_CONFIG_SYSTEM") or "/etc/gitconfig")
    if "GIT_CONFIG_GLOBAL" in os.environ:
        files.append(os.environ["GIT_CONFIG_GLOBAL"])
    else:
        files += [os.path.join(_xdg_config_home(), "git", "config"), os.path.join(os.path.expanduser("~"), ".gitconfig")]
    if common_dir is not None:
        files.append(os.path.join(common_dir, "config"))
    return files


def _value(raw: str) -> str:
    """A value as git reads it: quotes removed, escapes applied, a comment cut off."""
    out, quoted, i = [], False, 0
    raw = raw.strip()
    while i < len(raw):
        c = raw[i]
        if c == "\\" and i + 1 < len(raw):
            out.append(_ESCAPES.get(raw[i + 1], raw[i + 1]))
            i += 2
            continue
        if c == '"':
            quoted = not quoted
        elif c in "#;" and not quoted:
            break
        else:
            out.append(c)
        i += 1
    return "".join(out).strip() if not quoted else "".join(out)


def _entries(path: str, git_dir: Optional[str], depth: int = 0) -> Iterator[tuple[str, str, str]]:
    """(section.subsection, key, value) of one config file, lowercased names, with its
    includes in place."""
    try:
        text = read_repo_text(path)
    except OSError:
        return
    text = re.sub(r"\\\r?\n", "", text)  # a backslash at the end of a line continues it
    section = ""
    for line in text.splitlines():
        line = line.strip()
        match = _SECTION.match(line)
        if match:
            name, sub, line = match.group(1).lower(), match.group(2), match.group(3).strip()
            section = name if sub is None else name + "." + re.sub(r"\\(.)", r"\1", sub)
        if not line or line[0] in "#;":
            continue
        key, equals, raw = line.partition("=")
        key = key.strip().lower()
        value = _value(raw) if equals else "true"  # a key alone is a boolean true
        if key == "path" and depth < 10 and _include_applies(section, git_dir):
            target = os.path.join(os.path.dirname(path), os.path.expanduser(value))
            yield from _entries(target, git_dir, depth + 1)
            continue
        yield section, key, value


def _include_applies(section: str, git_dir: Optional[str]) -> bool:
    """``[include]`` always; ``[includeIf "gitdir:PATTERN"]`` (``gitdir/i:`` ignoring case)
    when the repository's git folder matches; other conditions are not evaluated."""
    if section == "include":
        return True
    if not section.startswith("includeif.") or git_dir is None:
        return False
    condition = section[len("includeif."):]
    kind, _, pattern = condition.partition(":")
    if kind not in ("gitdir", "gitdir/i"):
        return False
    pattern = os.path.expanduser(pattern)
    if not pattern.startswith(("/", "./")):
        pattern = "**/" + pattern
    if pattern.endswith("/"):
        pattern += "**"
    subject = git_dir.rstrip("/") + "/"
    if kind == "gitdir/i":
        pattern, subject = pattern.lower(), subject.lower()
    # fnmatch's * crosses folders, which is what ** means here
    return fnmatch.fnmatchcase(subject, pattern.replace("**", "*")) or fnmatch.fnmatchcase(subject.rstrip("/"), pattern.replace("**", "*"))


def excludes_file(repository: str) -> Optional[str]:
    """The file of ignore patterns ``core.excludesFile`` names for ``repository`` (``~``
    expanded; relative to the work tree), or git's default when it is not set."""
    git_dir, common = git_dirs(repository)
    value = None
    for path in _config_files(common):
        for section, key, found in _entries(path, git_dir):
            if section == "core" and key == "excludesfile":
                value = found
    if value is None:
        return os.path.join(_xdg_config_home(), "git", "ignore")
    if not value:
        return None
    return os.path.join(repository, os.path.expanduser(value))
