"""``amplint/amp/policy.py`` is the only op table: how an op runs under O1/O2/autocast, which
ops are GEMM-like, which have no half kernel.  A second table elsewhere in the linter, engine
or verifier drifts from it (``dtypes.py`` once ran an einsum list of its own in half while
the policy left einsum out).  This scans every module for a collection literal naming three
or more such ops and fails on one that is not a known, different kind of table."""
from __future__ import annotations

import ast
import pathlib
import sys

from amplint.amp import policy

ROOT = pathlib.Path(__file__).resolve().parent.parent

#: (file, line of the table's first line) -> why it is not a second policy table
NOT_POLICY = {
    ("amplint/analysis/dims.py", "GEMM_FUNCTIONS"): "signatures: which argument is the weight (layer sizes)",
    ("amplint/fp8/survey.py", "_GEMM_CALLS"): "signatures: which argument is the weight (fp8 sizes)",
    ("amplint/analysis/constants.py", "_DTYPE_PRESERVING_FUNCS"): "native result dtype, no casting",
    ("rules/amp301_softmax_in_half.py", "_FUNCTIONS"): "the rule's subject: which functions are a softmax",
}
#: names whose tables are text filters, not op facts
FILTERS = ("markers",)
_POLICIES = (("amplint", "cuda"), ("torch", "cuda"), ("torch", "cpu"))


def _policy_op(name) -> bool:
    """An op name the policy has something to say about: a family (GEMM, no half kernel,
    FFT), or a qualified name on a cast list."""
    if not isinstance(name, str) or not name.replace(".", "").replace("_", "").isalnum():
        return False
    qualname = name if name.startswith("torch.") or name in policy.GEMM_EXTERNAL else "torch." + name
    if policy.op_family(qualname) is not None or policy.op_family("torch.linalg." + name) is not None:
        return True
    return name.startswith("torch.") and any(policy.cast_of(name, p, d) for p, d in _POLICIES)


def _strings(node: ast.AST) -> list:
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant)]
    if isinstance(node, ast.Dict):
        return [k.value for k in node.keys if isinstance(k, ast.Constant)]
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "split"
            and isinstance(node.func.value, ast.Constant) and isinstance(node.func.value.value, str)):
        return node.func.value.value.split()
    return []


def _owner(tree: ast.AST, node: ast.AST):
    """The name a table is assigned to (module or class level), else None."""
    for stmt in ast.walk(tree):
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            if any(sub is node for sub in ast.walk(stmt.value)):
                names = [t.id for t in targets if isinstance(t, ast.Name)]
                if names:
                    return names[0]
    return None


def second_tables() -> list[str]:
    found = []
    files = sorted([*ROOT.glob("amplint/**/*.py"), *ROOT.glob("rules/*.py")])
    for path in files:
        rel = path.relative_to(ROOT).as_posix()
        if rel == "amplint/amp/policy.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            hits = [s for s in _strings(node) if _policy_op(s)]
            if len(hits) < 3:
                continue
            owner = _owner(tree, node)
            if owner in FILTERS or (rel, owner) in NOT_POLICY:
                continue
            found.append(f"{rel}:{node.lineno} ({owner or 'inline'}): {hits[:6]}")
    return found


def test_no_second_op_table():
    assert second_tables() == [], "op tables outside amplint/amp/policy.py (move them into the policy)"


def test_the_scan_finds_a_second_table(tmp_path, monkeypatch):
    """The scan is not vacuous: an inline GEMM list like the one dtypes.py had is found."""
    (tmp_path / "amplint").mkdir()
    (tmp_path / "amplint" / "bad.py").write_text(
        'def f(short):\n    return short in ("einsum", "matmul", "bmm", "tensordot")\n')
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert [t.split(" ")[0] for t in second_tables()] == ["amplint/bad.py:2"]


def test_linter_reads_the_policy(monkeypatch):
    """What the linter says about an op follows the policy's data: a GEMM the policy gains is
    a GEMM to AMP401 (the family) and to the dtype flow (half under O1)."""
    assert policy.op_family("torch.einsum") == policy.GEMM
    assert policy.op_family("torch.Tensor.inverse") == policy.FP32_ONLY
    assert policy.op_family("torch.rfft") == policy.FFT  # the pre-1.8 spelling
    monkeypatch.setattr(policy, "GEMM_EXTRA", policy.GEMM_EXTRA | {"chain_kron"})
    assert policy.op_family("torch.chain_kron") == policy.GEMM
    from amplint.analysis import ops
    assert ops.family("torch.chain_kron") == policy.GEMM
    # RUNS_AS: names that reach a listed op under another name are cast like it
    assert policy.cast_of("torch.nn.functional.gumbel_softmax", "torch", "cuda") == policy.FLOAT
    assert policy.cast_of("torch.special.softmax", "torch", "cuda") == policy.FLOAT
