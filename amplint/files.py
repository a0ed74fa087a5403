"""Finding, reading and (atomically) writing the files amplint lints.

A source file is read as bytes and decoded with its declared encoding (PEP 263 cookie
or BOM); the decoded text keeps its line endings, so fixes can be written back with
the same encoding, BOM and LF/CRLF style.
"""
from __future__ import annotations

import codecs
import errno
import dataclasses
import io
import os
import stat
import tempfile
import tokenize
from typing import Iterator, Optional

from .config import DEFAULT_EXCLUDE, _path_matches

PY_SUFFIXES = (".py", ".pyi")


class SourceError(Exception):
    """A file that cannot be linted: ``path:line:col: reason``."""

    def __init__(self, path: str, reason: str, line: int = 1, col: int = 1):
        self.path, self.reason, self.line, self.col = path, reason, line, col
        super().__init__(f"{path}:{line}:{col}: {reason}")

    def __reduce__(self):  # crosses process-pool boundaries: pickle the real arguments
        return (SourceError, (self.path, self.reason, self.line, self.col))


@dataclasses.dataclass
class SourceFile:
    path: str
    text: str
    encoding: str  # codec name, e.g. "utf-8", "utf-8-sig" (BOM), "latin-1"
    raw: bytes

    def encode(self, text: str) -> bytes:
        return text.encode(self.encoding)


def read_source(path: str, data: Optional[bytes] = None) -> SourceFile:
    """The decoded source of ``path``, or of ``data`` (read from stdin) under that name."""
    try:
        raw = read_regular(path) if data is None else data
    except IsADirectoryError:
        raise SourceError(path, "is a directory") from None
    except PermissionError:
        raise SourceError(path, "permission denied") from None
    except OSError as exc:
        raise SourceError(path, f"cannot read: {exc.strerror or exc}") from None
    if b"\0" in raw[:8192]:
        raise SourceError(path, "binary file (contains NUL bytes), not Python source")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
    except SyntaxError as exc:
        raise SourceError(path, f"bad encoding declaration: {exc.msg if hasattr(exc, 'msg') else exc}") from None
    try:
        codecs.lookup(encoding)
    except LookupError:
        raise SourceError(path, f"unknown encoding {encoding!r}") from None
    try:
        text = raw.decode(encoding)
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        col = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        hint = "" if encoding != "utf-8" else " (declare the encoding with a '# -*- coding: ...' line)"
        raise SourceError(path, f"not valid {encoding}: byte 0x{raw[exc.start]:02x}{hint}", line, col) from None
    if encoding == "utf-8" and raw.startswith(codecs.BOM_UTF8):
        encoding = "utf-8-sig"
        text = text.lstrip("\ufeff")
    return SourceFile(path, text, encoding, raw)


def read_regular(path: str) -> bytes:
    """The bytes of ``path``; ``OSError`` unless it is a regular file (or a link to one).
    A FIFO, socket or device is refused before it is opened: opening a FIFO for
    reading blocks until a writer appears, which would hang the whole run."""
    st = os.stat(path)
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, "is a directory", path)
    if not stat.S_ISREG(st.st_mode):
        kind = "FIFO" if stat.S_ISFIFO(st.st_mode) else "socket" if stat.S_ISSOCK(st.st_mode) else "device or special file"
        raise OSError(errno.EINVAL, f"not a regular file ({kind})", path)
    with open(path, "rb") as fh:
        return fh.read()


