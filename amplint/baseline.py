"""Fingerprints that follow a finding across line shifts, and the baseline file built
from them (``check --write-baseline FILE`` / ``--baseline FILE``).

A fingerprint is a hash of the rule code, the finding's first source line and the exact
code it flags, both with all whitespace removed, plus the occurrence index of that hash
in the file (``<hash>:<n>``).  Lines added or removed elsewhere, re-indentation and
reformatting keep it; editing the flagged line itself makes it a new finding.  When the
same code is flagged twice, one more copy makes one more (new) finding.
"""
from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from typing import Iterable, Optional

from .context import FileContext
from .rule import Finding

BASELINE_VERSION = 1


def _squeeze(text: str) -> str:
    return "".join(text.split())


def _segment(lines: list[str], f: Finding) -> str:
    """The flagged code; columns are 1-based characters, as in findings."""
    def line(n: int) -> str:
        return lines[n - 1] if 0 < n <= len(lines) else ""

    if f.line == f.end_line:
        return line(f.line)[f.column - 1: f.end_column - 1]
    parts = [line(f.line)[f.column - 1:]] + [line(n) for n in range(f.line + 1, f.end_line)]
    return "\n".join(parts + [line(f.end_line)[: f.end_column - 1]])


def code_digest(f: Finding, lines: list[str]) -> str:
    """The hash part of ``f``'s fingerprint: its code, the first line and the flagged
    code at its position in ``lines``."""
    first = lines[f.line - 1] if 0 < f.line <= len(lines) else ""
    key = "\0".join((f.code, _squeeze(first), _squeeze(_segment(lines, f))))
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def assign_fingerprints(findings: Iterable[Finding], text: str, lines: Optional[list[str]] = None) -> None:
    """Set ``fingerprint`` on every finding of one file whose source is ``text`` (split
    into ``lines`` already, when given)."""
    ordered = sorted(findings, key=Finding.sort_key)
    if not ordered:
        return
    if lines is None:
        lines = FileContext.split_lines(text)
    seen: Counter = Counter()
    for f in ordered:
        digest = code_digest(f, lines)
        f.fingerprint = f"{digest}:{seen[digest]}"
        seen[digest] += 1


class BaselineError(Exception):
    pass


def _relative(path: str, folder: str) -> str:
    """``path`` relative to the baseline's folder, with ``/``: the baseline stays valid
    whichever folder amplint is run from."""
    try:
        rel = os.path.relpath(os.path.abspath(path), folder)
    except ValueError:  # another drive (Windows)
        rel = os.path.abspath(path)
    return rel.replace(os.sep, "/")


def write_baseline(file: str, findings: Iterable[Finding]) -> int:
    """Write every finding to ``file`` (sorted, one JSON object each); return the count."""
    folder = os.path.dirname(os.path.abspath(file))
    rows = sorted(
        ({"path": _relative(f.path, folder), "code": f.code, "fingerprint": f.fingerprint, "line": f.line,
          "message": f.message} for f in findings),
        key=lambda r: (r["path"], r["line"], r["code"], r["fingerprint"]),
    )
    from .files import write_file

    doc = {"amplint-baseline": BASELINE_VERSION, "findings": rows}
    try:
        data = (json.dumps(doc, indent=1, ensure_ascii=False) + "\n").encode("utf-8")
    except UnicodeEncodeError:  # a file name that is not UTF-8: JSON escapes keep it exactly
        data = (json.dumps(doc, indent=1) + "\n").encode("ascii")
    write_file(file, data, create=True)
    return len(rows)


class Baseline:
    """The findings recorded in a baseline file, matched by (path, code, fingerprint);
    ``line`` and ``message`` are there for people reading the file."""

    def __init__(self, file: str):
        self.file = file
        self.folder = os.path.dirname(os.path.abspath(file))
        from .reading import REPO_FILE_LIMIT, read_regular

        try:  # a repository may commit the baseline: a FIFO or a link to /dev/zero must not hang the run
            data = json.loads(read_regular(file, limit=REPO_FILE_LIMIT).decode("utf-8"))
        except OSError as exc:
            raise BaselineError(f"{file}: cannot read: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise BaselineError(f"{file}: not a JSON baseline: {exc}") from None
        except RecursionError:
            raise BaselineError(f"{file}: not a JSON baseline: nested too deeply") from None
        if not isinstance(data, dict) or type(data.get("amplint-baseline")) is not int or data["amplint-baseline"] != BASELINE_VERSION or not isinstance(data.get("findings"), list):
            raise BaselineError(f"{file}: not an amplint baseline (version {BASELINE_VERSION}); write one with --write-baseline")
        self.entries: Counter = Counter()
        for row in data["findings"]:
            if not (isinstance(row, dict) and all(isinstance(row.get(k), str) for k in ("path", "code", "fingerprint"))):
                raise BaselineError(f"{file}: malformed entry {row!r}")
            self.entries[(row["path"], row["code"], row["fingerprint"])] += 1
        self.matched = 0

    def filter(self, findings: list[Finding]) -> list[Finding]:
        """The findings not in the baseline (each baseline entry absorbs one finding)."""
        kept = []
        for f in findings:
            key = (_relative(f.path, self.folder), f.code, f.fingerprint)
            if self.entries[key] > 0:
                self.entries[key] -= 1
                self.matched += 1
            else:
                kept.append(f)
        return kept

    @property
    def stale(self) -> int:
        """Entries that matched nothing in this run (fixed, or files not linted)."""
        return sum(self.entries.values())
