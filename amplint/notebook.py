"""Jupyter notebooks (``.ipynb``): their code cells linted as one module, fixes written back
into the cells they edit, every other byte of the notebook's JSON kept as it was.

The module is the code cells in order, each after a marker line ``#%% cell N`` (``N``: the
cell's position in the notebook, 1-based, markdown cells counted, as a reader counts them);
IPython magics and shell lines (``%time``, ``!pip``, ``x = !ls``, ``obj?``; a ``%%`` cell
magic makes its whole cell one) become ``pass`` placeholders at their indentation, so
the module parses and keeps its line numbers, and they come back unchanged when a fix is
written.  A finding's module line ``L`` is shown as ``cell N``, line ``L - marker line``.

Writing back re-serialises only the ``source`` value of each code cell whose text changed,
in the layout it had (a list of lines or one string, the same indentation and escaping);
the rest of the file, every byte of it, is copied.
"""
from __future__ import annotations

import json
import re
from typing import Optional

SUFFIX = ".ipynb"
_MARKER = "#%% cell {}"
_MARKER_RE = re.compile(r"^#%% cell (\d+)$", re.M)
_PLACEHOLDER = "pass  #%% magic {}"
_PLACEHOLDER_RE = re.compile(r"^([ \t]*)pass  #%% magic (\d+)$")
#: IPython syntax that is not Python: line magics, shell escapes (also assigned), help
_MAGIC_RE = re.compile(r"^\s*(?:[%!]|[\w.]+\s*=\s*[%!])|^\s*[\w.]*\?\??\s*$|^\s*\?")


def is_notebook(path: str) -> bool:
    return path.endswith(SUFFIX)


class NotebookError(Exception):
    """Not a notebook amplint can read, or a fix it cannot write back: ``reason`` at
    ``line``:``col`` of the file (files.py turns it into a SourceError)."""

    def __init__(self, reason: str, line: int = 1, col: int = 1):
        self.reason, self.line, self.col = reason, line, col
        super().__init__(reason)


class Notebook:
    """A notebook's bytes: ``text`` is its code cells as one module; :meth:`encode` turns
    a fixed module back into the notebook's bytes."""

    def __init__(self, raw: bytes):
        self.raw = raw
        try:
            document = raw.decode("utf-8-sig" if raw.startswith(b"\xef\xbb\xbf") else "utf-8")
        except UnicodeDecodeError as exc:
            raise NotebookError(f"not a notebook: not valid UTF-8 (byte 0x{raw[exc.start]:02x})") from None
        self.document = document
        self.cells = _code_cells(document)  # [(number, (start, end) of "source", text)]
        self.magics: list[str] = []
        self.text = "".join(_MARKER.format(number) + "\n" + self._mask(source) + "\n" for number, _, source in self.cells)

    def _mask(self, source: str) -> str:
        lines = source.split("\n")
        cell_magic = lines[0].lstrip().startswith("%%")
        out = []
        for line in lines:
            if cell_magic or _MAGIC_RE.match(line):
                self.magics.append(line)
                indent = "" if cell_magic else line[: len(line) - len(line.lstrip())]
                out.append(indent + _PLACEHOLDER.format(len(self.magics) - 1))
            else:
                out.append(line)
        return "\n".join(out)

    def encode(self, text: str) -> bytes:
        """The notebook with the cells of the fixed module ``text``; NotebookError when a
        fix moved a cell marker (nothing is written then)."""
        found = list(_MARKER_RE.finditer(text))
        if [int(m.group(1)) for m in found] != [number for number, _, _ in self.cells] or (found and found[0].start() != 0):
            raise NotebookError("cannot fix: a fix would move code across the notebook's cells; notebook left unchanged")
        out, position = [], 0
        for i, ((number, (start, end), old), marker) in enumerate(zip(self.cells, found)):
            stop = found[i + 1].start() if i + 1 < len(found) else len(text)
            body = text[marker.end() + 1: stop]
            body = body[:-1] if body.endswith("\n") else body
            new = self._unmask(body)
            if new != old:
                out.append(self.document[position:start])
                out.append(_serialise(self.document[start:end], new))
                position = end
        out.append(self.document[position:])
        data = "".join(out)
        return (b"\xef\xbb\xbf" if self.raw.startswith(b"\xef\xbb\xbf") else b"") + data.encode("utf-8")

    def _unmask(self, body: str) -> str:
        lines = []
        for line in body.split("\n"):
            m = _PLACEHOLDER_RE.match(line)
            lines.append(self.magics[int(m.group(2))] if m else line)
        return "\n".join(lines)


