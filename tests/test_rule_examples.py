"""Every registered rule's embedded VALID / INVALID examples, one test per rule."""
import pytest

from amplint.registry import all_rules
from amplint.testing import check_rule_docs, check_rule_examples

RULES = all_rules()


def test_rules_are_registered():
    assert RULES, "no rules found in amplint.rules"


@pytest.mark.parametrize("rule", RULES, ids=[r.code for r in RULES])
def test_rule_examples(rule):
    assert rule.VALID and rule.INVALID, f"{rule.code} must embed VALID and INVALID examples"
    failures = check_rule_examples(rule)
    assert not failures, "\n\n".join(failures)


@pytest.mark.parametrize("rule", RULES, ids=[r.code for r in RULES])
def test_rule_docs(rule):
    """One shape for every rule's docs (What it does / Why is this bad? / Example / Use
    instead / Fix safety), and the doc examples are real: Example triggers the rule,
    Use instead does not."""
    failures = check_rule_docs(rule)
    assert not failures, "\n".join(failures)


def test_doc_check_catches_a_quiet_example():
    """The doc check fails a rule whose Example does not trigger it."""
    from amplint.rules.amp501_apex_amp_import import ApexAmpImport

    class Quiet(ApexAmpImport):
        docs = ApexAmpImport.docs.replace("from apex import amp", "from amplint import amp")

    assert any("Example code does not trigger" in f for f in check_rule_docs(Quiet))
