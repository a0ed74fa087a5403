"""GitLab Code Quality (a JSON list of issues, for ``artifacts: reports: codequality``).

``location.path`` is relative to the repository root; ``fingerprint`` identifies the
finding across commits (path, code and a fingerprint that survives line shifts).
Errors go to stderr.
"""
from __future__ import annotations

import json
import os
import sys

from .common import location_fingerprint, render_errors, source_root

_SEVERITY = {"error": "critical", "warning": "major", "info": "info"}


def render(results, out, *, statistics=False, color=False) -> None:
    base = source_root()
    issues = []
    for result in results:
        for f in result.findings:
            try:
                path = os.path.relpath(os.path.abspath(f.path), base).replace(os.sep, "/")
            except ValueError:
                path = f.path
            issues.append({
                "description": f"{f.code} {f.message}",
                "check_name": f.code,
                "fingerprint": location_fingerprint(f, base),
                "severity": _SEVERITY[f.severity.value],
                "location": {"path": path, "lines": {"begin": f.line, "end": f.end_line}},
            })
    json.dump(issues, out, indent=2)
    out.write("\n")
    render_errors(results, sys.stderr)
