"""Finding, reading and (atomically) writing the files amplint lints.

A source file is read as bytes and decoded with its declared encoding (PEP 263 cookie
or BOM); the decoded text keeps its line endings, so fixes can be written back with
the same encoding, BOM and LF/CRLF style.
"""
from __future__ import annotations

import codecs
import dataclasses
import errno
import hashlib
import io
import os
import stat
import tokenize
from typing import Iterator, Optional


PY_SUFFIXES = (".py", ".pyi", ".ipynb")  # .ipynb: amplint/notebook.py


class SourceError(Exception):
    """A file that cannot be linted: ``path:line:col: reason``.  ``severity`` "warning"
    marks a path that was skipped for a harmless reason (it does not fail the run)."""

    def __init__(self, path: str, reason: str, line: int = 1, col: int = 1, severity: str = "error"):
        self.path, self.reason, self.line, self.col, self.severity = path, reason, line, col, severity
        super().__init__(f"{path}:{line}:{col}: {reason}")

    def __reduce__(self):  # crosses process-pool boundaries: pickle the real arguments
        return (SourceError, (self.path, self.reason, self.line, self.col, self.severity))


@dataclasses.dataclass(frozen=True)
class FileIdentity:
    """What a file was when it was read: ``fix`` writes only over that very file."""

    device: int
    inode: int
    size: int
    mtime_ns: int
    sha256: str

    @classmethod
    def of(cls, st: os.stat_result, data: bytes) -> "FileIdentity":
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, hashlib.sha256(data).hexdigest())


@dataclasses.dataclass
class SourceFile:
    path: str
    text: str
    encoding: str  # codec name, e.g. "utf-8", "utf-8-sig" (BOM), "latin-1"
    raw: bytes
    identity: Optional[FileIdentity] = None
    #: owner and group of the file as read (a fix keeps them)
    owner: Optional[tuple[int, int]] = None

    def encode(self, text: str) -> bytes:
        """``text`` in the file's encoding; SourceError when that encoding cannot keep
        the bytes outside the edits as they are (see :func:`keeps_bytes`)."""
        try:
            data = text.encode(self.encoding)
        except UnicodeError as exc:
            raise SourceError(self.path, f"cannot write the fixed code in encoding {self.encoding!r}: {exc}") from None
        if not keeps_bytes(self.encoding, text, data):
            raise SourceError(self.path, f"cannot fix: the fixed code does not round-trip through encoding "
                                         f"{self.encoding!r}; file left unchanged")
        return data


#: encodings whose bytes for a character never depend on its neighbours (checked cheaply)
_CONTEXT_FREE = {"utf-8", "utf-8-sig", "ascii", "latin-1", "iso8859-1"}


def keeps_bytes(encoding: str, text: str, data: bytes) -> bool:
    """Whether ``data`` is ``text`` in ``encoding`` such that every character has the
    bytes it would have alone: then an edit changes the bytes of the edited characters
    only, and the rest of the file stays byte for byte.  Stateful codecs (utf-7, the
    iso-2022 family), escaping codecs (unicode_escape) and bytes-to-bytes codecs (rot13,
    base64) fail; so does a text that does not decode back to itself."""
    try:
        info = codecs.lookup(encoding)
    except LookupError:
        return False
    if not getattr(info, "_is_text_encoding", True):
        return False
    try:
        if data.decode(encoding) != text:
            return False
    except (UnicodeError, LookupError, ValueError):
        return False
    if info.name in _CONTEXT_FREE:
        return True
    # each distinct character encoded alone, then the text rebuilt from those pieces
    try:
        alone = {c: c.encode(encoding) for c in set(text)}
    except (UnicodeError, LookupError, ValueError):
        return False
    return b"".join(map(alone.__getitem__, text)) == data


