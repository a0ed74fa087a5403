"""Argument types shared by the command lines (``amplint``, ``verify``, ``fp8-plan``)."""
from __future__ import annotations

import argparse


def positive_int(value: str) -> int:
    """A whole number of at least 1 (``--steps``, ``--tokens``), else argparse's usage error."""
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {value!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {n}")
    return n
