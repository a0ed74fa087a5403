"""Issue 13: a safe fix keeps fp32 output bit-identical.  Every fixture with an
``example()`` and a golden ``X.py.fixed`` (what ``amplint fix`` writes) runs in fp32 before
and after the fix: the outputs must be ``torch.equal``, not merely close."""
import importlib.machinery
import importlib.util
import os
import sys

import pytest
import torch

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


def _outputs(path: str, tag: str) -> tuple:
    """Run ``example()`` of ``path`` (a module of its folder, which is put on sys.path)."""
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
            out = model(*inputs)
    finally:
        sys.path.remove(os.path.dirname(path))
        sys.modules.pop(name, None)
    return out if isinstance(out, tuple) else (out,)


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