def cell_map(text: str) -> list[tuple[int, int]]:
    """(marker line, cell number) of each cell of a notebook's module text."""
    out = []
    for m in _MARKER_RE.finditer(text):
        out.append((text.count("\n", 0, m.start()) + 1, int(m.group(1))))
    return out


def cell_of(cells, line: int) -> tuple[Optional[int], int]:
    """(cell number, line in that cell) of module line ``line``; (None, line) outside cells."""
    found = None
    for marker, number in cells:
        if marker < line:
            found = (number, line - marker)
        else:
            break
    return found if found is not None else (None, line)


# --- the notebook's JSON, with the positions of the code cells' sources ------------------

_DECODER = json.JSONDecoder()
_WS = re.compile(r"[ \t\n\r]*")


def _skip(doc: str, i: int) -> int:
    return _WS.match(doc, i).end()


def _code_cells(doc: str) -> list:
    """(number, (start, end) of the ``source`` value in ``doc``, its text) per code cell."""
    def bad(reason, at):
        line = doc.count("\n", 0, at) + 1
        col = at - (doc.rfind("\n", 0, at) + 1) + 1
        return NotebookError(f"not a notebook: {reason}", line, col)

    try:
        whole = json.loads(doc)
    except json.JSONDecodeError as exc:
        raise bad(f"invalid JSON: {exc.msg}", exc.pos) from None
    if not isinstance(whole, dict) or not isinstance(whole.get("cells"), list):
        raise bad("no list of cells", 0)
    for number, cell in enumerate(whole["cells"], 1):
        source = cell.get("source", "") if isinstance(cell, dict) else None
        if not isinstance(source, str) and not (isinstance(source, list) and all(isinstance(x, str) for x in source)):
            raise bad(f"cell {number} is not a cell with a text source", 0)
    cells = []
    i = _skip(doc, 0) + 1  # after the top-level {
    while True:  # the top-level keys, to the value of "cells"
        i = _skip(doc, i)
        key, i = _DECODER.raw_decode(doc, i)
        i = _skip(doc, _skip(doc, i) + 1)  # past ':'
        if key == "cells":
            break
        _, i = _DECODER.raw_decode(doc, i)
        i = _skip(doc, i) + 1  # past ','
    i = _skip(doc, i + 1)  # past '['
    number = 0
    while doc[i] != "]":
        number += 1
        i = _skip(doc, i + 1)  # past '{'
        kind, span = None, None
        while doc[i] != "}":
            key, i = _DECODER.raw_decode(doc, i)
            i = _skip(doc, _skip(doc, i) + 1)
            start = i
            value, i = _DECODER.raw_decode(doc, i)
            if key == "cell_type":
                kind = value
            elif key == "source":
                span = (start, i, value)
            i = _skip(doc, i)
            if doc[i] == ",":
                i = _skip(doc, i + 1)
        i = _skip(doc, i + 1)  # past '}'
        if doc[i] == ",":
            i = _skip(doc, i + 1)
        if kind == "code" and span is not None:
            start, end, value = span
            text = "".join(value) if isinstance(value, list) else value
            cells.append((number, (start, end), text))
    return cells


def _serialise(old: str, text: str) -> str:
    """``text`` as a cell's ``source`` value in the layout of ``old`` (its JSON)."""
    ascii_only = "\\u" in old and not any(ord(c) > 127 for c in old)
    if not old.startswith("["):
        return json.dumps(text, ensure_ascii=ascii_only)
    lines = text.splitlines(keepends=True)
    if not lines:
        return "[]"
    first = re.match(r"\[([ \t\n\r]*)", old).group(1) or "\n    "
    closing = re.search(r"([ \t\n\r]*)\]$", old).group(1) if old != "[]" else "\n   "
    if old == "[]":
        closing = first[:-1] if first.endswith(" ") else first
    return "[" + first + ("," + first).join(json.dumps(line, ensure_ascii=ascii_only) for line in lines) + closing + "]"
