"""A JSON list of findings (keys documented in the README); errors go to stderr."""
from __future__ import annotations

import json
import sys

from .common import render_errors, unicode_data
from .common import statistics as per_rule


def _finding(result, f) -> dict:
    """The finding's dict; in a notebook also ``cell`` (its number), ``line``/``end_line``
    then counting in that cell (README: JSON keys)."""
    d = f.to_dict()
    if result.cells:
        from ..notebook import cell_of

        cell, d["line"] = cell_of(result.cells, f.line)
        if cell is not None:
            d["cell"] = cell
            d["end_line"] = cell_of(result.cells, f.end_line)[1]
    return d


def render(results, out, *, statistics=False, color=False) -> None:
    if statistics:  # [{code, name, count, fixable, safe_fixes, unsafe_fixes}], most frequent first
        json.dump(per_rule(results), out, indent=2)
    else:
        json.dump(unicode_data([_finding(r, f) for r in results for f in r.findings]), out, indent=2)
    out.write("\n")
    render_errors(results, sys.stderr)
