"""The rule API: what a rule is, what it reports, and how a fix is described.

A rule is a class in its own file under ``rules/`` (shipped as ``amplint.rules``).
It never parses a file: the engine parses each file once with :mod:`ast`, walks it
once, and calls every rule's ``visit_<NodeType>(node, ctx)`` methods with one shared
:class:`amplint.context.FileContext`.  A rule reports through ``ctx.report(...)``.

Fixes are text edits anchored at ``ast`` positions (line 1-based, column a 0-based
UTF-8 byte offset, exactly what ``ast`` gives), so everything outside an edit is kept
byte for byte -- comments, formatting, line endings.  ``ctx.report`` is the one place
they change coordinates: like the finding's own columns, the edits of a reported
finding are in characters from there on (applied, cached, shown and sent to an editor
alike).  The engine re-parses every fixed
file and reverts it if the result is not valid Python.

Each rule embeds its own tests (``VALID`` / ``INVALID``), run for every rule by one
generic test (``tests/test_rule_examples.py``) and by ``amplint.testing``.
"""
from __future__ import annotations

import ast
import dataclasses
import enum
from typing import Any, ClassVar, Iterable, Optional, Sequence, Union


class Severity(str, enum.Enum):
    """How bad a finding is.  ``error``: the fp16 run fails or produces inf/NaN;
    ``warning``: it silently loses accuracy or speed; ``info``: worth a look, often
    already handled by the mixed-precision policy."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


class Applicability(str, enum.Enum):
    """``safe``: cannot change fp32 behaviour, applied by ``amplint fix``.
    ``unsafe``: may change numerics or architecture, applied with ``--unsafe-fixes``.
    ``display``: shown as a suggestion, never applied."""

    SAFE = "safe"
    UNSAFE = "unsafe"
    DISPLAY = "display"


@dataclasses.dataclass(frozen=True)
class Position:
    """A point in a file.  A rule makes them from ``ast`` nodes (``col``: the 0-based
    UTF-8 byte offset ``ast`` gives); :meth:`amplint.context.FileContext.report` turns
    them into 0-based *character* columns, what every :class:`Finding`'s fix holds."""

    line: int  # 1-based
    col: int  # 0-based: UTF-8 bytes in a rule's hands, characters in a reported Finding

    @classmethod
    def start_of(cls, node: ast.AST) -> "Position":
        return cls(node.lineno, node.col_offset)

    @classmethod
    def end_of(cls, node: ast.AST) -> "Position":
        return cls(node.end_lineno, node.end_col_offset)


@dataclasses.dataclass(frozen=True)
class Edit:
    """Replace the text between ``start`` and ``end`` with ``text`` (insert when equal)."""

    start: Position
    end: Position
    text: str

    @classmethod
    def replace(cls, node: ast.AST, text: str) -> "Edit":
        return cls(Position.start_of(node), Position.end_of(node), text)

    @classmethod
    def insert_before(cls, node: ast.AST, text: str) -> "Edit":
        p = Position.start_of(node)
        return cls(p, p, text)

    @classmethod
    def insert_after(cls, node: ast.AST, text: str) -> "Edit":
        p = Position.end_of(node)
        return cls(p, p, text)

    @classmethod
    def insert_at(cls, line: int, col: int, text: str) -> "Edit":
        p = Position(line, col)
        return cls(p, p, text)


@dataclasses.dataclass(frozen=True)
class Fix:
    edits: tuple[Edit, ...]
    applicability: Applicability
    description: str
    #: what the training script registers with the O1 engine before ``amp.initialize`` for
    #: this fix, as ``(module, function, kind)``: a ``display`` fix shows them for the user to
    #: add there; ``amplint verify``, the training script of its own runs, makes them
    registrations: tuple[tuple[str, str, str], ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "edits", tuple(self.edits))
        object.__setattr__(self, "registrations", tuple(tuple(r) for r in self.registrations))
        object.__setattr__(self, "applicability", Applicability(self.applicability))


@dataclasses.dataclass(frozen=True)
class Related:
    """Another place a finding depends on (a constant's definition, a config default)."""

    path: str
    line: int
    column: int  # 1-based, like findings in reports
    note: str


