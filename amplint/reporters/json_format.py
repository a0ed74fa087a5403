"""A JSON list of findings (keys documented in the README); errors go to stderr."""
from __future__ import annotations

import json
import sys

from .common import render_errors


def render(results, out, *, statistics=False, color=False) -> None:
    findings = [f.to_dict() for r in results for f in r.findings]
    json.dump(findings, out, indent=2)
    out.write("\n")
    render_errors(results, sys.stderr)
