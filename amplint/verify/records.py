"""verify's typed records: one level's run and its items (the crash, each module's and op
site's statistics, where inf/NaN were first made and seen), a static finding as verify
judges it with its evidence, and the report on a target.

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
    #: what the original code's runs show of it (Evidence)
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
            "levels": self.levels, "evidence": evidence_json(self.evidence), "status": self.status,
            "after_evidence": evidence_json(self.after_evidence),
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
        return cls(**{**data, "evidence": typed_evidence(data.get("evidence", [])),
                      "after_evidence": typed_evidence(data.get("after_evidence"))})


def _fields(record) -> dict:
    """A record's fields in their order, shallow (nested records stay records)."""
    return {field.name: getattr(record, field.name) for field in dataclasses.fields(record)}


def _json_of(value):
    return value.to_json() if value is not None else None


@dataclasses.dataclass
class Crash:
    """What ended a run (:func:`amplint.verify.runner.describe_crash`): the exception, the
    phase and step, and the innermost frame in the user's files with the span of the
    expression that raised (columns: Python 3.11+ tracebacks)."""

    type: str
    message: str
    phase: str
    step: int
    file: Optional[str] = None
    line: Optional[int] = None
    end_line: Optional[int] = None
    column: Optional[int] = None
    end_column: Optional[int] = None
    code: Optional[str] = None  # the source line as the traceback shows it
    #: the fixed copy's path when a fixed copy crashed (``file`` is then the original's)
    file_copy: Optional[str] = None

    def to_json(self) -> dict:
        out = _fields(self)
        if self.file_copy is None:
            del out["file_copy"]  # only for a fixed copy's crash
        return out

    @classmethod
    def from_json(cls, data: dict) -> "Crash":
        return cls(**data)


@dataclasses.dataclass
class TensorStats:
    """The statistics of every tensor one module (or op site) produced over a run: calls,
    abs-max, smallest non-zero, inf and NaN counts, dtypes, and against the fp32 run the
    largest relative error and the share of values that underflowed to 0."""

    calls: int
    absmax: float
    min_nonzero: Optional[float]
    inf: int
    nan: int
    dtypes: list
    rel_err: Optional[float]
    underflow: Optional[float]
    underflow_count: int
    #: a call had more inf/NaN than the fp32 run's
    new_nonfinite: bool

    def to_json(self) -> dict:
        return _fields(self)

    @classmethod
    def from_json(cls, data: dict):
        return cls(**data)


@dataclasses.dataclass
class GradStats(TensorStats):
    """A module's output gradients."""

    #: (step, call order) of the first call with more inf/NaN than the fp32 run's
    first_new_nonfinite: Optional[tuple]


@dataclasses.dataclass
class ForwardStats(GradStats):
    """A module's forward outputs."""

    first_order: Optional[list]  # (step, call order) of its first call
    order: Optional[int]  # when it first returned


@dataclasses.dataclass
class Site(TensorStats):
    """One torch call site in the user's code (the per-expression trace) and its statistics."""

    file: str
    line: int
    op: str
    first_new_nonfinite: Optional[tuple]
    #: a call got an inf/NaN input: its zeros and errors may be inherited, not made there
    inputs_nonfinite: bool
    order: Optional[int]
    end_line: int
    column: Optional[int]
    end_column: Optional[int]


@dataclasses.dataclass
class SiteRef:
    """Where the first new inf/NaN was seen (a :class:`Site`'s place).  It names no
    expression, column or step, as an :class:`Origin` does."""

    file: str
    line: int
    op: str

    expr = None
    column = None
    step = None

    def to_json(self) -> dict:
        return _fields(self)

    @classmethod
    def from_json(cls, data: dict) -> "SiteRef":
        return cls(**data)


@dataclasses.dataclass
class OutputRange:
    """What one call site produced: abs-max of the finite values, smallest non-zero, inf and
    NaN counts, dtypes."""

    absmax: float
    min_nonzero: Optional[float]
    inf: int
    nan: int
    dtypes: list

    def to_json(self) -> dict:
        return _fields(self)

    @classmethod
    def from_json(cls, data: dict) -> "OutputRange":
        return cls(**data)


@dataclasses.dataclass
class Origin:
    """The call that made (``inputs_finite``) or first showed a run's first inf/NaN: its
    place and expression, what it produced, the step."""

    file: str
    line: int
    op: str
    end_line: int
    column: Optional[int] = None
    end_column: Optional[int] = None
    expr: Optional[str] = None
    inputs_finite: bool = False
    output: Optional[OutputRange] = None
    step: Optional[int] = None  # set once the run knows it (step 0's census, or a later step's replay)

    def to_json(self) -> dict:
        out = _fields(self)
        out["output"] = _json_of(self.output)
        if self.step is None:
            del out["step"]
        return out

    @classmethod
    def from_json(cls, data: dict) -> "Origin":
        output = data.get("output")
        return cls(**{**data, "output": OutputRange.from_json(output) if output is not None else None})


