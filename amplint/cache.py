"""A content-hash result cache in ``.amplint_cache/``.

Entries are keyed on the file's bytes, amplint's version, the settings, the selected
rules and the project index (so a changed config file invalidates its users).  Each
entry is one small JSON file written to a temporary name and renamed into place, so
concurrent runs sharing the folder only ever see whole entries; a corrupt or
unreadable entry is a miss, never an error.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from typing import Any, Optional

from . import __version__


class Cache:
    def __init__(self, folder: str):
        self.folder = folder
        self._ready = False

    @staticmethod
    def key(*parts: bytes | str) -> str:
        h = hashlib.sha256(__version__.encode())
        for part in parts:
            h.update(b"\0")
            h.update(part if isinstance(part, bytes) else part.encode())
        return h.hexdigest()

    def _path(self, key: str) -> str:
        return os.path.join(self.folder, key[:2], key[2:] + ".json")

    def get(self, key: str) -> Optional[Any]:
        try:
            with open(self._path(key), "rb") as fh:
                return json.loads(fh.read())
        except (OSError, ValueError):
            return None

    def put(self, key: str, value: Any) -> None:
        path = self._path(key)
        try:
            if not self._ready:
                os.makedirs(self.folder, exist_ok=True)
                gitignore = os.path.join(self.folder, ".gitignore")
                if not os.path.exists(gitignore):
                    with open(gitignore, "w") as fh:
                        fh.write("# created by amplint\n*\n")
                self._ready = True
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
            with os.fdopen(fd, "w") as fh:
                json.dump(value, fh, separators=(",", ":"))
            os.replace(tmp, path)
        except OSError:
            pass  # a cache that cannot be written is only a slower run
