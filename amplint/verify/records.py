"""verify's typed records: one level's run, a static finding as verify judges it, and the
report on a target.

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


@dataclasses.dataclass
class LevelRun:
    """One opt level's run of the model (:meth:`amplint.verify.runner.LevelRunner.run_level`):
    its losses and loss scales, the crash that ended it, the statistics of each module and
    op site, where inf/NaN were first made and seen, the lines that ran.  Its JSON
    (``to_json``) is the ``before``/``after`` entry of verify's report: fields in this order,
    ``last_step_skipped`` only once an optimizer step ran.  The nested items (crash, sites,
    modules, origin) are the runner's plain data."""

    level: str
    dtype: str
    #: describe_crash's record of what ended the run (None: it ran every step)
    crash: Optional[dict] = None
    losses: list = dataclasses.field(default_factory=list)
    loss_scales: list = dataclasses.field(default_factory=list)
    skipped_steps: int = 0
    #: step 0's output against the fp32 run's (None: the fp32 run itself, or no output)
    output_rel_err: Optional[float] = None
    loss_rel_err: Optional[float] = None
    modules: list = dataclasses.field(default_factory=list)
    sites: list = dataclasses.field(default_factory=list)
    first_nonfinite_module: Optional[str] = None
    first_nonfinite_site: Optional[dict] = None  # {file, line, op}
    origin: Optional[dict] = None
    seconds: float = 0.0
    nonfinite_loss: bool = False
    #: whether the loss scaler skipped the last optimizer step (None: no step was taken)
    last_step_skipped: Optional[bool] = None
    #: file -> the lines that ran (None: lines were not traced)
    executed: Optional[dict] = None

    def to_json(self) -> dict:
        out = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.name == "last_step_skipped" and value is None:
                continue  # only once a step was taken
            out[field.name] = value
        return out

    @classmethod
    def from_json(cls, data: dict) -> "LevelRun":
        return cls(**data)


def runs_json(runs: Optional[dict]) -> Optional[dict]:
    """level -> LevelRun as level -> plain data (None stays None)."""
    return None if runs is None else {level: r.to_json() if isinstance(r, LevelRun) else r for level, r in runs.items()}


def typed_runs(runs: Optional[dict]) -> Optional[dict]:
    """level -> plain data as level -> LevelRun (None stays None)."""
    return None if runs is None else {level: LevelRun.from_json(r) if isinstance(r, dict) else r
                                      for level, r in runs.items()}


@dataclasses.dataclass
class VerifyReport:
    """Everything ``amplint verify PATH::FACTORY`` reports on one target: the runs of the
    original code (``before``: level -> run) and, with ``--fix``, of the fixed copies
    (``after``), the findings judged against them, the run-time problems no rule
    predicted, the exit status.  Built step by step by :func:`amplint.verify.core.finish`."""

    target: str
    device: str
    dtype: str
    levels: list  # the selected levels, O0 (the fp32 reference) left out
    steps: int
    seed: int
    tolerance: float
    loss: str
    optimizer: str
    files: list = dataclasses.field(default_factory=list)  # the user's source files the model came from
    before: dict = dataclasses.field(default_factory=dict)  # level -> LevelRun
    after: Optional[dict] = None  # level -> LevelRun
    findings: list = dataclasses.field(default_factory=list)  # VerifyFinding
    problems: list = dataclasses.field(default_factory=list)
    runtime_only: list = dataclasses.field(default_factory=list)  # the problems no finding explains
    #: how much the fixes changed the fp32 (O0) run (None: no fixed run, or both crashed)
    fp32_change: Optional[float] = None
    fixed_files: dict = dataclasses.field(default_factory=dict)  # path -> diff
    lint_errors: list = dataclasses.field(default_factory=list)
    fix: bool = False
    warnings: list = dataclasses.field(default_factory=list)
    notes: list = dataclasses.field(default_factory=list)
    #: the fp32 run crashed or produced inf/NaN and the fixes repaired it
    fp32_repaired: bool = False
    failing_levels: list = dataclasses.field(default_factory=list)
    failing_levels_after: Optional[list] = None
    exit_status: int = 0
    model_output: str = ""

    def to_json(self) -> dict:
        out = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.name == "fp32_repaired" and not value:
                continue  # only when it happened
            if field.name == "findings":
                value = [f.to_json() for f in value]
            elif field.name in ("before", "after"):
                value = runs_json(value)
            out[field.name] = value
        return out

    @classmethod
    def from_json(cls, data: dict) -> "VerifyReport":
        return cls(**{**data, "findings": [VerifyFinding.from_json(f) if isinstance(f, dict) else f
                                           for f in data.get("findings", ())],
                      "before": typed_runs(data.get("before", {})), "after": typed_runs(data.get("after"))})


def plain(report: VerifyReport) -> dict:
    """A verify report as plain data (JSON-able but for NaN/inf): what the Python API and
    ``--format json`` give."""
    return report.to_json() if isinstance(report, VerifyReport) else report


def typed(report) -> VerifyReport:
    """The report :func:`plain` made, as a record again (the reporters read those)."""
    return VerifyReport.from_json(report) if isinstance(report, dict) else report