@dataclasses.dataclass
class ClassSource:
    """Where a user module class is defined (:func:`amplint.verify.target.class_source`)."""

    file: Optional[str]
    line: int
    forward_line: Optional[int] = None
    end_line: Optional[int] = None

    def to_json(self) -> dict:
        return _fields(self)

    @classmethod
    def from_json(cls, data: dict) -> "ClassSource":
        return cls(**data)


@dataclasses.dataclass
class Place:
    """A file and line (where a module was constructed)."""

    file: str
    line: int

    def to_json(self) -> dict:
        return _fields(self)

    @classmethod
    def from_json(cls, data: dict) -> "Place":
        return cls(**data)


@dataclasses.dataclass
class ModuleStats:
    """One module of the model in a run: its weight's shape, name and class, where its class
    is defined and where it was built, its forward outputs' and gradients' statistics."""

    weight_shape: Optional[list]
    name: str
    class_name: str  # ``class`` in the JSON
    source: Optional[ClassSource]
    constructed: Optional[Place]
    forward: ForwardStats
    grad: GradStats

    def to_json(self) -> dict:
        return {"weight_shape": self.weight_shape, "name": self.name, "class": self.class_name,
                "source": _json_of(self.source), "constructed": _json_of(self.constructed),
                "forward": self.forward.to_json(), "grad": self.grad.to_json()}

    @classmethod
    def from_json(cls, data: dict) -> "ModuleStats":
        source, constructed = data.get("source"), data.get("constructed")
        return cls(data["weight_shape"], data["name"], data["class"],
                   ClassSource.from_json(source) if source is not None else None,
                   Place.from_json(constructed) if constructed is not None else None,
                   ForwardStats.from_json(data["forward"]), GradStats.from_json(data["grad"]))


@dataclasses.dataclass
class Evidence:
    """What one run shows of a finding (:func:`amplint.verify.analysis.evidence`): the
    level, the kind (crash, inf/NaN, underflow, divergence, fp32 path, slow path), what
    happened and on which line."""

    level: str
    kind: str
    detail: str
    line: Optional[int] = None

    def to_json(self) -> dict:
        return _fields(self)

    @classmethod
    def from_json(cls, data: dict) -> "Evidence":
        if list(data)[2:3] == ["line"]:
            return OriginEvidence(**data)
        return cls(**data)


@dataclasses.dataclass
class OriginEvidence(Evidence):
    """Evidence from the origin of a run's first inf/NaN (its JSON names the line before
    the detail)."""

    def to_json(self) -> dict:
        return {"level": self.level, "kind": self.kind, "line": self.line, "detail": self.detail}


def evidence_json(items: Optional[list]) -> Optional[list]:
    return None if items is None else [e.to_json() if isinstance(e, Evidence) else e for e in items]


def typed_evidence(items: Optional[list]) -> Optional[list]:
    return None if items is None else [Evidence.from_json(e) if isinstance(e, dict) else e for e in items]


@dataclasses.dataclass
class Problem:
    """A run-time problem of one level (:func:`amplint.verify.analysis.problems`): a crash,
    inf/NaN, skipped steps, a divergence or an underflow, where it happened, and the
    findings that predicted it (``explained_by``, once judged)."""

    level: str
    kind: str
    file: Optional[str]
    line: Optional[int]
    detail: str
    #: ``CODE:path:line`` of each finding that predicted it (None: not judged yet)
    explained_by: Optional[list] = None

    column = None  # (only an origin's problem names a column)

    def _extra(self) -> dict:
        return {}

    def to_json(self) -> dict:
        out = {"level": self.level, "kind": self.kind, "file": self.file, "line": self.line, **self._extra(),
               "detail": self.detail}
        if self.explained_by is not None:
            out["explained_by"] = self.explained_by
        return out

    @classmethod
    def from_json(cls, data: dict) -> "Problem":
        if "column" in data:
            kind = OriginProblem
        elif "origin" in data:
            kind = ReferenceProblem
        elif "module" in data:
            kind = ModuleProblem
        else:
            kind = Problem
        origin = data.get("origin")
        return kind(**{**data, **({"origin": Origin.from_json(origin) if origin is not None else None}
                                  if "origin" in data else {})})


