"""Every registered rule's embedded VALID / INVALID examples, one test per rule."""
import pytest

from amplint.registry import all_rules
from amplint.testing import check_rule_examples

RULES = all_rules()


def test_rules_are_registered():
    assert RULES, "no rules found in amplint.rules"


@pytest.mark.parametrize("rule", RULES, ids=[r.code for r in RULES])
def test_rule_examples(rule):
    assert rule.VALID and rule.INVALID, f"{rule.code} must embed VALID and INVALID examples"
    failures = check_rule_examples(rule)
    assert not failures, "\n\n".join(failures)


@pytest.mark.parametrize("rule", RULES, ids=[r.code for r in RULES])
def test_rule_docs_have_ruff_sections(rule):
    for section in ("## What it does", "## Why is this bad?", "## Example"):
        assert section in rule.docs, f"{rule.code} docs lack {section!r}"