@dataclasses.dataclass
class NotebookSource(SourceFile):
    """A Jupyter notebook: ``text`` is its code cells as one module, and :meth:`encode`
    writes a fixed module back into the cells it changed (amplint/notebook.py)."""

    notebook: object = None

    def encode(self, text: str) -> bytes:
        from .notebook import NotebookError

        try:
            return self.notebook.encode(text)
        except NotebookError as exc:
            raise SourceError(self.path, exc.reason) from None


def read_source(path: str, data: Optional[bytes] = None) -> SourceFile:
    """The decoded source of ``path``, or of ``data`` (read from stdin) under that name."""
    try:
        raw, st = read_regular(path, with_stat=True) if data is None else (data, None)
    except IsADirectoryError:
        raise SourceError(path, "is a directory") from None
    except PermissionError:
        raise SourceError(path, "permission denied") from None
    except OSError as exc:
        raise SourceError(path, f"cannot read: {exc.strerror or exc}") from None
    if b"\0" in raw[:8192]:
        raise SourceError(path, "binary file (contains NUL bytes), not Python source")
    if path.endswith(".ipynb"):  # its code cells as one module
        from .notebook import Notebook, NotebookError

        try:
            notebook = Notebook(raw)
        except NotebookError as exc:
            raise SourceError(path, exc.reason, exc.line, exc.col) from None
        if st is None:
            return NotebookSource(path, notebook.text, "utf-8", raw, notebook=notebook)
        return NotebookSource(path, notebook.text, "utf-8", raw, FileIdentity.of(st, raw), (st.st_uid, st.st_gid), notebook)
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
    except SyntaxError as exc:
        raise SourceError(path, f"bad encoding declaration: {exc.msg if hasattr(exc, 'msg') else exc}") from None
    try:
        info = codecs.lookup(encoding)
    except LookupError:
        raise SourceError(path, f"unknown encoding {encoding!r}") from None
    if not getattr(info, "_is_text_encoding", True):  # rot13, base64, hex: bytes-to-bytes transforms
        raise SourceError(path, f"encoding {encoding!r} is not a text encoding")
    try:
        text = raw.decode(encoding)
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        col = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        hint = "" if encoding != "utf-8" else " (declare the encoding with a '# -*- coding: ...' line)"
        raise SourceError(path, f"not valid {encoding}: byte 0x{raw[exc.start]:02x}{hint}", line, col) from None
    except (UnicodeError, LookupError, ValueError) as exc:  # punycode, idna...: codecs that fail their own way
        raise SourceError(path, f"cannot decode as {encoding!r}: {exc or type(exc).__name__}") from None
    if encoding == "utf-8" and raw.startswith(codecs.BOM_UTF8):
        encoding = "utf-8-sig"
        text = text.lstrip("\ufeff")
    if st is None:  # from stdin: there is no file to compare with or to write
        return SourceFile(path, text, encoding, raw)
    return SourceFile(path, text, encoding, raw, FileIdentity.of(st, raw), (st.st_uid, st.st_gid))


def check_writable(source: SourceFile) -> None:
    """Refuse, before any work, to fix a file whose encoding cannot keep the bytes outside
    the edits (``# coding: unicode_escape`` would come back on one physical line, utf-7
    with other shift sequences)."""
    if isinstance(source, NotebookSource):
        return  # its encode() writes only the edited cells back (amplint/notebook.py)
    if not keeps_bytes(source.encoding, source.text, source.raw):
        raise SourceError(source.path, f"cannot fix: encoding {source.encoding!r} does not keep the bytes outside "
                                       f"an edit (decoding and re-encoding changes the file); file left unchanged")


# the bounded reader lives in its own module so that ignorefiles and gitconfig, which
# discovery imports, can read files without importing discovery (no import cycle)
from .reading import REPO_FILE_LIMIT, _kind, read_regular, read_repo_text  # noqa: E402,F401


class FileChangedError(OSError):
    """The file is no longer what ``fix`` read: written meanwhile, replaced or deleted."""


