"""Lint and fix the model's source files through the lint engine's Python API, write the fixed
text to temporary copies (never to the user's files), and map line numbers between them."""
from __future__ import annotations

import dataclasses
import difflib
import os
import shutil
import tempfile
from typing import Optional

from amplint.config import ConfigResolver
from amplint.pipeline import LintMode, lint_sources
from amplint.files import read_source

from .records import VerifyFinding
from .target import canonical


@dataclasses.dataclass(frozen=True)
class LintSettings:
    """How verify lints and fixes the model's sources: the caller's configuration -- the
    config file, its command-line ``overrides`` (``fix --verify`` hands over its own:
    target, opt level, device, engine, select / ignore...) and whether local rules and
    plugins may load -- with, for each level verify runs, that level, the dtype and the
    device on top.  ``exact`` (``fix --verify``): the fixes are computed with the caller's
    settings alone, so that verify proves the very fix set ``fix`` then writes."""

    overrides: tuple = ()  # (key, value) pairs of ConfigResolver overrides
    config: Optional[str] = None
    allow_local_rules: bool = False
    exact: bool = False

    def resolver(self, dtype: Optional[str] = None, level: Optional[str] = None, device: Optional[str] = None) -> ConfigResolver:
        overrides = {k: v for k, v in self.overrides if v is not None}
        if dtype is not None:
            overrides["target"] = dtype
        if level is not None:
            overrides["opt_level"] = level
        if device in ("cpu", "cuda"):
            overrides["device"] = device
        return ConfigResolver(overrides, self.config, allow_local_rules=self.allow_local_rules)

    def target_of(self, path: str) -> Optional[str]:
        """The target dtype the configuration gives ``path`` (None: not fp16 or bf16)."""
        try:
            target = self.resolver().for_path(path).target
        except Exception:  # a broken config is reported by the lint itself
            return None
        return target if target in ("fp16", "bf16") else None


def _texts(files: list[str]) -> dict[str, str]:
    return {p: read_source(p).text for p in files}


def lint(files: list[str], dtype: str, levels: list[str], device: str, settings: LintSettings) -> tuple[list[VerifyFinding], list[str]]:
    """Findings on ``files`` for each selected level (merged; each finding lists the levels
    whose settings predict it).  Returns (findings, errors)."""
    merged: dict[tuple, dict] = {}
    errors: list[str] = []
    texts = _texts(files)
    for level in levels:
        results = lint_sources(texts, settings.resolver(dtype, level, device))
        for r in results.values():
            for e in r.errors:
                errors.append(str(e))
            for f in r.findings:
                key = (canonical(f.path), f.line, f.column, f.code)
                entry = merged.get(key)
                if entry is None:
                    entry = merged[key] = VerifyFinding(
                        f.code, f.rule, f.message, canonical(f.path), f.line, max(f.end_line, f.line), f.column,
                        f.end_column if f.end_line > f.line or f.end_column > f.column else None,
                        f.severity.value,
                        fix=f.fix.applicability.value if f.fix else None,
                        fix_description=f.fix.description if f.fix else None,
                        registrations=[list(r) for r in f.fix.registrations] if f.fix else [],
                    )
                if level not in entry.levels:
                    entry.levels.append(level)
    return sorted(merged.values(), key=lambda d: (d.path, d.line, d.column, d.code)), sorted(set(errors))


def fix(files: list[str], dtype: str, levels: list[str], device: str, unsafe: bool,
        settings: LintSettings) -> tuple[dict[str, str], dict[str, str], list[str]]:
    """Fixed text of each file: the fixes of every selected level's settings, applied in
    turn (``exact``: the caller's settings alone, once).  Returns (original texts, fixed
    texts, errors).  Nothing is written."""
    originals = _texts(files)
    texts = dict(originals)
    errors: list[str] = []
    mode = LintMode(fix=True, unsafe=unsafe)
    resolvers = [settings.resolver()] if settings.exact else [settings.resolver(dtype, level, device) for level in levels]
    for resolver in resolvers:
        for path, result in lint_sources(texts, resolver, mode).items():
            errors.extend(str(e) for e in result.errors)
            texts[path] = result.text
    return originals, texts, errors


