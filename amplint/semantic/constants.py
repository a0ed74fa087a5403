"""Numeric module constants as a cross-file fact: its key, writer and reader in one place.

``INFINITY_NUMBER = 1e12`` in ``seq2seq_constant.py``, read by another file as
``constant.INFINITY_NUMBER`` or ``from .constants import NEG_INF``: :func:`collect` (the
writer, run in the engine's summary pass) records each ``NAME = <number>`` assigned once at
module level under :data:`KEY`; :func:`imported` (the reader, used by the evaluator) finds
it again for the importing file.  Never imports torch or the code it reads.
"""
from __future__ import annotations

import re
from typing import Optional

#: the key of the project fact holding each file's numeric module constants
KEY = "@constants"
#: a module-level ``UPPER_CASE = <number>``: a file worth summarising for its constants
#: even when nothing else in it is (``seq2seq_constant.py`` imports no torch)
MARKER = re.compile(r"^[A-Z_][A-Z0-9_]*\s*(?::[^=\n]*)?=\s*[-+(]*\s*[0-9.]", re.M)


def collect(ctx) -> Optional[dict]:
    """``{"by_name": {NAME: [value, line, column]}}`` for the file's numeric module
    constants (None: it has none)."""
    out = {}
    for stmt in ctx.tree.body:
        if stmt.__class__.__name__ not in ("Assign", "AnnAssign") or stmt.value is None:
            continue
        targets = stmt.targets if hasattr(stmt, "targets") else [stmt.target]
        if len(targets) != 1 or targets[0].__class__.__name__ != "Name":
            continue
        name = targets[0].id
        if len(ctx.module_assignments(name)) != 1:
            continue
        value = ctx.evaluator.evaluate(stmt.value, None, 1)
        if value is not None and isinstance(value.value, (int, float)) and not isinstance(value.value, bool):
            out[name] = [value.value, stmt.lineno, ctx.char_col(stmt.lineno, stmt.col_offset) + 1]
    return {"by_name": out} if out else None


def imported(project, module: str, name: str, exclude_path: str) -> Optional[tuple[str, float, int, int]]:
    """``(path, value, line, column)`` of the constant ``name`` of another linted file that
    is ``module``; None when no file, or more than one, defines it."""
    if project is None or not module:
        return None
    found = project.named(KEY, name, module, exclude_path=exclude_path)
    if len(found) != 1:
        return None
    path, (value, line, column) = found[0]
    return path, value, line, column