def unchanged_since(path: str, identity: FileIdentity) -> bool:
    """Whether ``path`` is still the very file (same inode) with the very bytes that were
    read: size, modification time and a hash of the content must all agree."""
    try:
        data, st = read_regular(path, with_stat=True)
    except OSError:
        return False
    return FileIdentity.of(st, data) == identity


class UnsafeWriteError(OSError):
    """amplint refuses to write there: a read-only file, a link out of the tree, a
    dangling link, or something that is not a regular file."""


def _tree_of(path: str) -> str:
    """The tree a file at ``path`` belongs to: its git work tree, else its own folder
    (links are not resolved).  A symbolic link there may point only inside it."""
    from .ignorefiles import repository_root

    folder = os.path.dirname(os.path.abspath(path))
    return os.path.realpath(repository_root(folder) or folder)


def _target(path: str, create: bool) -> tuple[str, Optional[os.stat_result]]:
    """The file a write to ``path`` lands on (a link is followed only to a file inside
    its tree) and its ``stat`` (None: it does not exist and ``create`` allows making it)."""
    try:
        lst = os.lstat(path)
    except FileNotFoundError:
        if create:
            return path, None
        raise FileChangedError(errno.ENOENT, "changed while amplint was fixing it; left unchanged", path) from None
    if not stat.S_ISLNK(lst.st_mode):
        return path, lst
    try:
        st = os.stat(path)  # the kernel follows /proc's magic links (/dev/stdout) too
    except OSError:
        raise UnsafeWriteError(errno.ELOOP, "is a symbolic link to a missing file (or a loop); amplint does not "
                                            "create its target", path) from None
    if not stat.S_ISREG(st.st_mode):
        return path, st  # a link to a terminal or a pipe (-o /dev/stdout): a stream, not a file
    real = os.path.realpath(path)
    tree = _tree_of(path)
    from .trust import within

    if not within(real, tree):
        raise UnsafeWriteError(errno.EXDEV, f"is a symbolic link to {real}, outside this tree ({tree}); left unchanged",
                               path)
    return real, st