def write_atomic(path: str, data: bytes) -> None:
    """Replace ``path`` with ``data``: write a temporary file beside it, fsync, keep the
    permission bits, then rename over the original (readers see old or new, never half)."""
    directory = os.path.dirname(os.path.abspath(path))
    real = os.path.realpath(path)  # write through symlinks, keep the link
    try:
        mode = stat.S_IMODE(os.stat(real).st_mode)
    except OSError:
        mode = 0o644
    fd, tmp = tempfile.mkstemp(prefix=".amplint-", suffix=".tmp", dir=os.path.dirname(real) or directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, real)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _looks_like_python(path: str) -> bool:
    """An explicitly named file is linted when it has a Python suffix or a python shebang
    (hooks and shells pass whatever files they have; a README is not a parse error)."""
    if path.endswith(PY_SUFFIXES):
        return True
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return True  # a FIFO would block here: read_source refuses it with a reason
        with open(path, "rb") as fh:
            first = fh.readline(200)
    except OSError:
        return True  # let read_source report why it cannot be read
    return first.startswith(b"#!") and b"python" in first


def _as_typed(path: str) -> str:
    """``./src/model.py`` -> ``src/model.py``: paths are shown relative to the current
    folder as given, without a ``./`` prefix."""
    prefix = "." + os.sep
    while path.startswith(prefix) or path.startswith("./"):
        path = path[2:].lstrip("/" + os.sep) or "."
    return path


def discover(
    paths: list[str],
    is_excluded,
    extra_exclude=(),
    respect_gitignore: bool = True,
    force_exclude: bool = False,
) -> Iterator[tuple[str, Optional[SourceError]]]:
    """Yield (file, None) for each file to lint and (path, error) for bad paths.

    Folders are walked without following symlinked folders (no loops), skipping
    version-control, virtualenv, build and cache folders, the ``exclude`` patterns and
    (unless ``respect_gitignore`` is false) what ``.gitignore`` / ``.ignore`` files
    ignore.  Explicitly named files are linted whatever their suffix; the exclusions
    apply to them only with ``force_exclude`` (Ruff's ``--force-exclude``, for
    pre-commit, which passes every changed file by name).
    """
    from .ignorefiles import IgnoreFiles

    ignore_files = IgnoreFiles() if respect_gitignore else None
    seen: set[str] = set()
    excluded_dirs = DEFAULT_EXCLUDE + tuple(extra_exclude)
    for given in paths:
        given = _as_typed(given)
        if not os.path.lexists(given):
            yield given, SourceError(given, "no such file or directory")
            continue
        if os.path.isdir(given):
            if force_exclude and (is_excluded(given) or (
                    ignore_files is not None and ignore_files.ignored(given, True, os.path.dirname(os.path.abspath(given))))):
                continue

            def ignored(path: str, is_dir: bool) -> bool:
                return ignore_files is not None and ignore_files.ignored(path, is_dir, given)

            for root, dirs, files in os.walk(given, followlinks=False):
                dirs[:] = sorted(
                    d for d in dirs
                    if not any(_path_matches(d, p) for p in excluded_dirs)
                    and not is_excluded(_as_typed(os.path.join(root, d)))
                    and not os.path.islink(os.path.join(root, d))
                    and not ignored(os.path.join(root, d), True)
                )
                for name in sorted(files):
                    if not name.endswith(PY_SUFFIXES):
                        continue
                    full = _as_typed(os.path.join(root, name))
                    if os.path.islink(full) and not os.path.exists(full):
                        # checked before is_excluded: resolving a symlink loop raises
                        try:
                            excluded = is_excluded(full) or ignored(full, False)
                        except (OSError, RuntimeError):
                            excluded = False
                        if not excluded:
                            yield full, SourceError(full, "broken symbolic link (or a symlink loop)")
                        continue
                    if is_excluded(full) or ignored(full, False):
                        continue
                    key = os.path.realpath(full)
                    if key in seen:
                        continue
                    seen.add(key)
                    yield full, None
        else:
            if os.path.islink(given) and not os.path.exists(given):
                yield given, SourceError(given, "broken symbolic link (or a symlink loop)")
                continue
            if force_exclude and (is_excluded(given) or (
                    ignore_files is not None and ignore_files.ignored(given, False, os.path.dirname(os.path.abspath(given))))):
                continue
            if not _looks_like_python(given):
                continue
            key = os.path.realpath(given)
            if key not in seen:
                seen.add(key)
                yield given, None
