"""Worker processes that never outlive the run that started them.

A pool worker forked by ``check -j N`` or ``fix -j N`` is told to die with its parent:
on Linux by ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` (the kernel kills it the moment the
parent dies, even by SIGKILL, ``timeout`` or the OOM killer), elsewhere -- and as a
second line on Linux -- by a watchdog thread that ends the worker once its parent's pid
is no longer its parent.  Without this, a cancelled CI job leaves its workers idle
under PID 1 forever.
"""
from __future__ import annotations

import os
import signal
import sys
import threading

_PR_SET_PDEATHSIG = 1
#: how often the watchdog looks at the parent (seconds)
WATCH_INTERVAL = 0.5


def die_with_parent(parent_pid: int) -> None:
    """Arrange for this process to end when ``parent_pid`` (its parent) does."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        os._exit(1)
    threading.Thread(target=_watch, args=(parent_pid,), name="amplint-parent-watchdog", daemon=True).start()


def _watch(parent_pid: int) -> None:
    import time

    while True:
        time.sleep(WATCH_INTERVAL)
        if os.getppid() != parent_pid:
            os._exit(1)
