"""Run a rule's embedded VALID / INVALID examples (Fixit style).

``check_rule_examples(RuleClass)`` returns a list of failure messages (empty: all
pass).  ``tests/test_rule_examples.py`` runs it for every registered rule, and
third-party rule authors can call it from their own tests.
"""
from __future__ import annotations

import textwrap
from typing import Iterable, Optional, Union

from .config import Settings
from .engine import fix_text, lint_text
from .files import SourceError
from .project import ProjectIndex
from .rule import Invalid, Valid


def _settings(overrides: dict) -> Settings:
    values = {k.replace("-", "_"): tuple(v) if isinstance(v, list) else v for k, v in overrides.items()}
    return Settings(target_given="target" in values, **values)


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
    """Run the rule's embedded ``VALID`` / ``INVALID`` examples (failure messages; empty:
    all pass)."""
    return check_examples(rule, rule.valid_examples(), rule.invalid_examples())


def check_examples(rule, valid: Iterable[Union[Valid, str]], invalid: Iterable[Union[Invalid, str]]) -> list[str]:
    """Check ``rule`` on examples kept outside it (a test file's regression cases),
    exactly as on its embedded ones."""
    valid = [v if isinstance(v, Valid) else Valid(v) for v in valid]
    invalid = [v if isinstance(v, Invalid) else Invalid(v) for v in invalid]
    failures: list[str] = []
    for i, example in enumerate(valid):
        try:
            findings, _, errors = run_example(rule, example.code, example.settings)
        except SourceError as exc:
            failures.append(f"{rule.code} VALID[{i}]: example does not parse: {exc}")
            continue
        if errors:
            failures.append(f"{rule.code} VALID[{i}]: {errors[0]}")
        if findings:
            failures.append(f"{rule.code} VALID[{i}]: expected no finding, got {[f'{f.line}: {f.message}' for f in findings]}")
    for i, example in enumerate(invalid):
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


#: the sections of every rule's ``docs``, in this order (Ruff's shape); "Fix safety"
#: only for a rule that fixes
DOC_SECTIONS = ("What it does", "Why is this bad?", "Example", "Use instead", "Fix safety")


def doc_sections(docs: str) -> dict[str, str]:
    """``## Heading`` -> the text under it, in order."""
    sections: dict[str, str] = {}
    current = None
    for line in docs.splitlines():
        if line.startswith("## "):
            current = line[3:].strip()
            sections[current] = ""
        elif current is not None:
            sections[current] += line + "\n"
    return sections


def first_code_block(text: str) -> Optional[str]:
    """The first fenced ````python`` block of a docs section."""
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.strip() == "```python":
            end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), None)
            return "".join(lines[i + 1:end]) if end is not None else None
    return None


def check_rule_docs(rule) -> list[str]:
    """The docs have exactly the sections of :data:`DOC_SECTIONS`, in order; the
    first code block under "Example" triggers the rule and the first under "Use
    instead" does not (each must be a whole module: imports included)."""
    failures: list[str] = []
    sections = doc_sections(rule.docs)
    wanted = list(DOC_SECTIONS if rule.fix_applicability is not None else DOC_SECTIONS[:-1])
    if list(sections) != wanted:
        failures.append(f"{rule.code} docs: sections {list(sections)}, expected {wanted}")
    if rule.fix_applicability is not None and "Fix safety" in sections:
        word = f"`{rule.fix_applicability.value}`"
        if word not in sections["Fix safety"]:
            failures.append(f"{rule.code} docs: \"Fix safety\" does not say the fix is {word}")
    for section, should_fire in (("Example", True), ("Use instead", False)):
        code = first_code_block(sections.get(section, ""))
        if code is None:
            failures.append(f"{rule.code} docs: no ```python block under {section!r}")
            continue
        try:
            findings, _, errors = run_example(rule, code, rule.doc_settings)
        except SourceError as exc:
            failures.append(f"{rule.code} docs {section}: does not parse: {exc}")
            continue
        failures += [f"{rule.code} docs {section}: {e}" for e in errors]
        fired = [f for f in findings if f.code == rule.code]
        if should_fire and not fired:
            failures.append(f"{rule.code} docs: the {section} code does not trigger the rule")
        if not should_fire and fired:
            failures.append(f"{rule.code} docs: the {section} code triggers the rule: {fired[0].line}: {fired[0].message}")
    return failures
