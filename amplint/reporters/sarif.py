"""SARIF 2.1.0, as GitHub code scanning reads it.

Locations are relative to ``%SRCROOT%`` (the git work tree the run starts in, else the
current folder; given in ``originalUriBaseIds``), percent-encoded; a file outside it gets
an absolute ``file://`` URI.  Columns are Unicode code points (``columnKind``), as in
every amplint report.  Each result has ``partialFingerprints`` (GitHub follows a finding
across commits with them), its fix as SARIF ``fixes`` (the edits), and its related
locations referenced from the message text (``[note](1)``), which is how GitHub shows
them.

For code scanning: ``partialFingerprints.primaryLocationLineHash`` (the only key GitHub
reads; a REST upload gets no other), each rule's ``fullDescription`` from its "What it
does" section, a plain-text ``help.text`` beside the markdown, and ``properties``
``tags``/``precision``/``problem.severity`` (GitHub sorts and filters by them).  A file
that could not be checked is a result too (rule ``invalid-syntax`` for a syntax error, as
Ruff's, else ``unreadable-file``), since code scanning never shows tool notifications.
A file name that is not UTF-8 has its bytes percent-encoded in the URI (``%FF``) and
written ``\\xff`` in text.
"""
from __future__ import annotations

import json
import os
import pathlib
import re
from urllib.parse import quote

from .. import __version__
from ..rule_docs import REPOSITORY, help_uri
from .common import in_notebook, is_syntax_error, location_fingerprint, source_root, unicode_data

_LEVEL = {"error": "error", "warning": "warning", "info": "note"}
SRCROOT = "%SRCROOT%"


def _artifact(path: str, base: str) -> dict:
    absolute = os.path.abspath(path)
    try:
        rel = os.path.relpath(absolute, base)
    except ValueError:  # another drive (Windows)
        rel = os.pardir
    if rel == os.pardir or rel.startswith(os.pardir + os.sep):
        return {"uri": pathlib.Path(absolute).as_uri()}  # percent-encodes the name's bytes too
    # the name's own bytes, percent-encoded (RFC 3986): also those that are not UTF-8
    return {"uri": quote(os.fsencode(rel.replace(os.sep, "/")), safe="/"), "uriBaseId": SRCROOT}


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


def _message(f, cell: str = "") -> dict:
    text = _escape(f.message)
    if cell:
        return {"text": f"{cell}: {text}"}
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


#: GitHub's ``problem.severity`` per amplint severity
_PROBLEM = {"error": "error", "warning": "warning", "info": "recommendation"}
#: what each family of rules is about (the hundreds digit of the code), as a code-scanning tag
_TAGS = {"1": "correctness", "2": "performance", "3": "correctness", "4": "correctness",
         "5": "maintainability", "6": "correctness", "9": "maintainability"}
#: the pseudo-rules of the files that could not be checked
_NOT_CHECKED = {
    "invalid-syntax": "the file has a syntax error: it was not linted",
    "unreadable-file": "the file could not be read or decoded: it was not linted",
}


def _section(docs: str, title: str) -> str:
    """The text of ``## title`` in a rule's markdown docs ('' when absent)."""
    match = re.search(rf"^## {re.escape(title)}\s*\n(.*?)(?=^## |\Z)", docs, re.M | re.S)
    return match.group(1).strip() if match else ""


def plain_text(markdown: str) -> str:
    """Markdown as plain text: headings without ``#``, no code fences or backticks,
    ``[text](url)`` as ``text (url)``, emphasis markers dropped."""
    lines = []
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            continue
        line = re.sub(r"^#+\s*", "", line)
        line = re.sub(r"\[([^\]]+)\]\(([^)]+)\)", r"\1 (\2)", line)
        line = re.sub(r"(\*\*|__)(.+?)\1", r"\2", line)
        lines.append(line.replace("`", ""))
    return "\n".join(lines).strip()


def _limit(text: str, size: int = 1024) -> str:
    """GitHub's limit on description lengths."""
    return text if len(text) <= size else text[: size - 1].rstrip() + "\u2026"


