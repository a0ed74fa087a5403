"""verify's typed records: a static finding as verify judges it.

The linter's finding (merged over the levels whose settings predict it, in
``lintfix.lint``) gets the evidence of the original code's runs and a status; with
``--fix`` the evidence of the fixed copies' runs and, from them, its final status.  Its
JSON (``to_json``) is what ``amplint verify --format json`` and the Python API give:
fields in this order, the optional ones only when they were decided.
"""
from __future__ import annotations

import dataclasses
from typing import Optional


@dataclasses.dataclass
class VerifyFinding:
    code: str
    rule: str
    message: str
    path: str  # canonical (real) path
    line: int
    end_line: int
    column: int  # 1-based characters, as the linter reports
    #: None when the finding's span is one point (nothing to match a column range against)
    end_column: Optional[int]
    severity: str
    fix: Optional[str] = None  # the fix's applicability: safe, unsafe, display
    fix_description: Optional[str] = None
    #: what a display fix asks the training script to register: [module, function, kind]
    registrations: list = dataclasses.field(default_factory=list)
    #: the selected levels whose lint settings report this finding
    levels: list = dataclasses.field(default_factory=list)
    #: what the original code's runs show of it (analysis.evidence records)
    evidence: list = dataclasses.field(default_factory=list)
    status: str = ""
    #: the fixed copies' evidence (None: no fixed run)
    after_evidence: Optional[list] = None
    #: why none of its lines ran at any of its levels
    not_executed: Optional[str] = None
    #: gone from the fixed text (None: nothing was fixed)
    fixed_by_lint: Optional[bool] = None
    #: first reached once the fixes removed an earlier crash, and judged on that run
    reached_after_fix: bool = False
    #: the levels at which the fixed copy crashed (status "fixed run crashed")
    after_crash: Optional[list] = None

    def to_json(self) -> dict:
        out = {
            "code": self.code, "rule": self.rule, "message": self.message, "path": self.path, "line": self.line,
            "end_line": self.end_line, "column": self.column, "end_column": self.end_column, "severity": self.severity,
            "fix": self.fix, "fix_description": self.fix_description, "registrations": self.registrations,
            "levels": self.levels, "evidence": self.evidence, "status": self.status,
            "after_evidence": self.after_evidence,
        }
        if self.not_executed is not None:
            out["not_executed"] = self.not_executed
        if self.fixed_by_lint is not None:
            out["fixed_by_lint"] = self.fixed_by_lint
        if self.reached_after_fix:
            out["reached_after_fix"] = True
        if self.after_crash is not None:
            out["after_crash"] = self.after_crash
        return out


    @classmethod
    def from_json(cls, data: dict) -> "VerifyFinding":
        return cls(**data)


def plain(report: dict) -> dict:
    """A verify report as plain data (JSON-able but for NaN/inf): what the Python API and
    ``--format json`` give."""
    return {**report, "findings": [f.to_json() if isinstance(f, VerifyFinding) else f for f in report["findings"]]}


def typed(report: dict) -> dict:
    """The report :func:`plain` made, with its findings as records again (the reporters
    read those)."""
    return {**report, "findings": [VerifyFinding.from_json(f) if isinstance(f, dict) else f for f in report["findings"]]}
