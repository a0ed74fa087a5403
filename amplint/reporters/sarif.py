"""SARIF 2.1.0, as GitHub code scanning accepts it."""
from __future__ import annotations

import json
import os

from .. import __version__

_LEVEL = {"error": "error", "warning": "warning", "info": "note"}


def _uri(path: str) -> str:
    rel = os.path.relpath(path) if not path.startswith("..") else path
    return rel.replace(os.sep, "/")


def _location(path, line, column, end_line=None, end_column=None, message=None):
    region = {"startLine": line, "startColumn": column}
    if end_line is not None:
        region.update(endLine=end_line, endColumn=end_column)
    loc = {"physicalLocation": {"artifactLocation": {"uri": _uri(path)}, "region": region}}
    if message:
        loc["message"] = {"text": message}
    return loc


def render(results, out, *, statistics=False, color=False, rules=None) -> None:
    from ..registry import all_rules

    rules = rules if rules is not None else all_rules()
    index = {r.code: i for i, r in enumerate(rules)}
    sarif_results, notifications = [], []
    for result in results:
        for f in result.findings:
            entry = {
                "ruleId": f.code,
                "level": _LEVEL[f.severity.value],
                "message": {"text": f.message},
                "locations": [_location(f.path, f.line, f.column, f.end_line, f.end_column)],
            }
            if f.code in index:
                entry["ruleIndex"] = index[f.code]
            if f.related:
                entry["relatedLocations"] = [
                    {"id": i, **_location(r.path, r.line, r.column, message=r.note)} for i, r in enumerate(f.related)
                ]
            if f.fix is not None:
                entry["properties"] = {"fix": {"applicability": f.fix.applicability.value, "description": f.fix.description}}
            sarif_results.append(entry)
        for e in [*result.errors, *result.warnings]:
            notifications.append({
                "level": e.severity,
                "message": {"text": e.reason},
                "locations": [_location(e.path, e.line, e.col)],
            })
    doc = {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "amplint",
                "version": __version__,
                "informationUri": "https://github.com/amplint/amplint",
                "rules": [{
                    "id": r.code,
                    "name": r.name,
                    "shortDescription": {"text": r.summary},
                    "fullDescription": {"text": r.summary},
                    "help": {"text": r.docs.strip(), "markdown": r.docs.strip()},
                    "defaultConfiguration": {"level": _LEVEL[r.severity.value], "enabled": r.enabled_by_default},
                } for r in rules],
            }},
            "results": sarif_results,
            "invocations": [{"executionSuccessful": not any(n["level"] == "error" for n in notifications), "toolExecutionNotifications": notifications}],
        }],
    }
    json.dump(doc, out, indent=2)
    out.write("\n")