def _rule(r) -> dict:
    docs = (r.docs or "").strip()
    what = " ".join(plain_text(_section(docs, "What it does")).split()) or r.summary
    severity = r.severity.value
    entry = {
        "id": r.code,
        "name": r.name,
        "shortDescription": {"text": r.summary},
        "fullDescription": {"text": _limit(what)},
        "help": {"text": plain_text(docs) or r.summary, "markdown": docs or r.summary},
        "defaultConfiguration": {"level": _LEVEL[severity], "enabled": r.enabled_by_default},
        "properties": {
            "tags": ["mixed-precision", _TAGS.get(r.code.lstrip("ABCDEFGHIJKLMNOPQRSTUVWXYZ")[:1], "correctness")],
            # error rules flag what fails outright (a RuntimeError, an inf); the others
            # depend on data ranges amplint cannot see
            "precision": "high" if severity == "error" else "medium",
            "problem.severity": _PROBLEM[severity],
        },
    }
    uri = help_uri(r)  # the rule's page (docs/rules/<CODE>.md); a local rule has none
    if uri:
        entry["helpUri"] = uri
    return entry


def render(results, out, *, statistics=False, color=False, rules=None) -> None:
    from ..registry import all_rules

    rules = rules if rules is not None else all_rules()
    index = {r.code: i for i, r in enumerate(rules)}
    base = source_root()
    sarif_results, notifications = [], []
    not_checked = []  # the pseudo-rules used, in order
    for result in results:
        for e in result.errors:
            rule = "invalid-syntax" if is_syntax_error(e) else "unreadable-file"
            if rule not in not_checked:
                not_checked.append(rule)
            sarif_results.append({
                "ruleId": rule,
                "ruleIndex": len(rules) + not_checked.index(rule),
                "level": "error",
                "message": {"text": _escape(e.reason)},
                "locations": [_location(base, e.path, e.line, e.col)],
            })
        for f in result.findings:
            fingerprint = location_fingerprint(f, base)
            # a notebook: line 1 of the .ipynb (a module line is no line of its JSON), the
            # cell in the message and the properties; no fixes (their regions are module lines)
            cell = in_notebook(result, f)
            entry = {
                "ruleId": f.code,
                "level": _LEVEL[f.severity.value],
                "message": _message(f, cell),
                "locations": [_location(base, f.path, 1, 1) if cell else
                              _location(base, f.path, f.line, f.column, f.end_line, f.end_column)],
                # GitHub's key, in its own "hash:occurrence" shape; amplint's fingerprint
                # already tells repeated findings apart and survives line shifts
                "partialFingerprints": {"primaryLocationLineHash": f"{fingerprint[:16]}:1",
                                        "amplintFingerprint/v1": fingerprint},
            }
            if f.code in index:
                entry["ruleIndex"] = index[f.code]
            if f.related and not cell:
                entry["relatedLocations"] = [
                    {"id": i, **_location(base, r.path, r.line, r.column, message=r.note)} for i, r in enumerate(f.related, 1)
                ]
            fixes = _fixes(f, base) if not cell else []
            if fixes:
                entry["fixes"] = fixes
            if f.fix is not None:
                entry["properties"] = {"fix": {"applicability": f.fix.applicability.value, "description": f.fix.description}}
            if cell:
                number, line, column = (int(x) for x in cell[len("cell "):].split(":"))
                entry.setdefault("properties", {})["notebook"] = {"cell": number, "line": line, "column": column}
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
                "informationUri": REPOSITORY,
                "rules": [_rule(r) for r in rules] + [
                    {"id": rule, "name": rule, "shortDescription": {"text": _NOT_CHECKED[rule]},
                     "fullDescription": {"text": _NOT_CHECKED[rule]}, "help": {"text": _NOT_CHECKED[rule]},
                     "defaultConfiguration": {"level": "error"},
                     "properties": {"tags": ["amplint"], "precision": "very-high", "problem.severity": "error"}}
                    for rule in not_checked],
            }},
            "originalUriBaseIds": {SRCROOT: {"uri": pathlib.Path(base).as_uri().rstrip("/") + "/"}},
            "columnKind": "unicodeCodePoints",
            "results": sarif_results,
            "invocations": [{"executionSuccessful": not any(n["level"] == "error" for n in notifications), "toolExecutionNotifications": notifications}],
        }],
    }
    json.dump(unicode_data(doc), out, indent=2)
    out.write("\n")
