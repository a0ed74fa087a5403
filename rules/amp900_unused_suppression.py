"""AMP900 unused-suppression: a suppression comment that silences nothing.

The findings are made by the engine (amplint/engine.py, after the other rules ran and
suppressions were applied): this class is the rule's code, name, documentation and
selection switch.  Selecting it (``--extend-select AMP900``, ``select = ["AMP900"]``, or
``--report-unused-suppressions``) turns the report on."""
from __future__ import annotations

from amplint.rule import Invalid, Rule, Severity, Valid


class UnusedSuppression(Rule):
    code = "AMP900"
    name = "unused-suppression"
    summary = "a `# amplint: ignore` or `# noqa` comment that silences no finding"
    severity = Severity.WARNING  # opted into to keep suppressions clean: it fails the run, as Ruff RUF100 does
    enabled_by_default = False
    # no markers: the engine reads the comments of every file when the rule is selected
    docs = """
## What it does
Reports suppression comments that silence nothing on their statement: `# amplint: ignore`,
`# amplint: ignore[AMP101]`, and `# noqa: AMP101` when the code names a selected rule. It is
off by default; turn it on with `--extend-select AMP900` (or `--report-unused-suppressions`,
or `extend-select = ["AMP900"]` in `[tool.amplint]`).

A bare `# noqa` and `# noqa` codes of other linters (`E501`) or of rules that are not
selected are left alone: they may be there for another tool or another configuration.

## Why is this bad?
A suppression outlives the hazard it was written for. Once the code is fixed (the `-1e9`
became `torch.finfo(x.dtype).min`, the epsilon was raised), the comment stays and silently
hides the next hazard on that statement: a later `masked_fill(mask, -1e9)` added to the
same line is never reported. Removing stale comments keeps every suppression a
decision someone made about a finding that is still there.

## Example
```python
import torch


def masked_scores(scores, pad):
    # -1e4 fits fp16 (its range ends at 65504), so AMP101 has nothing to report here
    return scores.masked_fill(pad, -1e4)  # amplint: ignore[AMP101]
```

## Use instead
```python
import torch


def masked_scores(scores, pad):
    return scores.masked_fill(pad, -1e4)
```
"""

    VALID = [
        Valid("""
            x = 1
            """),
        Valid("""
            long_line = 1  # noqa: E501
            """),
        Valid("""
            anything = 1  # noqa
            """),
    ]
    INVALID = [
        Invalid("""
            import torch
            y = torch.zeros(3).masked_fill(torch.ones(3, dtype=torch.bool), -1e4)  # amplint: ignore[AMP101]
            """,
            line=2,
            message="Unused suppression of AMP101",
            severity="warning",
            expected_fix=None),
        Invalid("""
            y = 2  # amplint: ignore
            """,
            line=1,
            message="Unused suppression: nothing to silence",
            expected_fix=None),
    ]
