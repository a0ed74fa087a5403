"""A JSON list of findings (keys documented in the README); errors go to stderr."""
from __future__ import annotations

import json
import sys

from .common import render_errors, unicode_data
from .common import statistics as per_rule


def render(results, out, *, statistics=False, color=False) -> None:
    if statistics:  # [{code, name, count, fixable, safe_fixes, unsafe_fixes}], most frequent first
        json.dump(per_rule(results), out, indent=2)
    else:
        json.dump(unicode_data([f.to_dict() for r in results for f in r.findings]), out, indent=2)
    out.write("\n")
    render_errors(results, sys.stderr)
