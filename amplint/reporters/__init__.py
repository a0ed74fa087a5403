"""Reporters: small interchangeable functions that turn results into text.

Each is ``render(results, out, *, statistics=False, color=False) -> None`` writing to the
stream ``out``.  Errors (files that could not be read or parsed, internal errors) are
part of ``results`` and each reporter shows them in its own way.
"""
from __future__ import annotations

from typing import Callable

from . import concise, github, gitlab, json_format, junit, sarif, text

REPORTERS: dict[str, Callable] = {
    "text": text.render,
    "concise": concise.render,
    "json": json_format.render,
    "sarif": sarif.render,
    "github": github.render,
    "gitlab": gitlab.render,
    "junit": junit.render,
}
FORMATS = tuple(REPORTERS)
