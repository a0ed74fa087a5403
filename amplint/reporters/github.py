"""GitHub Actions workflow commands: ``::warning file=...,line=...,col=...::message``."""
from __future__ import annotations

_LEVEL = {"error": "error", "warning": "warning", "info": "notice"}


def _escape_data(s: str) -> str:
    from .common import unicode_text  # a name that is not UTF-8: its bytes as \xff

    return unicode_text(s).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_prop(s: str) -> str:
    return _escape_data(s).replace(":", "%3A").replace(",", "%2C")


def render(results, out, *, statistics=False, color=False) -> None:
    from .common import in_notebook

    for result in results:
        for f in result.findings:
            cell = in_notebook(result, f)  # a notebook: line 1 of the .ipynb, the cell in the message
            span = (f"line={f.line},col={f.column},endLine={f.end_line},endColumn={f.end_column}" if not cell
                    else "line=1,col=1")
            props = f"file={_escape_prop(f.path)},{span},title={_escape_prop(f'{f.code} ({f.rule})')}"
            text = f"{cell}: {f.code} {f.message}" if cell else f"{f.code} {f.message}"
            out.write(f"::{_LEVEL[f.severity.value]} {props}::{_escape_data(text)}\n")
        for e in result.errors:
            out.write(f"::error file={_escape_prop(e.path)},line={e.line},col={e.col},title=amplint::{_escape_data(e.reason)}\n")
        for w in result.warnings:
            out.write(f"::warning file={_escape_prop(w.path)},line={w.line},col={w.col},title=amplint::{_escape_data(w.reason)}\n")