@dataclasses.dataclass
class Finding:
    path: str
    line: int  # 1-based
    column: int  # 1-based, in characters
    end_line: int
    end_column: int
    code: str
    rule: str
    message: str
    severity: Severity
    fix: Optional[Fix] = None
    related: list[Related] = dataclasses.field(default_factory=list)
    #: identifies the finding across line shifts (amplint/baseline.py); set by the engine
    fingerprint: str = dataclasses.field(default="", compare=False)
    #: the reported node, for suppression lookup in the file it came from; never
    #: serialised, compared or sent between processes (the engine drops it first)
    node: Optional[ast.AST] = dataclasses.field(default=None, compare=False, repr=False)

    def sort_key(self):
        return (self.path, self.line, self.column, self.code)

    def to_dict(self) -> dict:
        """The JSON shape documented in the README (``--format json``).

        A fix's edits are given like the finding: 1-based lines and 1-based character
        columns (a reported finding's edits are in characters already)."""
        def edit(e: Edit) -> dict:
            return {"line": e.start.line, "column": e.start.col + 1, "end_line": e.end.line,
                    "end_column": e.end.col + 1, "content": e.text}

        return {
            "path": self.path,
            "line": self.line,
            "column": self.column,
            "end_line": self.end_line,
            "end_column": self.end_column,
            "code": self.code,
            "rule": self.rule,
            "message": self.message,
            "severity": self.severity.value,
            "fix": None
            if self.fix is None
            else {
                "applicability": self.fix.applicability.value,
                "description": self.fix.description,
                "edits": [edit(e) for e in self.fix.edits],
                **({"registrations": [list(r) for r in self.fix.registrations]} if self.fix.registrations else {}),
            },
            "related": [dataclasses.asdict(r) for r in self.related],
            "fingerprint": self.fingerprint,
        }

    @classmethod
    def from_dict(cls, d: dict) -> "Finding":
        """The finding :meth:`to_dict` wrote (the cache's entries)."""
        fix = None
        if d["fix"] is not None:
            edits = [Edit(Position(e["line"], e["column"] - 1), Position(e["end_line"], e["end_column"] - 1), e["content"])
                     for e in d["fix"]["edits"]]
            fix = Fix(edits, d["fix"]["applicability"], d["fix"]["description"], d["fix"].get("registrations", ()))
        return cls(
            d["path"], d["line"], d["column"], d["end_line"], d["end_column"], d["code"], d["rule"],
            d["message"], Severity(d["severity"]), fix, [Related(**r) for r in d["related"]], d["fingerprint"],
        )


# --- embedded examples ------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Valid:
    """Code on which the rule must report nothing."""

    code: str
    settings: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Invalid:
    """Code on which the rule must report.

    ``line``: the 1-based line of the (first) finding, when given.
    ``count``: how many findings of this rule, when given.
    ``message``: a substring the (first) finding's message must contain.
    ``expected_fix``: the whole code after applying this rule's fixes (``None``: the
    rule must offer no fix).  ``unsafe`` fixes are applied too.
    ``severity``: the (first) finding's severity, when given.
    """

    code: str
    line: Optional[int] = None
    count: Optional[int] = None
    message: Optional[str] = None
    expected_fix: Optional[str] = None
    severity: Optional[str] = None
    settings: dict = dataclasses.field(default_factory=dict)


