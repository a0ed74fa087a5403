"""SARIF 2.1.0, as GitHub code scanning reads it.

Locations are relative to ``%SRCROOT%`` (the git work tree the run starts in, else the
current folder; given in ``originalUriBaseIds``), percent-encoded; a file outside it gets
an absolute ``file://`` URI.  Columns are Unicode code points (``columnKind``), as in
every amplint report.  Each result has ``partialFingerprints`` (GitHub follows a finding
across commits with them), its fix as SARIF ``fixes`` (the edits), and its related
locations referenced from the message text (``[note](1)``), which is how GitHub shows
them.
"""
from __future__ import annotations

import json
import os
import pathlib
from urllib.parse import quote

from .. import __version__
from .common import location_fingerprint, source_root

_LEVEL = {"error": "error", "warning": "warning", "info": "note"}
HOMEPAGE = "https://github.com/amplint/amplint"
SRCROOT = "%SRCROOT%"
_SOURCE_TREE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def rule_help_uri(code: str) -> str:
    """The rule's page under docs/rules/ when the project has one, else the README's
    rule table."""
    if os.path.isfile(os.path.join(_SOURCE_TREE, "docs", "rules", f"{code}.md")):
        return f"{HOMEPAGE}/blob/main/docs/rules/{code}.md"
    return f"{HOMEPAGE}#rules"


def _artifact(path: str, base: str) -> dict:
    absolute = os.path.abspath(path)
    try:
        rel = os.path.relpath(absolute, base)
    except ValueError:  # another drive (Windows)
        rel = os.pardir
    if rel == os.pardir or rel.startswith(os.pardir + os.sep):
        return {"uri": pathlib.Path(absolute).as_uri()}
    return {"uri": quote(rel.replace(os.sep, "/"), safe="/"), "uriBaseId": SRCROOT}


def _region(line, column, end_line=None, end_column=None) -> dict:
    region = {"startLine": line, "startColumn": column}
    if end_line is not None:
        region.update(endLine=end_line, endColumn=end_column)
    return region


def _location(base, path, line, column, end_line=None, end_column=None, message=None):
    loc = {"physicalLocation": {"artifactLocation": _artifact(path, base), "region": _region(line, column, end_line, end_column)}}
    if message:
        loc["message"] = {"text": message}
    return loc


def _escape(text: str) -> str:
    """Literal brackets in a SARIF message are escaped: ``[x](1)`` is a link."""
    return text.replace("[", "\\[").replace("]", "\\]")


def _message(f) -> dict:
    text = _escape(f.message)
    if f.related:
        links = ", ".join(f"[{_escape(r.note)}]({i})" for i, r in enumerate(f.related, 1))
        text += f" (see {links})"
    return {"text": text}


def _fixes(f, base) -> list:
    if f.fix is None or not f.fix.edits:
        return []
    replacements = [
        {"deletedRegion": _region(e.start.line, e.start.col + 1, e.end.line, e.end.col + 1), "insertedContent": {"text": e.text}}
        for e in f.fix.edits
    ]
    return [{
        "description": {"text": f"{f.fix.description} ({f.fix.applicability.value} fix)"},
        "artifactChanges": [{"artifactLocation": _artifact(f.path, base), "replacements": replacements}],
    }]


def render(results, out, *, statistics=False, color=False, rules=None) -> None:
    from ..registry import all_rules

    rules = rules if rules is not None else all_rules()
    index = {r.code: i for i, r in enumerate(rules)}
    base = source_root()
    sarif_results, notifications = [], []
    for result in results:
        for f in result.findings:
            entry = {
                "ruleId": f.code,
                "level": _LEVEL[f.severity.value],
                "message": _message(f),
                "locations": [_location(base, f.path, f.line, f.column, f.end_line, f.end_column)],
                "partialFingerprints": {"amplintFingerprint/v1": location_fingerprint(f, base)},
            }
            if f.code in index:
                entry["ruleIndex"] = index[f.code]
            if f.related:
                entry["relatedLocations"] = [
                    {"id": i, **_location(base, r.path, r.line, r.column, message=r.note)} for i, r in enumerate(f.related, 1)
                ]
            fixes = _fixes(f, base)
            if fixes:
                entry["fixes"] = fixes
            if f.fix is not None:
                entry["properties"] = {"fix": {"applicability": f.fix.applicability.value, "description": f.fix.description}}
            sarif_results.append(entry)
        for e in [*result.errors, *result.warnings]:
            notifications.append({
                "level": e.severity,
                "message": {"text": e.reason},
                "locations": [_location(base, e.path, e.line, e.col)],
            })
    doc = {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "amplint",
                "version": __version__,
                "informationUri": HOMEPAGE,
                "rules": [{
                    "id": r.code,
                    "name": r.name,
                    "shortDescription": {"text": r.summary},
                    "fullDescription": {"text": r.summary},
                    "helpUri": rule_help_uri(r.code),
                    "help": {"text": r.docs.strip(), "markdown": r.docs.strip()},
                    "defaultConfiguration": {"level": _LEVEL[r.severity.value], "enabled": r.enabled_by_default},
                } for r in rules],
            }},
            "originalUriBaseIds": {SRCROOT: {"uri": pathlib.Path(base).as_uri().rstrip("/") + "/"}},
            "columnKind": "unicodeCodePoints",
            "results": sarif_results,
            "invocations": [{"executionSuccessful": not any(n["level"] == "error" for n in notifications), "toolExecutionNotifications": notifications}],
        }],
    }
    json.dump(doc, out, indent=2)
    out.write("\n")
