"""``python -m amplint``: the same command line as the ``amplint`` script.

``-m`` puts the current folder first on ``sys.path`` before this file runs, so a
``tomllib.py``, ``hashlib.py``, ``tempfile.py`` or ``libcst.py`` in the folder being
linted would be imported instead of the real module -- running that folder's code.
Drop it before importing anything else.  By this point only the interpreter's start-up
modules (frozen or already loaded) and the ``amplint`` package (whose ``__init__``
imports nothing) have been imported; ``-P`` / ``PYTHONSAFEPATH`` (Python 3.11+) keeps
the folder off the path from the start, and the ``amplint`` script never adds it.
"""
import sys

if sys.path and not getattr(sys.flags, "safe_path", False):
    import os  # loaded at start-up (frozen): not looked up on sys.path

    try:
        if sys.path[0] == "" or os.path.realpath(sys.path[0]) == os.path.realpath(os.getcwd()):
            del sys.path[0]
    except OSError:  # the current folder was removed: nothing to shadow with
        pass

from amplint.cli import main  # noqa: E402  (after the sys.path fix, on purpose)

sys.exit(main())