def remaining(texts: dict[str, str], dtype: str, levels: list[str], device: str, settings: LintSettings) -> set:
    """(path, code, line) of the findings still reported on the fixed ``texts``, with the
    project index of the fixed files, as ``check`` would report them after ``fix``."""
    out = set()
    for level in levels:
        for path, result in lint_sources(texts, settings.resolver(dtype, level, device)).items():
            out.update((path, f.code, f.line) for f in result.findings)
    return out


def diff(path: str, old: str, new: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), fromfile=path, tofile=path + " (fixed)", n=2))


class LineMap:
    """Original line ranges -> the corresponding lines of the fixed text."""

    def __init__(self, old: str, new: str):
        old_lines = old.splitlines()
        self.old_count = len(old_lines)
        self.ops = difflib.SequenceMatcher(None, old_lines, new.splitlines(), autojunk=False).get_opcodes()

    def back(self, line: int) -> tuple[int, bool]:
        """1-based line of the new text -> (line of the old text, whether it is unchanged).
        A line a fix changed maps to the old line it replaced (an inserted one to the line
        it was inserted before): columns there are not those of the old text."""
        j = line - 1
        for tag, i1, i2, j1, j2 in self.ops:
            if not j1 <= j < j2:
                continue
            if tag == "equal":
                return i1 + (j - j1) + 1, True
            if tag == "replace":
                return i1 + min(j - j1, i2 - i1 - 1) + 1, False
            return max(1, i1 + 1 if i1 < self.old_count else i1), False  # insert
        return line, False

    def range(self, start: int, end: int) -> tuple[int, int]:
        """1-based inclusive range in the old text -> range in the new text."""
        s, e = start - 1, end - 1
        lo = hi = None
        for tag, i1, i2, j1, j2 in self.ops:
            if tag == "equal":
                a, b = max(s, i1), min(e, i2 - 1)
                if a > b:
                    continue
                span = (j1 + a - i1, j1 + b - i1)
            elif tag == "insert":
                if not (s < i1 <= e):
                    continue
                span = (j1, j2 - 1)
            else:  # replace / delete
                if i2 - 1 < s or i1 > e:
                    continue
                span = (j1, max(j1, j2 - 1))
            lo = span[0] if lo is None else min(lo, span[0])
            hi = span[1] if hi is None else max(hi, span[1])
        if lo is None:
            return start, end
        return lo + 1, hi + 1


def mirror(files: dict[str, str], texts: dict[str, str]) -> tuple[str, dict[str, str], list[str]]:
    """Copy ``files`` (path -> the sys.path root it is imported from) into a temporary folder,
    keeping their layout relative to a common folder (so a harness's ``sys.path`` tweaks such
    as ``os.path.join(os.path.dirname(__file__), "..", "src")`` still resolve inside the copy),
    with ``texts`` as their content.  Returns (temp dir, original -> copy, copied roots)."""
    tmp = tempfile.mkdtemp(prefix="amplint-verify-")
    common = os.path.commonpath([os.path.dirname(p) for p in files] + list(files.values()))
    base = os.path.join(tmp, "src")
    mapping: dict[str, str] = {}
    for path in files:
        dest = os.path.join(base, os.path.relpath(path, common))
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        if path in texts:
            content = texts[path]
        else:
            with open(path, encoding="utf-8", newline="") as fh:
                content = fh.read()
        with open(dest, "w", encoding="utf-8", newline="") as fh:
            fh.write(content)
        mapping[path] = dest
    roots = []
    for root in files.values():
        copy = os.path.normpath(os.path.join(base, os.path.relpath(root, common)))
        if copy not in roots:
            roots.append(copy)
    return tmp, mapping, roots


def cleanup(tmp: str) -> None:
    shutil.rmtree(tmp, ignore_errors=True)
