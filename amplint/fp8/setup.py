"""Which fp8 training setup the linted project shows, so that AMP7xx findings say what
the project actually uses (the fp8 side of ``engine = "auto"``, :mod:`amplint.engine_detect`).

Evidence, read from every linted file into its summary under :data:`FACT`:

* torchao: ``convert_to_float8_training(...)``, ``Float8LinearConfig(...)`` /
  ``.from_recipe_name("rowwise")`` (the recipe), ``module_filter_fn=`` (a filter exists);
* TransformerEngine: ``import transformer_engine``, ``te.fp8_autocast`` /
  ``te.autocast``, ``te.Linear`` (its own modules: nothing is swapped);
* torchtitan: ``"quantize.linear.float8"`` / ``Float8Converter`` / ``--float8.*`` in a file;
* accelerate: ``mixed_precision="fp8"``;

and whether the file calls ``torch.compile`` / ``.compile()`` (AMP705), and the short
string literals of a file that converts (names a ``module_filter_fn`` already skips,
AMP704).  Never imports torch.
"""
from __future__ import annotations

import ast
import dataclasses
import re
from typing import Optional

from ..engine_detect import SetupNodes, dotted_name  # one spelling of a dotted name for both detectors

FACT = "@fp8"
#: substrings without which a file holds no evidence
MARKERS = ("float8", "Float8", "transformer_engine", "fp8", "torch.compile")
_LABELS = {"torchao": "torchao convert_to_float8_training", "te": "TransformerEngine",
           "torchtitan": "torchtitan quantize.linear.float8", "accelerate": "accelerate mixed_precision='fp8'"}
_RANK = {"torchao": 0, "torchtitan": 1, "te": 2, "accelerate": 3}
_TITAN = re.compile(r"quantize\.linear\.float8|Float8Converter|--float8\.")


@dataclasses.dataclass(frozen=True)
class Fp8Evidence:
    kind: str  # torchao | te | torchtitan | accelerate
    path: str
    line: int
    column: int  # 1-based
    what: str
    recipe: Optional[str] = None


def _recipe(call: ast.Call) -> Optional[str]:
    for arg in list(call.args) + [k.value for k in call.keywords]:
        if isinstance(arg, ast.Constant) and arg.value in ("tensorwise", "rowwise", "rowwise_with_gw_hp"):
            return "rowwise" if arg.value.startswith("rowwise") else "tensorwise"
        name = dotted_name(arg)
        if name and name.rsplit(".", 1)[-1] in ("TENSORWISE", "ROWWISE", "ROWWISE_WITH_GW_HP"):
            return "tensorwise" if name.endswith("TENSORWISE") else "rowwise"
    return None


def collect(setup: SetupNodes, path: str, source: str) -> Optional[dict]:
    """This file's fp8 facts (JSON-able), or None."""
    if not any(m in source for m in MARKERS):
        return None
    found: list[Fp8Evidence] = []
    compiles: list[int] = []
    converts: list[int] = []
    filters = False

    def add(kind, node, what, recipe=None):
        found.append(Fp8Evidence(kind, path, node.lineno, node.col_offset + 1, what, recipe))

    for node in setup.nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "transformer_engine":
                    add("te", node, f"import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "transformer_engine":
            add("te", node, f"from {node.module} import ...")
        elif isinstance(node, ast.Call):
            name = dotted_name(node.func) or ""
            last = name.rsplit(".", 1)[-1]
            if last == "convert_to_float8_training":
                converts.append(node.lineno)
                filters = filters or any(k.arg == "module_filter_fn" for k in node.keywords)
                add("torchao", node, "convert_to_float8_training(...)")
            elif last in ("Float8LinearConfig", "from_recipe_name") and ("Float8" in name or last == "Float8LinearConfig"):
                add("torchao", node, f"{name}(...)", _recipe(node))
            elif last in ("fp8_autocast", "autocast") and name.split(".")[0] in ("te", "transformer_engine"):
                add("te", node, f"{name}(...)")
            elif last == "compile" and name.split(".")[0] not in ("re", "regex", "builtins", "ast", "py_compile"):
                compiles.append(node.lineno)  # torch.compile(m), model.compile(); not re.compile(...)
            for k in node.keywords:
                if k.arg == "mixed_precision" and isinstance(k.value, ast.Constant) and k.value.value == "fp8":
                    add("accelerate", node, f"{last}(mixed_precision='fp8')")
        elif isinstance(node, ast.Attribute) and node.attr == "compile" and dotted_name(node) == "torch.compile":
            compiles.append(node.lineno)  # passed as a function: functools.partial(torch.compile, ...)
    match = _TITAN.search(source)
    if match:
        line = source.count("\n", 0, match.start()) + 1
        found.append(Fp8Evidence("torchtitan", path, line, 1, match.group(0)))
    if not found and not compiles:
        return None
    strings = sorted({n.value for n in ast.walk(setup.tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                      and 0 < len(n.value) <= 40}) if converts else []
    return {"evidence": [dataclasses.astuple(e) for e in found], "compiles": sorted(set(compiles)),
            "converts": converts, "filters": filters, "strings": strings}


@dataclasses.dataclass(frozen=True)
class Fp8Setup:
    """What the linted files show about fp8 training, for one file's findings."""

    evidence: tuple[Fp8Evidence, ...]
    #: some linted file calls torch.compile
    compiled: bool
    #: string literals of the files that convert (names a filter mentions)
    filter_strings: frozenset
    has_filter: bool

    @property
    def kind(self) -> Optional[str]:
        return min((e.kind for e in self.evidence), key=_RANK.__getitem__) if self.evidence else None

    @property
    def recipe(self) -> str:
        recipes = [e.recipe for e in self.evidence if e.recipe]
        return recipes[0] if recipes else "tensorwise"

    @property
    def swaps_linears(self) -> bool:
        """torchao and torchtitan swap nn.Linear modules; TransformerEngine has its own."""
        return self.kind in (None, "torchao", "torchtitan", "accelerate")

    def label(self) -> str:
        if not self.evidence:
            return "fp8 setup: none found in the linted files, torchao assumed"
        kind = self.kind
        e = min((e for e in self.evidence if e.kind == kind), key=lambda e: (e.path, e.line))
        import os

        return f"fp8 setup: {_LABELS[kind]} ({os.path.basename(e.path)}:{e.line})"


class ProjectFp8Setup:
    """``ctx.get(ProjectFp8Setup).setup``: the fp8 setup of the run, built once per file."""

    def __init__(self, ctx):
        self.setup = project_setup(ctx)


def project_setup(ctx) -> Fp8Setup:
    """The fp8 setup of the run ``ctx`` belongs to: this file and every linted file."""
    facts = []
    own = collect(ctx.get(SetupNodes), ctx.path, ctx.source)
    if own:
        facts.append(own)
    if ctx.project is not None:
        facts.extend(data for path, data in ctx.project.facts(FACT) if path != ctx.path)
    evidence = tuple(Fp8Evidence(*e) for data in facts for e in data.get("evidence", ()))
    return Fp8Setup(evidence, any(data.get("compiles") for data in facts),
                    frozenset(s for data in facts for s in data.get("strings", ())),
                    any(data.get("filters") for data in facts))
