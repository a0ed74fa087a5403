"""pytest plugin (entry point ``pytest11 amplint``): the ``amp_verify`` fixture.

::

    def test_model_is_fp16_safe(amp_verify):
        model, inputs = build_tiny_model(), (torch.randn(4, 32),)
        amp_verify(model, inputs, levels=("O1", "O2"))      # fails the test with the report

``amp_verify(model, inputs, levels=("O1", "O2"), dtype="fp16", steps=3, tolerance=None,
loss="auto", device=None, seed=0, lint=True)`` trains a deep copy of the fp32 model at O0 and
at each level with the bundled engine, and calls ``pytest.fail`` with the text report when a
level crashes or produces inf/NaN, or when the output differs from fp32 beyond ``tolerance``
(only when ``tolerance`` is given).  It returns the report (plain data) otherwise.  The model
may also be given as a factory: ``amp_verify(make)`` with ``make() -> (model, inputs)``.

Note: this runs the model (it is a runtime check); findings from the linter on the model's
source files are listed in the report but do not fail the test by themselves.
"""
from __future__ import annotations

import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "amp_verify: tests that run models under amplint's AMP engine")


@pytest.fixture
def amp_verify():
    def run(model, inputs=None, levels=("O1", "O2"), dtype="fp16", steps=3, tolerance=None, loss="auto",
            device=None, seed=0, lint=True, optimizer="adamw", lr=1e-4):
        from amplint.optional import is_missing_torch, missing_torch

        try:
            from amplint.verify import _config, format_report
            from amplint.verify.core import verify_factory
            from amplint.verify.records import plain
            from amplint.verify.target import model_factory

            import torch.nn as nn
        except ModuleNotFoundError as exc:
            if not is_missing_torch(exc):
                raise
            pytest.fail(missing_torch("the amp_verify fixture"), pytrace=False)

        if isinstance(model, nn.Module):
            if inputs is None:
                inputs = getattr(model, "example_inputs", None)
                if inputs is None:
                    raise TypeError("amp_verify(model, inputs): pass example inputs (or give the model `example_inputs`)")
            make = model_factory(model, inputs)
            name = type(model).__name__
        elif callable(model):
            make, name = model, getattr(model, "__name__", "factory")
        else:
            raise TypeError(f"amp_verify: expected an nn.Module or a factory, got {type(model).__name__}")
        cfg = _config(levels, dtype, device, steps, loss, seed, tolerance, optimizer, lr)
        report = verify_factory(make, cfg, name=name, lint=lint)
        diverged = [lvl for lvl, r in report.before.items()
                    if tolerance is not None and lvl != "O0" and r.output_rel_err is not None and r.output_rel_err > tolerance]
        if report.exit_status or diverged:
            why = f" (output differs from fp32 beyond {tolerance:g} at {', '.join(diverged)})" if diverged else ""
            pytest.fail(f"model is not mixed-precision safe at {', '.join(report.levels)}{why}\n\n" + format_report(report), pytrace=False)
        return plain(report)  # plain data, as amplint.verify.verify_model returns

    return run
