"""Run a rule's embedded VALID / INVALID examples (Fixit style).

``check_rule_examples(RuleClass)`` returns a list of failure messages (empty: all
pass).  ``tests/test_rule_examples.py`` runs it for every registered rule, and
third-party rule authors can call it from their own tests.
"""
from __future__ import annotations

import textwrap
from typing import Optional

from .config import Settings
from .engine import fix_text, lint_text
from .files import SourceError
from .project import ProjectIndex


def _settings(overrides: dict) -> Settings:
    values = {k.replace("-", "_"): tuple(v) if isinstance(v, list) else v for k, v in overrides.items()}
    return Settings(**values)


def example_code(text: str) -> str:
    """The code an embedded example stands for.  Examples are written as indented
    triple-quoted strings whose opening quotes end their line and whose closing quotes
    sit on a line of their own, so the first line break is dropped and the rest
    dedented.  A string that does not open with a line break (a file without a
    final newline, say) is only dedented."""
    if text.startswith("\n"):
        text = text[1:]
    return textwrap.dedent(text)


def run_example(rule, code: str, settings: Optional[dict] = None, fix: bool = False):
    """Lint (and with ``fix``, fix with unsafe fixes allowed) ``code`` with only ``rule``."""
    code = example_code(code)
    s = _settings(settings or {})
    if fix:
        return fix_text("<example>", code, s, [rule], ProjectIndex(), unsafe=True)
    return lint_text("<example>", code, s, [rule], ProjectIndex())


def check_rule_examples(rule) -> list[str]:
    failures: list[str] = []
    for i, example in enumerate(rule.valid_examples()):
        try:
            findings, _, errors = run_example(rule, example.code, example.settings)
        except SourceError as exc:
            failures.append(f"{rule.code} VALID[{i}]: example does not parse: {exc}")
            continue
        if errors:
            failures.append(f"{rule.code} VALID[{i}]: {errors[0]}")
        if findings:
            failures.append(f"{rule.code} VALID[{i}]: expected no finding, got {[f'{f.line}: {f.message}' for f in findings]}")
    for i, example in enumerate(rule.invalid_examples()):
        where = f"{rule.code} INVALID[{i}]"
        try:
            findings, _, errors = run_example(rule, example.code, example.settings)
        except SourceError as exc:
            failures.append(f"{where}: example does not parse: {exc}")
            continue
        if errors:
            failures.append(f"{where}: {errors[0]}")
        findings = [f for f in findings if f.code == rule.code]
        if not findings:
            failures.append(f"{where}: expected a finding, got none")
            continue
        first = findings[0]
        if example.line is not None and first.line != example.line:
            failures.append(f"{where}: expected line {example.line}, got {first.line}")
        if example.count is not None and len(findings) != example.count:
            failures.append(f"{where}: expected {example.count} findings, got {len(findings)}")
        if example.message is not None and example.message not in first.message:
            failures.append(f"{where}: message {first.message!r} lacks {example.message!r}")
        if example.severity is not None and first.severity.value != example.severity:
            failures.append(f"{where}: expected severity {example.severity}, got {first.severity.value}")
        fixable = [f for f in findings if f.fix is not None and f.fix.applicability.value != "display"]
        if example.expected_fix is None:
            if fixable:
                failures.append(f"{where}: expected no fix, got {fixable[0].fix.description!r}")
            continue
        new_text, _, _, fix_errors = run_example(rule, example.code, example.settings, fix=True)
        if fix_errors:
            failures.append(f"{where}: fixing failed: {fix_errors[0]}")
        expected = example_code(example.expected_fix)
        if new_text != expected:
            failures.append(f"{where}: fixed code differs.\n--- expected\n{expected}\n--- got\n{new_text}")
        again, count, _, _ = run_example(rule, new_text, example.settings, fix=True)
        if again != new_text:
            failures.append(f"{where}: fix is not idempotent; a second run changed:\n{again}")
    return failures
