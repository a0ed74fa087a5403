"""apex's own amp tests (``tests/L0/run_amp``) against amplint.amp, per test (issue 26).

    python bench/apex_run_amp.py --apex-tests /tmp/apex_src/tests/L0/run_amp [--json OUT]

apex's code is never part of this repository. Get the tests from apex's repository at
e13873de (the parent of cb65b8ed, "remove old features: amp, ddp, and rnn")::

    git clone https://github.com/NVIDIA/apex && cd apex
    git archive e13873de tests/L0/run_amp | tar -x -C /tmp/apex_src

What runs (the method of shared/reports/apex-suite-2026-12-01.md, with amplint's own apex
surface in place of that report's adapter):

* A temporary folder holds a shim package ``apex``: ``apex.amp`` *is* ``amplint.amp`` (the
  same module objects aliased in ``sys.modules``, so ``from apex.amp import _amp_state`` gets
  whatever amplint itself offers, nothing added), and ``apex.parallel.LARC`` is a small
  LARC written here (apex's is a pure-Python wrapper around a torch optimizer; test_larc only
  checks that amp accepts such a wrapper). There is no ``amp_C``, ``apex.optimizers`` or
  ``apex.multi_tensor_apply``: the tests that need apex's CUDA extensions skip themselves.
* The tests are copied there and ported to the CPU by device strings only
  (``torch.cuda.XTensor`` -> ``torch.XTensor``, ``device='cuda'`` -> ``'cpu'``,
  ``.to('cuda')`` -> ``.to('cpu')``, ``.cuda()`` -> ``.cpu()``); no assertion, tolerance or
  loop is touched. ``--no-port`` runs them verbatim (on CUDA).
* Each file runs in its own pytest process (apex's tests set process-wide state: default tensor
  type, the amp session), with a junit XML read back per test.

Classes: ``pass``; ``fail`` (with the error's first line); ``needs apex internals`` (an apex name
amplint does not provide: missing attribute or import of ``apex.amp``); ``needs apex CUDA
extension`` (skipped or failed for ``amp_C`` / ``apex.optimizers`` / ``apex.multi_tensor_apply``).
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

PASS, FAIL, INTERNALS, EXTENSION, SKIP = (
    "pass", "fail", "needs apex internals", "needs apex CUDA extension", "skipped")
CLASSES = (PASS, FAIL, INTERNALS, EXTENSION)

_SHIM_INIT = '''\
"""apex -> amplint shim for running apex's tests: apex.amp is amplint.amp, nothing added."""
import sys

import amplint.amp as amp
try:  # amplint's own apex-internals view, where the installed amplint has one
    import amplint.amp._amp_state  # noqa: F401
except ImportError:
    pass
for _name, _module in list(sys.modules.items()):
    if _name == "amplint.amp" or _name.startswith("amplint.amp."):
        sys.modules["apex" + _name[len("amplint"):]] = _module
'''

# A LARC (You, Gitman, Ginsburg 2017, arXiv:1708.03888) written for this shim: a wrapper that is
# not a torch.optim.Optimizer, exposing the wrapped optimizer's param_groups/state, which
# rescales each gradient by the layer-wise trust ratio before stepping.
_SHIM_LARC = '''\
import torch


class LARC:
    def __init__(self, optimizer, trust_coefficient=0.02, clip=True, eps=1e-8):
        self.optim = optimizer
        self.trust_coefficient, self.clip, self.eps = trust_coefficient, clip, eps

    param_groups = property(lambda self: self.optim.param_groups,
                            lambda self, groups: setattr(self.optim, "param_groups", groups))
    state = property(lambda self: self.optim.state)

    def zero_grad(self, *args, **kwargs):
        return self.optim.zero_grad(*args, **kwargs)

    def add_param_group(self, group):
        self.optim.add_param_group(group)

    def state_dict(self):
        return self.optim.state_dict()

    def load_state_dict(self, state):
        self.optim.load_state_dict(state)

    @torch.no_grad()
    def step(self, closure=None):
        decays = [group.get("weight_decay", 0) for group in self.optim.param_groups]
        for group, decay in zip(self.optim.param_groups, decays):
            group["weight_decay"] = 0          # folded into the gradient below
            for p in group["params"]:
                if p.grad is None:
                    continue
                w_norm, g_norm = p.norm(), p.grad.norm()
                if w_norm == 0 or g_norm == 0:
                    continue
                ratio = self.trust_coefficient * w_norm / (g_norm + decay * w_norm + self.eps)
                if self.clip:
                    ratio = min(ratio / group["lr"], 1)
                p.grad.add_(p, alpha=decay).mul_(ratio)
        try:
            return self.optim.step(closure)
        finally:
            for group, decay in zip(self.optim.param_groups, decays):
                group["weight_decay"] = decay