def write_file(path: str, data: bytes, expected: Optional[SourceFile] = None, create: bool = False) -> None:
    """The one way amplint writes a user's file (fixes, ``--add-noqa``, the baseline,
    ``-o`` reports).  It replaces ``path`` with ``data``: a temporary file beside it,
    fsync, the permission bits (and owner and group where permitted) kept, then a rename
    over the original (readers see old or new, never half).

    It refuses (:class:`UnsafeWriteError`) a read-only file, a symbolic link to a file
    outside the link's tree, a dangling link (its target is never created) and, unless
    ``create``, anything not a regular file; with ``create`` a missing file is made, and
    an existing FIFO or terminal (``-o /dev/stdout``) is written as a stream.

    With ``expected`` (the file as it was read) the encoding must keep every byte
    outside the edits (:func:`check_writable`), and the file is compared with it just
    before the rename and left alone -- :class:`FileChangedError` -- when it was edited,
    replaced or deleted meanwhile: an editor's save during a long ``fix`` is never lost,
    and a deleted file is not re-created.  (What remains is the moment between that
    comparison and the rename.)"""
    if expected is not None and expected.raw:
        check_writable(expected)
    real, st = _target(path, create or expected is None)
    if st is not None and not stat.S_ISREG(st.st_mode):
        if not create:
            raise UnsafeWriteError(errno.EINVAL, f"not a regular file ({_kind(st.st_mode)}); left unchanged", path)
        fd = os.open(real, os.O_WRONLY | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0))
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        return
    if st is not None and (not stat.S_IMODE(st.st_mode) & 0o222 or not os.access(real, os.W_OK)):
        raise UnsafeWriteError(errno.EACCES, "read-only file; left unchanged", path)
    mode, owner = (stat.S_IMODE(st.st_mode), (st.st_uid, st.st_gid)) if st is not None else (0o666 & ~_umask(), None)
    if expected is not None and expected.owner is not None:
        owner = expected.owner
    if st is not None and st.st_nlink > 1:
        _write_in_place(real, path, data, st, expected)
        return
    import tempfile  # here: only fix writes files, and tempfile's import (random, ...) is a check's cost

    directory = os.path.dirname(os.path.abspath(real))
    fd, tmp = tempfile.mkstemp(prefix=".amplint-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if owner is not None:
            _chown_where_permitted(tmp, *owner)
        os.chmod(tmp, mode)  # after chown, which may clear setuid/setgid bits
        if expected is not None and expected.identity is not None and not unchanged_since(real, expected.identity):
            raise FileChangedError(errno.EAGAIN, "changed while amplint was fixing it; left unchanged", path)
        if st is None and os.path.lexists(real):  # appeared meanwhile (a link planted after the check)
            raise UnsafeWriteError(errno.EEXIST, "appeared while amplint was writing it; left unchanged", path)
        os.replace(tmp, real)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _write_in_place(real: str, path: str, data: bytes, st: os.stat_result, expected: Optional[SourceFile]) -> None:
    """Write a file with more than one hard link over its own inode, as Black and Ruff
    always do: a rename would give ``path`` a new inode and leave every other name with the
    old content.  The trade-off: this write is not atomic -- a reader during it can see a
    mix of old and new, and a crash in the middle can leave it half written.  What is kept:
    the concurrent-change check, now on the open descriptor (the very inode written); the
    space is reserved before the first byte changes (a full disk leaves the file as it
    was); and when a write fails half way the old bytes are written back."""
    flags = os.O_RDWR | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    fd = os.open(real, flags | os.O_NONBLOCK)
    try:
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) or not stat.S_ISREG(now.st_mode):
            raise FileChangedError(errno.EAGAIN, "changed while amplint was fixing it; left unchanged", path)
        old = _read_all(fd, now.st_size)
        if expected is not None and expected.identity is not None and FileIdentity.of(now, old) != expected.identity:
            raise FileChangedError(errno.EAGAIN, "changed while amplint was fixing it; left unchanged", path)
        if len(data) > len(old) and hasattr(os, "posix_fallocate"):
            try:
                os.posix_fallocate(fd, 0, len(data))
            except OSError as exc:
                if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, getattr(errno, "ENOTSUP", errno.EOPNOTSUPP)):
                    os.ftruncate(fd, len(old))  # nothing was written: only the size may have grown
                    raise
        try:
            _write_all(fd, data)
            os.ftruncate(fd, len(data))
            os.fsync(fd)
        except OSError:
            try:  # put the old bytes back: a failed fix leaves the file as it was
                _write_all(fd, old)
                os.ftruncate(fd, len(old))
            except OSError:
                pass
            raise
    finally:
        os.close(fd)


def _read_all(fd: int, size: int) -> bytes:
    chunks, got = [], 0
    while True:
        chunk = os.pread(fd, max(size - got, 1 << 16), got)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        got += len(chunk)


def _write_all(fd: int, data: bytes) -> None:
    view, done = memoryview(data), 0
    while done < len(data):
        done += os.pwrite(fd, view[done:], done)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


#: the name the fix engine has always used
write_atomic = write_file


def _chown_where_permitted(path: str, uid: int, gid: int) -> None:
    """Give the new file the original's owner and group: root can; another user can
    still keep the group when they belong to it; otherwise the file stays theirs."""
    st = os.stat(path)
    if (st.st_uid, st.st_gid) == (uid, gid):
        return
    for new_uid, new_gid in ((uid, gid), (-1, gid)):
        try:
            os.chown(path, new_uid, new_gid)
            return
        except PermissionError:
            continue
        except OSError:
            return


def _looks_like_python(path: str) -> bool:
    """An explicitly named file is linted when it has a Python suffix or a python shebang
    (hooks and shells pass whatever files they have; a README is not a parse error)."""
    if path.endswith(PY_SUFFIXES):
        return True
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError:
        return True  # let read_source report why it cannot be read
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return True  # read_source refuses it with a reason
        first = os.read(fd, 200).split(b"\n", 1)[0]
    except OSError:
        return True
    finally:
        os.close(fd)
    return first.startswith(b"#!") and b"python" in first


