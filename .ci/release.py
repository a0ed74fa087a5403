"""Tag a release: ``python .ci/release.py [--version X.Y.Z] [--dry-run]``.

A release is one commit and one annotated tag ``v<version>`` on it:

1. the version is set in ``pyproject.toml`` and ``amplint/__init__.py`` (``--version``;
   without it, the version they already hold, which must agree);
2. the pre-commit snippets (README.md, docs/adoption.md) are pointed at ``rev: v<version>``,
   so the README names a tag that exists as soon as the release does;
3. the rule pages must be current (``python -m amplint.rule_docs --check``);
4. the commit ``release: v<version>`` is made (when anything changed) and tagged
   ``git tag -a v<version> -m "amplint <version>"``.

Refuses (exit 1) with uncommitted changes to tracked files, a version that is not X.Y.Z, or
a tag that exists already. Pushing is left to the maintainer: ``git push origin main
v<version>``. Run it on the main branch after the suite passed.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys

SNIPPETS = ("README.md", "docs/adoption.md")
_VERSION = re.compile(r"^\d+\.\d+\.\d+$")
_PYPROJECT_VERSION = re.compile(r'^(version = ")([^"]+)(")$', re.M)
_INIT_VERSION = re.compile(r'^(__version__ = ")([^"]+)(")$', re.M)
# the `rev:` line of a pre-commit snippet, whatever it names now
_REV = re.compile(r"^(\s*rev:\s*)\S.*$", re.M)


def git(root: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=check)


def _read(root: str, rel: str) -> str:
    with open(os.path.join(root, rel), encoding="utf-8") as fh:
        return fh.read()


def _write(root: str, rel: str, text: str) -> None:
    with open(os.path.join(root, rel), "w", encoding="utf-8", newline="\n") as fh:
        fh.write(text)


def release(root: str, version: str | None, dry_run: bool) -> int:
    if git(root, "status", "--porcelain", "--untracked-files=no").stdout.strip():
        print("release: the work tree has uncommitted changes; commit or stash them first", file=sys.stderr)
        return 1
    pyproject, init = _read(root, "pyproject.toml"), _read(root, "amplint/__init__.py")
    current = _PYPROJECT_VERSION.search(pyproject).group(2)
    if _INIT_VERSION.search(init).group(2) != current and version is None:
        print(f"release: pyproject.toml says {current} and amplint/__init__.py "
              f"{_INIT_VERSION.search(init).group(2)}; give --version", file=sys.stderr)
        return 1
    version = version or current
    if not _VERSION.match(version):
        print(f"release: {version!r} is not a version X.Y.Z", file=sys.stderr)
        return 1
    tag = f"v{version}"
    if git(root, "rev-parse", "-q", "--verify", f"refs/tags/{tag}", check=False).returncode == 0:
        print(f"release: the tag {tag} exists already", file=sys.stderr)
        return 1
    edits = {
        "pyproject.toml": _PYPROJECT_VERSION.sub(lambda m: m.group(1) + version + m.group(3), pyproject, count=1),
        "amplint/__init__.py": _INIT_VERSION.sub(lambda m: m.group(1) + version + m.group(3), init, count=1),
    }
    for rel in SNIPPETS:
        if os.path.exists(os.path.join(root, rel)):
            edits[rel] = _REV.sub(lambda m: f"{m.group(1)}{tag}", _read(root, rel))
    changed = [rel for rel, text in edits.items() if text != _read(root, rel)]
    check = subprocess.run([sys.executable, "-m", "amplint.rule_docs", "--check", "--root", root],
                           capture_output=True, text=True)
    if check.returncode != 0:
        print(f"release: rule pages out of date:\n{check.stderr}", file=sys.stderr, end="")
        return 1
    if dry_run:
        print(f"release: would set {', '.join(changed) or 'nothing'} to {version}, commit and tag {tag}")
        return 0
    for rel in changed:
        _write(root, rel, edits[rel])
    if changed:
        git(root, "add", *changed)
        git(root, "commit", "-q", "-m", f"release: {tag}")
    git(root, "tag", "-a", tag, "-m", f"amplint {version}")
    print(f"release: tagged {tag} at {git(root, 'rev-parse', '--short', 'HEAD').stdout.strip()}; "
          f"publish with `git push origin HEAD {tag}`")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", help="the new version, X.Y.Z (default: the one pyproject.toml holds)")
    parser.add_argument("--dry-run", action="store_true", help="say what would change; change nothing")
    parser.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    args = parser.parse_args(argv)
    return release(args.root, args.version, args.dry_run)


if __name__ == "__main__":
    sys.exit(main())
