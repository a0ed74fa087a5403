"""Reporters: small interchangeable functions that turn results into text.

Each is ``render(results, out, *, statistics=False, color=False) -> None`` writing to the
stream ``out``.  Errors (files that could not be read or parsed, internal errors) are
part of ``results`` and each reporter shows them in its own way.
"""
from __future__ import annotations

import importlib
from typing import Callable

#: format name -> the module of this package whose ``render`` writes it, imported on first
#: use: a run loads only the reporter it prints with (junit's xml.etree costs a one-file
#: check several milliseconds)
_MODULES = {
    "text": "text",
    "concise": "concise",
    "json": "json_format",
    "sarif": "sarif",
    "github": "github",
    "gitlab": "gitlab",
    "junit": "junit",
}
FORMATS = tuple(_MODULES)


def reporter(fmt: str) -> Callable:
    """The ``render`` function of format ``fmt`` (one of FORMATS)."""
    return importlib.import_module(f"{__name__}.{_MODULES[fmt]}").render