class Rule:
    """Base class of every rule.

    Subclasses set the class attributes and define ``visit_<ast node class
    name>(self, node, ctx)`` methods, which the engine calls after its one walk of each
    file, grouped by node type: every node of a type in source order, then the next type.  The hooks below are no-ops here; override the ones a rule
    needs.  The engine calls every hook on every rule, so none is looked up by name.

    One instance of a rule lints many files (one per worker process and set of selected
    rules), so a
    rule keeps nothing about a file on ``self``: what it needs across visits of one
    file lives in the state object ``begin_file`` returns, read back with
    ``ctx.state(self)``."""

    code: ClassVar[str] = ""
    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    #: Ruff-shaped documentation: "What it does", "Why is this bad?" (with numbers),
    #: "Example", "Use instead".  Markdown; shown by ``amplint explain``.
    docs: ClassVar[str] = ""
    severity: ClassVar[Severity] = Severity.WARNING
    #: the most permissive applicability any fix of the rule has (None: never fixes); a rule
    #: whose fixes are safe in some cases and unsafe in others declares both,
    #: ``("safe", "unsafe")``: ``fix_applicabilities`` keeps them all (what ``amplint rules``
    #: shows) and ``fix_applicability`` the first
    fix_applicability: ClassVar[Optional[Applicability]] = None
    fix_applicabilities: ClassVar[tuple[Applicability, ...]] = ()
    enabled_by_default: ClassVar[bool] = True
    #: the ``[tool.amplint]`` keys that change what the rule reports or how it fixes
    #: (``target``, ``opt-level``, ``device``, ``engine``, ``alignment``, ``fix-style``);
    #: listed under "Options" by ``amplint explain`` and on the rule's page
    options: ClassVar[tuple[str, ...]] = ()
    #: where the rule's documentation lives, for a plugin's rule (SARIF ``helpUri``, the
    #: language server's code link); a bundled rule's page is docs/rules/<CODE>.md
    docs_url: ClassVar[str] = ""
    #: whether findings depend on the mixed-precision engine (its op policy or its ``amp``
    #: module): with ``engine = "auto"`` their messages name the engine assumed, and where
    #: it was decided is a related location
    uses_engine: ClassVar[bool] = False
    #: substrings of which at least one must occur in a file for the rule to matter;
    #: lets the engine skip files cheaply.  Empty: the rule looks at every file.
    markers: ClassVar[tuple[str, ...]] = ()
    #: True when the rule can report nothing in a file that holds none of its
    #: ``markers`` (a finding needs one spelled out: ``apex``): the engine then does not
    #: run it on such a file.  Off by default: most rules' markers only gate whole files
    #: (a cast to ``torch.half`` is AMP603's without any of its markers).
    markers_required: ClassVar[bool] = False
    #: substrings of which at least one must occur in a file for :meth:`collect` to
    #: find anything there.  Empty with ``collect`` overridden: every file is summarised.
    collect_markers: ClassVar[tuple[str, ...]] = ()
    #: the settings the docs' Example / Use instead blocks are linted with (a rule active
    #: only for one target, ``{"target": "fp8"}``)
    doc_settings: ClassVar[dict] = {}
    VALID: ClassVar[Sequence[Union[Valid, str]]] = ()
    INVALID: ClassVar[Sequence[Union[Invalid, str]]] = ()

    # --- hooks ---------------------------------------------------------------------

    def begin_file(self, ctx) -> Any:
        """Called once per file before the walk.  Returns this rule's state for the
        file (best a small dataclass; None when the rule needs none); visitors and
        :meth:`end_file` get it back from ``ctx.state(self)``."""
        return None

    def end_file(self, ctx) -> None:
        """Called once per file after the walk: for findings that need the whole file
        (collected in the state during the walk, reported here)."""

    @classmethod
    def collect(cls, ctx) -> Any:
        """Facts this file gives the other files of the run (JSON-able, or None for
        none).  Runs in the summary pass, before any file is linted; the merged results
        reach every rule as ``ctx.project.facts(code)``.  See :mod:`amplint.project`."""
        return None

    @classmethod
    def collects(cls) -> bool:
        """Whether the rule overrides :meth:`collect` (the summary pass skips it otherwise)."""
        return cls.collect.__func__ is not Rule.collect.__func__

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.code:
            missing = [a for a in ("name", "summary", "docs") if not getattr(cls, a)]
            if missing:
                raise TypeError(f"rule {cls.__name__} ({cls.code}) lacks {', '.join(missing)}")
            cls.severity = Severity(cls.severity)
            declared = cls.fix_applicability
            if isinstance(declared, (tuple, list)):
                cls.fix_applicabilities = tuple(Applicability(a) for a in declared)
                cls.fix_applicability = cls.fix_applicabilities[0]
            elif declared is not None:
                cls.fix_applicability = Applicability(declared)
                cls.fix_applicabilities = (cls.fix_applicability,)
            else:
                cls.fix_applicabilities = ()

    @classmethod
    def visitors(cls) -> dict[str, str]:
        """Map ast node class name -> method name, for the engine's dispatch table."""
        cached = cls.__dict__.get("_visitors_cache")
        if cached is not None:
            return cached
        out = {}
        for attr in dir(cls):
            if attr.startswith("visit_") and callable(getattr(cls, attr)):
                out[attr[len("visit_"):]] = attr
        cls._visitors_cache = out
        return out

    @classmethod
    def valid_examples(cls) -> Iterable[Valid]:
        return [v if isinstance(v, Valid) else Valid(v) for v in cls.VALID]

    @classmethod
    def invalid_examples(cls) -> Iterable[Invalid]:
        return [v if isinstance(v, Invalid) else Invalid(v) for v in cls.INVALID]
