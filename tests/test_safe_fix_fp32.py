"""What "safe" means for a fix (issues 13 and 24), checked on every fixture with an
``example()`` and a golden ``X.py.fixed`` (what ``amplint fix`` writes in its folder):

1. in fp32 the outputs before and after the fix are ``torch.equal``, not merely close;
2. under the engine the file trains with (its folder's settings, ``engine = "auto"``
   resolved as ``check`` resolves it), at every level that engine offers from the
   configured one up -- amplint O1, O2, O3 in the target's half dtype (a project set to O2
   is not held to O1, where no cast back can be right for both), or ``torch.autocast`` in
   fp16 and bf16 (on this machine's CPU) -- the fixed output is no further from the fp32 reference than the
   original's: never a narrower dtype, never a crash or inf/NaN where the original ran,
   and a mean error no larger.  A fix that computes in fp32 and casts back to half where
   the engine already computes in fp32 fails here (x.log_softmax(-1) under O1).

A level at which the original itself cannot run on CPU (fp16 ``cholesky``, ``fft``) has
nothing to compare; the fixed code may run there or fail too."""
import ast
import importlib.machinery
import importlib.util
import os
import sys

import pytest
import torch

from amplint import amp, engine_detect
from amplint.config import ConfigResolver

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "fixtures")


def _runnable_goldens() -> list[str]:
    out = []
    for folder, _, names in os.walk(FIXTURES):
        for name in names:
            path = os.path.join(folder, name)
            if name.endswith(".py") and os.path.exists(path + ".fixed"):
                with open(path, encoding="utf-8") as fh:
                    if "\ndef example(" in fh.read():
                        out.append(os.path.relpath(path, FIXTURES))
    return sorted(out)


def _outputs(path: str, tag: str, level: str = "fp32", half=torch.float16) -> tuple:
    """Run ``example()`` of ``path`` (a module of its folder, which is put on sys.path)
    in fp32, under amplint's engine at ``level`` (O1-O3), or under ``torch.autocast``
    (``level == "autocast"``) in ``half``."""
    name = f"_amplint_fp32_{tag}_{abs(hash(path))}"
    loader = importlib.machinery.SourceFileLoader(name, path)
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader))
    sys.modules[name] = module  # fixed code may register on sys.modules[__name__]
    sys.path.insert(0, os.path.dirname(path))
    try:
        loader.exec_module(module)
        torch.manual_seed(0)
        model, inputs = module.example()
        with torch.no_grad():
            if level == "fp32":
                out = model(*inputs)
            elif level == "autocast":
                with torch.autocast("cpu", dtype=half):
                    out = model(*inputs)
            else:
                model = amp.initialize(model, opt_level=level, verbosity=0, half_dtype=half)
                try:
                    out = model(*inputs)
                finally:
                    amp.reset()
    finally:
        sys.path.remove(os.path.dirname(path))
        sys.modules.pop(name, None)
    return out if isinstance(out, tuple) else (out,)


def engine_levels(path: str) -> list[tuple[str, torch.dtype]]:
    """The (level, half dtype) runs of the engine ``check`` assumes for ``path``."""
    with open(path, encoding="utf-8") as fh:
        source = fh.read()
    settings = engine_detect.resolve(ConfigResolver().for_path(path), path, source, ast.parse(source), None)
    if settings.engine == "torch":
        return [("autocast", torch.float16), ("autocast", torch.bfloat16)]
    half = torch.bfloat16 if settings.target == "bf16" else torch.float16
    levels = ("O1", "O2", "O3")
    return [(level, half) for level in levels[max(0, levels.index(settings.opt_level)) if settings.opt_level in levels else 0:]]


def _error(outputs, reference) -> float:
    """The mean abs difference from the fp32 reference (of the worst output); inf for
    inf/NaN where the reference is finite.  The mean, not the max: two half results that
    differ by one rounding trade places element by element (reductions/classifier.py at
    O2: max 0.000985 -> 0.00108 while the mean goes 0.000369 -> 0.000360), whereas a
    result rounded to half that was fp32 moves the mean by the whole rounding."""
    worst = 0.0
    for out, ref in zip(outputs, reference):
        diff = (out.double() - ref.double()).abs()
        diff = torch.where(torch.isfinite(diff) | ~torch.isfinite(ref.double()), diff, torch.inf)
        worst = max(worst, diff.nan_to_num(0.0).mean().item() if diff.numel() else 0.0)
    return worst


RUNNABLE = _runnable_goldens()


def test_some_goldens_run():
    assert len(RUNNABLE) >= 20, RUNNABLE


@pytest.mark.parametrize("rel", RUNNABLE)
def test_safe_fix_keeps_fp32_output_bit_identical(rel):
    torch.set_num_threads(1)
    path = os.path.join(FIXTURES, rel)
    before = _outputs(path, "orig")
    after = _outputs(path + ".fixed", "safe")
    assert len(before) == len(after), rel
    for a, b in zip(before, after):
        assert a.dtype == b.dtype and torch.equal(a, b), f"{rel}: a safe fix changed the fp32 output"


@pytest.mark.parametrize("rel", RUNNABLE)
def test_safe_fix_is_no_less_precise_under_the_engine(rel):
    torch.set_num_threads(1)
    path = os.path.join(FIXTURES, rel)
    reference = _outputs(path, "ref")
    for level, half in engine_levels(path):
        where = f"{rel} at {level} {str(half).replace('torch.', '')}"
        try:
            before = _outputs(path, "orig", level, half)
        except (RuntimeError, NotImplementedError):
            continue  # the CPU cannot run the original at this level: nothing to compare
        after = _outputs(path + ".fixed", "safe", level, half)  # a crash here is a failure
        for a, b in zip(before, after):
            if a.is_floating_point():
                assert b.dtype.itemsize >= a.dtype.itemsize, f"{where}: the fix narrows {a.dtype} to {b.dtype}"
        old, new = _error(before, reference), _error(after, reference)
        assert new <= old, f"{where}: the fix moves the output further from fp32 (mean error {old:.3g} -> {new:.3g})"
