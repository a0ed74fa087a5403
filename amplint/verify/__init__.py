"""amplint's runtime verifier: run a model under the bundled AMP engine at O0 (the fp32
reference) and O1-O3, measure every module and source line, and prove which static findings
come true and whether each fix removes them.

Unlike the linter, this imports and runs the user's code (and torch).

Python API::

    from amplint.verify import verify, verify_model
    report = verify("models/attention.py::example", levels=("O1", "O2"), fix=True)
    report = verify_model(model, (tokens, mask), levels=("O2",))
    report["exit_status"], report["findings"], report["runtime_only"]

The pytest plugin (entry point ``pytest11``) provides the ``amp_verify`` fixture.
"""
from __future__ import annotations

from typing import Any, Iterable, Optional


def _config(levels, dtype, device, steps, loss, seed, tolerance, optimizer="adamw", lr=1e-4, trace=True):
    from .config import parse_levels
    from .runner import RunConfig

    return RunConfig(levels=parse_levels(list(levels) if not isinstance(levels, str) else levels), dtype=dtype,
                     device=device, steps=steps, loss=loss, seed=seed, tolerance=tolerance, optimizer=optimizer,
                     lr=lr, census=trace)


def verify(target: str, levels: Iterable[str] = ("O1", "O2"), dtype: str = "fp16", device: Optional[str] = None,
           steps: int = 3, loss: str = "auto", seed: int = 0, tolerance: Optional[float] = None, fix: bool = False,
           unsafe_fixes: bool = False, optimizer: str = "adamw", lr: float = 1e-4, lint: bool = True) -> dict:
    """Verify ``PATH::FACTORY`` (imports and runs it).  Returns the report (plain data)."""
    from .core import verify_target
    from .target import Target

    from .records import plain

    cfg = _config(levels, dtype, device, steps, loss, seed, tolerance, optimizer, lr)
    return plain(verify_target(Target.parse(target), cfg, fix=fix or unsafe_fixes, unsafe=unsafe_fixes, lint=lint))


def verify_model(model, inputs: Any, levels: Iterable[str] = ("O1", "O2"), dtype: str = "fp16",
                 device: Optional[str] = None, steps: int = 3, loss: str = "auto", seed: int = 0,
                 tolerance: Optional[float] = None, optimizer: str = "adamw", lr: float = 1e-4,
                 lint: bool = True, name: str = "model") -> dict:
    """Verify an fp32 model object with example inputs (each level trains a deep copy)."""
    from .core import verify_factory
    from .target import model_factory

    from .records import plain

    cfg = _config(levels, dtype, device, steps, loss, seed, tolerance, optimizer, lr)
    return plain(verify_factory(model_factory(model, inputs), cfg, name=name, lint=lint))


def format_report(report: dict, width: int = 140) -> str:
    """The text report of one verify result."""
    import io

    from .records import typed
    from .report_text import render

    buf = io.StringIO()
    render([typed(report)], buf, color=False, width=width)
    return "\n".join(line.rstrip() for line in buf.getvalue().splitlines()) + "\n"


__all__ = ["verify", "verify_model", "format_report"]