def _lstat_error(path: str) -> Optional[SourceError]:
    """Why a named path cannot be linted at all (None: it exists)."""
    try:
        os.lstat(path)
    except FileNotFoundError:
        return SourceError(path, "no such file or directory")
    except PermissionError:
        return SourceError(path, "permission denied (a folder above it cannot be searched)")
    except OSError as exc:
        return SourceError(path, f"cannot read: {exc.strerror or exc}")
    return None


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
    respect_gitignore: bool = True,
    force_exclude: bool = False,
) -> Iterator[tuple[str, Optional[SourceError]]]:
    """Yield (file, None) for each file to lint and (path, error) for bad paths.

    Folders are walked without following symlinked folders (no loops), skipping what
    the ``exclude`` patterns match (by default version-control, virtualenv, build and
    cache folders; ``is_excluded(path, parents)``) and (unless ``respect_gitignore`` is
    false) what ``.gitignore`` / ``.ignore`` files ignore; a folder that cannot be
    listed is an error.  Explicitly named files are linted when they look like Python
    (suffix or shebang), any other named file gets a warning; the exclusions apply to
    named paths, and the folders above them, only with ``force_exclude`` (Ruff's
    ``--force-exclude``, for pre-commit, which passes every changed file by name): a
    folder named on the command line is walked even inside an ignored or excluded one.
    """
    from .ignorefiles import IgnoreFiles

    ignore_files = IgnoreFiles() if respect_gitignore else None
    seen: set[str] = set()

    def force_excluded(path: str, is_dir: bool) -> bool:
        return force_exclude and (is_excluded(path) or (
            ignore_files is not None and ignore_files.ignored(path, is_dir, os.path.dirname(os.path.abspath(path)),
                                                              parents=True)))

    for given in paths:
        given = _as_typed(given)
        error = _lstat_error(given)
        if error is not None:
            yield given, error
            continue
        if os.path.isdir(given):
            if force_excluded(given, True):
                continue

            def ignored(path: str, is_dir: bool) -> bool:
                return ignore_files is not None and ignore_files.ignored(path, is_dir, given)

            unlisted: list[OSError] = []
            for root, dirs, files in os.walk(given, followlinks=False, onerror=unlisted.append):
                yield from _folder_errors(unlisted)
                dirs[:] = sorted(
                    d for d in dirs
                    if not is_excluded(_as_typed(os.path.join(root, d)), parents=False)
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
                            excluded = is_excluded(full, parents=False) or ignored(full, False)
                        except (OSError, RuntimeError):
                            excluded = False
                        if not excluded:
                            yield full, SourceError(full, "broken symbolic link (or a symlink loop)")
                        continue
                    if is_excluded(full, parents=False) or ignored(full, False):
                        continue
                    key = os.path.realpath(full)
                    if key in seen:
                        continue
                    seen.add(key)
                    yield full, None
            yield from _folder_errors(unlisted)
        else:
            if os.path.islink(given) and not os.path.exists(given):
                yield given, SourceError(given, "broken symbolic link (or a symlink loop)")
                continue
            if force_excluded(given, False):
                continue
            if not _looks_like_python(given):
                yield given, SourceError(given, "not linted: not a Python file (no .py/.pyi suffix or python shebang)",
                                         severity="warning")
                continue
            key = os.path.realpath(given)
            if key not in seen:
                seen.add(key)
                yield given, None


def _folder_errors(unlisted: list) -> Iterator[tuple[str, SourceError]]:
    """The folders ``os.walk`` could not list, as errors (and empty the list)."""
    while unlisted:
        exc = unlisted.pop(0)
        where = _as_typed(exc.filename or ".")
        reason = "permission denied" if isinstance(exc, PermissionError) else (exc.strerror or str(exc))
        yield where, SourceError(where, f"cannot list folder: {reason}; nothing under it was linted")
