"""Bounded reads of files a repository can commit and amplint only consults (ignore files,
git config, the baseline, ``pyproject.toml``, cache entries): regular files only, a size
cap, never blocking on a FIFO or a device."""
from __future__ import annotations

import errno
import os
import stat
from typing import Optional


def _kind(mode: int) -> str:
    return "FIFO" if stat.S_ISFIFO(mode) else "socket" if stat.S_ISSOCK(mode) else "device or special file"


#: the most amplint reads of a file a repository can commit and amplint only consults
#: (ignore files, git config, the baseline, pyproject.toml, cache entries): a link to a
#: huge file must not take the machine's memory
REPO_FILE_LIMIT = 64 * 1024 * 1024


def read_regular(path: str, with_stat: bool = False, limit: Optional[int] = None, follow: bool = True):
    """The bytes of ``path`` (and with ``with_stat`` the ``fstat`` of what was read);
    ``OSError`` unless it is a regular file (or, with ``follow``, a link to one) of at
    most ``limit`` bytes.  Opened non-blocking and checked on the open descriptor, not
    the path: a FIFO opened for reading would block until a writer appears, and a path
    swapped between a check and the open must not slip through."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    if not follow:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a UNIX socket cannot be opened
            raise OSError(errno.EINVAL, "not a regular file (socket)", path) from None
        if exc.errno == errno.ELOOP and not follow:
            raise OSError(errno.ELOOP, "is a symbolic link (not followed)", path) from None
        raise
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory", path)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, f"not a regular file ({_kind(st.st_mode)})", path)
        if limit is not None and st.st_size > limit:
            raise OSError(errno.EFBIG, f"larger than {limit} bytes", path)
        with os.fdopen(fd, "rb", closefd=True) as fh:
            fd = -1
            data = fh.read() if limit is None else fh.read(limit + 1)
        if limit is not None and len(data) > limit:  # grew while read
            raise OSError(errno.EFBIG, f"larger than {limit} bytes", path)
    finally:
        if fd >= 0:
            os.close(fd)
    return (data, st) if with_stat else data


def read_repo_text(path: str, limit: int = REPO_FILE_LIMIT) -> str:
    """A small text file the repository may commit (``.gitignore``, git config, ...):
    a regular file of at most ``limit`` bytes, decoded as UTF-8 with undecodable bytes
    kept as surrogates; ``OSError`` otherwise."""
    return read_regular(path, limit=limit).decode("utf-8", "surrogateescape")