@dataclasses.dataclass
class ModuleProblem(Problem):
    """A problem seen at a module's output (inf/NaN first seen there, or an underflow)."""

    module: Optional[str] = None

    def _extra(self) -> dict:
        return {"module": self.module}


@dataclasses.dataclass
class OriginProblem(Problem):
    """inf/NaN traced to the call that made (or first showed) them: its column, module and origin."""

    column: Optional[int] = None
    module: Optional[str] = None
    origin: Optional[Origin] = None

    def _extra(self) -> dict:
        return {"column": self.column, "module": self.module, "origin": _json_of(self.origin)}


@dataclasses.dataclass
class ReferenceProblem(Problem):
    """inf/NaN in the fp32 (O0) run itself, with its origin when traced."""

    origin: Optional[Origin] = None

    def _extra(self) -> dict:
        return {"origin": _json_of(self.origin)}


def problems_json(items: list) -> list:
    return [p.to_json() if isinstance(p, Problem) else p for p in items]


def typed_problems(items: list) -> list:
    return [Problem.from_json(p) if isinstance(p, dict) else p for p in items]


@dataclasses.dataclass
class LevelRun:
    """One opt level's run of the model (:meth:`amplint.verify.runner.LevelRunner.run_level`):
    its losses and loss scales, the crash that ended it, the statistics of each module and
    op site, where inf/NaN were first made and seen, the lines that ran.  Its JSON
    (``to_json``) is the ``before``/``after`` entry of verify's report: fields in this order,
    ``last_step_skipped`` only once an optimizer step ran.  Its items are records too
    (:class:`Crash`, :class:`ModuleStats`, :class:`Site`, :class:`SiteRef`, :class:`Origin`)."""

    level: str
    dtype: str
    #: what ended the run (None: it ran every step)
    crash: Optional[Crash] = None
    losses: list = dataclasses.field(default_factory=list)
    loss_scales: list = dataclasses.field(default_factory=list)
    skipped_steps: int = 0
    #: step 0's output against the fp32 run's (None: the fp32 run itself, or no output)
    output_rel_err: Optional[float] = None
    loss_rel_err: Optional[float] = None
    modules: list = dataclasses.field(default_factory=list)  # ModuleStats
    sites: list = dataclasses.field(default_factory=list)  # Site
    first_nonfinite_module: Optional[str] = None
    first_nonfinite_site: Optional[SiteRef] = None
    origin: Optional[Origin] = None
    seconds: float = 0.0
    nonfinite_loss: bool = False
    #: whether the loss scaler skipped the last optimizer step (None: no step was taken)
    last_step_skipped: Optional[bool] = None
    #: file -> the lines that ran (None: lines were not traced)
    executed: Optional[dict] = None

    def to_json(self) -> dict:
        out = _fields(self)
        if self.last_step_skipped is None:
            del out["last_step_skipped"]  # only once a step was taken
        out.update(crash=_json_of(self.crash), modules=[m.to_json() for m in self.modules],
                   sites=[site.to_json() for site in self.sites], first_nonfinite_site=_json_of(self.first_nonfinite_site),
                   origin=_json_of(self.origin))
        return out

    @classmethod
    def from_json(cls, data: dict) -> "LevelRun":
        def typed(record, value):
            return record.from_json(value) if isinstance(value, dict) else value

        return cls(**{**data, "crash": typed(Crash, data.get("crash")),
                      "modules": [typed(ModuleStats, m) for m in data.get("modules", ())],
                      "sites": [typed(Site, site) for site in data.get("sites", ())],
                      "first_nonfinite_site": typed(SiteRef, data.get("first_nonfinite_site")),
                      "origin": typed(Origin, data.get("origin"))})


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
    problems: list = dataclasses.field(default_factory=list)  # Problem
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
            elif field.name in ("problems", "runtime_only"):
                value = problems_json(value)
            out[field.name] = value
        return out

    @classmethod
    def from_json(cls, data: dict) -> "VerifyReport":
        return cls(**{**data, "findings": [VerifyFinding.from_json(f) if isinstance(f, dict) else f
                                           for f in data.get("findings", ())],
                      "before": typed_runs(data.get("before", {})), "after": typed_runs(data.get("after")),
                      "problems": typed_problems(data.get("problems", [])),
                      "runtime_only": typed_problems(data.get("runtime_only", []))})


def plain(report: VerifyReport) -> dict:
    """A verify report as plain data (JSON-able but for NaN/inf): what the Python API and
    ``--format json`` give."""
    return report.to_json() if isinstance(report, VerifyReport) else report


def typed(report) -> VerifyReport:
    """The report :func:`plain` made, as a record again (the reporters read those)."""
    return VerifyReport.from_json(report) if isinstance(report, dict) else report
