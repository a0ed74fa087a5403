"""What the model prints while verify imports, builds and trains it.

A model's ``print``s, warnings and logging to the console belong in the report, not in the
verifier's own output: ``--format json`` writes one JSON document to stdout, and a model
printing its shapes would make it unparsable.  :class:`CapturedOutput` takes both streams at
the Python level (``sys.stdout``/``sys.stderr``) and, where they are real files, at the file
descriptor level too (C/C++ code, ``os.system`` children), into one temporary file that is
read back as text.
"""
from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile

#: the most captured characters kept in a report (the end: where a failure is)
KEEP = 20000


def _fileno(stream) -> int | None:
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):
        return None


class CapturedOutput:
    """``with CapturedOutput() as out: ...`` then ``out.text``.  Re-entrant use appends."""

    def __init__(self):
        self.text = ""

    @contextlib.contextmanager
    def capturing(self):
        buffer = tempfile.TemporaryFile(mode="w+b", buffering=0)  # unbuffered: fds and stream share it
        stream = io.TextIOWrapper(buffer, encoding="utf-8", errors="replace", write_through=True)
        saved_streams = sys.stdout, sys.stderr
        saved_fds = []
        for s in saved_streams:
            with contextlib.suppress(Exception):
                s.flush()
        for fd in (1, 2):
            if fd in (_fileno(saved_streams[0]), _fileno(saved_streams[1])):
                try:
                    saved_fds.append((fd, os.dup(fd)))
                    os.dup2(buffer.fileno(), fd)
                except OSError:
                    pass
        sys.stdout = sys.stderr = stream
        try:
            yield self
        finally:
            with contextlib.suppress(Exception):
                stream.flush()
            sys.stdout, sys.stderr = saved_streams
            for fd, copy in saved_fds:
                os.dup2(copy, fd)
                os.close(copy)
            buffer.seek(0)
            text = buffer.read().decode("utf-8", errors="replace")
            stream.detach()
            buffer.close()
            self.text += text

    def tail(self) -> str:
        """The captured text, its end kept when it is long."""
        if len(self.text) <= KEEP:
            return self.text
        cut = self.text[-KEEP:]
        return f"[{len(self.text) - KEEP} earlier characters not kept]\n" + cut[cut.find("\n") + 1:]
