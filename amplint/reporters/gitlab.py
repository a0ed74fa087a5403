"""GitLab Code Quality (a JSON list of issues, for ``artifacts: reports: codequality``).

``location.path`` is relative to the repository root; ``fingerprint`` identifies the
finding across commits (path, code and a fingerprint that survives line shifts).  A
file that could not be checked is an issue too (``check_name`` ``invalid-syntax`` for a
syntax error, as Ruff's, else ``unreadable-file``), so the merge request shows it;
errors also go to stderr.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys

from .common import in_notebook, is_syntax_error, location_fingerprint, render_errors, source_root, unicode_data

_SEVERITY = {"error": "critical", "warning": "major", "info": "info"}


def _relative(path: str, base: str) -> str:
    try:
        return os.path.relpath(os.path.abspath(path), base).replace(os.sep, "/")
    except ValueError:
        return path


def render(results, out, *, statistics=False, color=False) -> None:
    base = source_root()
    issues = []
    for result in results:
        for e in result.errors:
            path = _relative(e.path, base)
            check = "invalid-syntax" if is_syntax_error(e) else "unreadable-file"
            issues.append({
                "description": f"{check} {e.reason}",
                "check_name": check,
                "fingerprint": hashlib.sha256(f"{path}\0{check}\0{e.reason}".encode("utf-8", "surrogateescape")).hexdigest(),
                "severity": "major",
                "location": {"path": path, "lines": {"begin": e.line, "end": e.line}},
            })
        for f in result.findings:
            path = _relative(f.path, base)
            cell = in_notebook(result, f)  # a notebook: line 1 of the .ipynb, the cell in the description
            issues.append({
                "description": f"{cell + ': ' if cell else ''}{f.code} {f.message}",
                "check_name": f.code,
                "fingerprint": location_fingerprint(f, base),
                "severity": _SEVERITY[f.severity.value],
                "location": {"path": path, "lines": {"begin": 1, "end": 1} if cell else {"begin": f.line, "end": f.end_line}},
            })
    json.dump(unicode_data(issues), out, indent=2)
    out.write("\n")
    render_errors(results, sys.stderr)
