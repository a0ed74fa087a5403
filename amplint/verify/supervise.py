"""``amplint verify`` runs the user's code in a child process it watches.

The target is arbitrary code: it may hang (``time.sleep(10**6)``), end the process
(``os._exit(0)``, a signal, the OOM killer) or fork.  In-process, the first hangs CI, the
second makes ``verify`` exit 0 -- "safe" -- with no output, the third prints the report
once per copy.  So the work runs in a forked child (before torch is imported) that
sends its output back to this process, which alone prints it:

- each opt level must finish within ``--timeout`` seconds (the import and the factory
  call count towards the first); past it the child and everything it started are
  killed, with a one-line error and exit 2;
- a child that ends without sending its result is a target error (exit 2), whatever
  its exit code;
- the first result is the one reported: a factory that forks reports once.

The child's messages are single short writes on a pipe (atomic below ``PIPE_BUF``,
so copies of a forked child cannot interleave them); the output itself goes through a
temporary file named in the message.
"""
from __future__ import annotations

import io
import os
import pickle
import select
import signal
import sys
import tempfile
import time
from typing import Callable, Optional

EXIT_ERROR = 2
DEFAULT_TIMEOUT = 600.0


class Beacon:
    """The child's side: tells the parent when a level starts and hands it the result."""

    def __init__(self, fd: int):
        self.fd = fd

    def send(self, kind: str, text: str = "") -> None:
        try:
            os.write(self.fd, f"{os.getpid()} {kind} {text}\n".encode("utf-8", "backslashreplace")[:512])
        except OSError:
            pass

    def wrap(self, progress):
        """``progress`` (or None) with each level start also sent to the parent."""
        return _Progress(self, progress)


class _Progress:
    def __init__(self, beacon: Beacon, inner):
        self._beacon, self._inner = beacon, inner

    def start_level(self, level: str) -> None:
        self._beacon.send("level", level)
        if self._inner is not None:
            self._inner.start_level(level)

    def __getattr__(self, name):
        inner = self.__dict__.get("_inner")
        if inner is not None:
            return getattr(inner, name)
        return lambda *a, **k: None


class _Captured(io.StringIO):
    """The child's stdout: kept for the parent, which prints it (terminal or not, as its own)."""

    def __init__(self, tty: bool):
        super().__init__()
        self._tty = tty

    def isatty(self) -> bool:
        return self._tty


def supervise(body: Callable[[Beacon], int], timeout: Optional[float], label: str) -> int:
    """Run ``body(beacon)`` in a forked child; print what it printed; return its status,
    or EXIT_ERROR when it hung past ``timeout`` per level or ended without a result."""
    if not hasattr(os, "fork"):
        return body(Beacon(-1))
    timeout = DEFAULT_TIMEOUT if timeout is None else timeout
    sys.stdout.flush()
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(read_end)
        status = EXIT_ERROR
        try:
            os.setpgid(0, 0)  # its own group: a timeout kills whatever the target started too
            from ..procs import die_with_parent

            die_with_parent(os.getppid())
            sys.stdout = _Captured(os.isatty(1))
            beacon = Beacon(write_end)
            status = body(beacon)
            _send_result(beacon, status, sys.stdout.getvalue())
        except BaseException as exc:  # never let the child's traceback or exit escape as the parent's
            try:
                sys.stderr.write(f"amplint: error: {label}: {type(exc).__name__}: {exc}\n")
            except Exception:
                pass
        finally:
            try:
                sys.stderr.flush()
            except Exception:
                pass
            os._exit(status if isinstance(status, int) else EXIT_ERROR)
    os.close(write_end)
    try:
        return _watch(pid, read_end, timeout, label)
    except KeyboardInterrupt:
        _kill_group(pid)
        raise
    finally:
        os.close(read_end)


def _send_result(beacon: Beacon, status: int, output: str) -> None:
    fd, path = tempfile.mkstemp(prefix=".amplint-verify-", suffix=".pickle")
    with os.fdopen(fd, "wb") as fh:
        pickle.dump((status, output), fh)
    beacon.send("result", path)


def _watch(pid: int, fd: int, timeout: float, label: str) -> int:
    deadline = time.monotonic() + timeout
    level = "the import and the factory call"
    buffer = b""
    result: Optional[tuple[int, str]] = None
    while result is None:
        left = deadline - time.monotonic()
        if left <= 0:
            _kill_group(pid)
            where = f"level {level}" if not level.startswith("the import") else level
            print(f"amplint: error: {label}: {where} ran past --timeout {timeout:g} s; stopped", file=sys.stderr)
            return EXIT_ERROR
        ready, _, _ = select.select([fd], [], [], min(left, 1.0))
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:  # every copy of the child closed the pipe without a result
            break
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            _, kind, text = (line.decode("utf-8", "replace").split(" ", 2) + ["", ""])[:3]
            if kind == "level":
                level, deadline = text, time.monotonic() + timeout
            elif kind == "result" and result is None:
                result = _load_result(text)
        # further results (a factory that forked) are left unread: the first is reported
    _, wait_status = os.waitpid(pid, 0) if result is None else _reap(pid)
    _kill_group(pid)  # copies the target forked, if any are left
    if result is None:
        if os.WIFSIGNALED(wait_status):
            how = f"was killed by signal {signal.Signals(os.WTERMSIG(wait_status)).name}"
        else:
            how = f"ended the process (exit code {os.WEXITSTATUS(wait_status)})"
        print(f"amplint: error: {label}: the target {how} before verify could report; not verified",
              file=sys.stderr)
        return EXIT_ERROR
    status, output = result
    sys.stdout.write(output)
    sys.stdout.flush()
    return status


def _load_result(path: str) -> Optional[tuple[int, str]]:
    try:
        with open(path, "rb") as fh:
            return pickle.load(fh)
    except (OSError, pickle.UnpicklingError, EOFError):
        return None
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass


def _reap(pid: int):
    try:
        return os.waitpid(pid, 0)
    except ChildProcessError:
        return pid, 0


def _kill_group(pid: int) -> None:
    for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            target()
        except OSError:
            pass
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