'''

_PORTS = (
    (re.compile(r"torch\.cuda\.(\w+Tensor)\b"), r"torch.\1"),
    (re.compile(r"""device=(['"])cuda\1"""), r"device=\1cpu\1"),
    (re.compile(r"""\.to\((['"])cuda\1\)"""), r".to(\1cpu\1)"),
    (re.compile(r"\.cuda\(\)"), ".cpu()"),
)
_EXTENSION_MARKS = ("amp_C", "apex.optimizers", "apex.multi_tensor_apply", "multi_tensor_apply")
_INTERNALS_MARKS = (
    re.compile(r"module 'amplint\.amp[\w.]*' has no attribute"),
    re.compile(r"cannot import name '\w+' from '(amplint|apex)\.amp"),
    re.compile(r"No module named 'apex\.amp\."),
    re.compile(r"'_AmpStateView' object has no attribute|object has no attribute '_deactivate'"),
)


@dataclass
class TestResult:
    file: str
    test: str
    result: str
    detail: str = ""


def port_to_cpu(text: str) -> tuple[str, int]:
    """The CPU port: device strings only. Returns the text and how many lines changed."""
    out, changed = [], 0
    for line in text.splitlines(keepends=True):
        new = line
        for pattern, repl in _PORTS:
            new = pattern.sub(repl, new)
        changed += new != line
        out.append(new)
    return "".join(out), changed


def build(apex_tests: Path, root: Path, port: bool) -> tuple[Path, Path, int]:
    shim, tests = root / "shim", root / "run_amp"
    (shim / "apex" / "parallel").mkdir(parents=True)
    (shim / "apex" / "__init__.py").write_text(_SHIM_INIT)
    (shim / "apex" / "parallel" / "__init__.py").write_text("")
    (shim / "apex" / "parallel" / "LARC.py").write_text(_SHIM_LARC)
    shutil.copytree(apex_tests, tests)
    changed = 0
    if port:
        for path in sorted(tests.glob("*.py")):
            text, n = port_to_cpu(path.read_text())
            path.write_text(text)
            changed += n
    return shim, tests, changed


def declared_tests(path: Path) -> list[str]:
    """Class.method of every test a file declares (so a file that fails to import still lists
    each of its tests)."""
    names = []
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ClassDef):
            names += [f"{node.name}.{f.name}" for f in node.body
                      if isinstance(f, ast.FunctionDef) and f.name.startswith("test")]
    return names


def first_line(text: str) -> str:
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()[:200]
    return ""


def classify(message: str, full: str, skipped: bool) -> str:
    blob = f"{message}\n{full}"
    if skipped:
        return EXTENSION if any(m in blob for m in _EXTENSION_MARKS) else SKIP
    if any(p.search(blob) for p in _INTERNALS_MARKS):
        return INTERNALS
    if re.search(r"No module named '(amp_C|apex\.optimizers|apex\.multi_tensor_apply)'", blob):
        return EXTENSION
    return FAIL


def error_line(element: ET.Element) -> str:
    """The exception line (``E   X: ...``) of a junit failure, else its message."""
    for line in (element.text or "").splitlines():
        if line.startswith("E   ") and line[4:].strip():
            return line[4:].strip()[:200]
    return first_line(element.get("message", ""))


def run_file(python: str, path: Path, shim: Path, tests: Path, xml: Path, timeout: int,
             amplint_src: Path | None = None):
    paths = [str(shim), str(tests)] + ([str(amplint_src)] if amplint_src else [])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths),
               PYTHONDONTWRITEBYTECODE="1")
    cmd = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tests),
           f"--junitxml={xml}", str(path)]
    try:
        proc = subprocess.run(cmd, cwd=tests, env=env, capture_output=True, text=True,
                              timeout=timeout)
        return proc.stdout + proc.stderr
    except subprocess.TimeoutExpired:
        return f"timeout after {timeout} s"


def results_for(path: Path, xml: Path, log: str) -> list[TestResult]:
    declared = declared_tests(path)
    found: dict[str, TestResult] = {}
    collection_error = ""
    if xml.exists():
        for case in ET.parse(xml).getroot().iter("testcase"):
            cls = case.get("classname", "").rsplit(".", 1)[-1]
            name = f"{cls}.{case.get('name')}"
            problem = next((c for c in case if c.tag in ("failure", "error", "skipped")), None)
            if problem is None:
                found[name] = TestResult(path.stem, name, PASS)
                continue
            full = problem.text or ""
            result = classify(problem.get("message", ""), full, problem.tag == "skipped")
            detail = error_line(problem)
            if name not in declared:          # a collection error: the whole file failed
                collection_error = collection_error or f"{result}: {detail}"
                continue
            found[name] = TestResult(path.stem, name, result, detail)
    out = []
    for name in declared:
        if name in found:
            out.append(found[name])
        elif collection_error:
            result, _, detail = collection_error.partition(": ")
            out.append(TestResult(path.stem, name, result, "import: " + detail))
        else:
            out.append(TestResult(path.stem, name, FAIL, "not run: " + first_line(log[-400:])))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--apex-tests", type=Path, required=True,
                    help="apex's tests/L0/run_amp folder, extracted")
    ap.add_argument("--json", type=Path, help="write the per-test results here")
    ap.add_argument("--python", default=sys.executable,
                    help="interpreter whose amplint is measured (default: this one)")
    ap.add_argument("--amplint-src", type=Path,
                    help="a checkout whose amplint/ is imported instead of the installed one "
                         "(e.g. a `git worktree` of an older commit)")
    ap.add_argument("--no-port", action="store_true", help="run the files verbatim (CUDA)")
    ap.add_argument("--jobs", type=int, default=2, help="files run at the same time")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per file")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = ap.parse_args(argv)
    if not (args.apex_tests / "utils.py").is_file():
        print(f"{args.apex_tests}: not apex's tests/L0/run_amp (no utils.py)", file=sys.stderr)
        return 2

    root = Path(tempfile.mkdtemp(prefix="apex_run_amp_"))
    try:
        shim, tests, changed = build(args.apex_tests, root, port=not args.no_port)
        files = sorted(tests.glob("test_*.py"))
        started = time.monotonic()
        with ThreadPoolExecutor(max(1, args.jobs)) as pool:   # each job is a subprocess
            futures = {f: pool.submit(run_file, args.python, f, shim, tests,
                                      root / f"{f.stem}.xml", args.timeout, args.amplint_src)
                       for f in files}
            logs = {f: fut.result() for f, fut in futures.items()}
        results = [r for f in files for r in results_for(f, root / f"{f.stem}.xml", logs[f])]
        elapsed = time.monotonic() - started
        version = subprocess.run(
            [args.python, "-c", "import amplint, torch, sys; print(amplint.__file__, "
             "torch.__version__, sys.version.split()[0])"], capture_output=True, text=True, cwd=tests,
            env=dict(os.environ, PYTHONPATH=str(args.amplint_src or ""))).stdout.strip()
    finally:
        if args.keep:
            print(f"kept {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)

    width = max(len(f"{r.file}::{r.test}") for r in results)
    for r in results:
        detail = f"  {r.detail}" if r.result != PASS and r.detail else ""
        print(f"{r.file + '::' + r.test:<{width}}  {r.result}{detail}")
    totals = {c: sum(r.result == c for r in results) for c in CLASSES + (SKIP,)}
    print()
    print(" | ".join(f"{c}: {n}" for c, n in totals.items() if n or c in CLASSES)
          + f" | tests: {len(results)} in {len(files)} files")
    print(f"amplint, torch, python: {version}; CPU port: {changed} lines changed"
          f"{' (verbatim)' if args.no_port else ''}; {elapsed:.0f} s")
    if args.json:
        args.json.write_text(json.dumps({
            "apex_tests": str(args.apex_tests), "versions": version,
            "ported_lines": changed, "seconds": round(elapsed, 1), "totals": totals,
            "tests": [asdict(r) for r in results]}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
