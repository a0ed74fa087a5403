"""A content-hash result cache in ``.amplint_cache/``.

**The key** (:func:`entry_key`) covers everything that decides a file's result: its
bytes; where it is (the path as given, which the findings carry; its absolute path; the
config root and the path relative to it, which ``per-file-ignores`` match); the resolved
settings for that file; amplint's version; the rule sources and the plugins loaded; and
for the cross-file pass the project index.  Moving a checkout therefore starts a cold
cache, as in Ruff, whose cache is per absolute project root.

**Entries are trusted only when this user wrote them.**  Each entry is signed with
HMAC-SHA256 over its key and content, using a random secret created once per user in
``$XDG_CACHE_HOME/amplint/cache-secret`` (``~/.cache/...``, mode 0600) -- outside the
cache folder, which lives in the repository and may be committed, shared or restored
from a CI cache by someone else.  An entry planted or edited by anyone who cannot read
that secret is a miss, so it cannot hide a finding; entries are also checked field by
field, and a malformed, unsigned or unreadable entry is a miss, never an error.  Not
covered: someone who can read the secret (the same user, root) can forge entries -- they
can also edit amplint itself.  Without a usable secret (an unwritable home) nothing is
read from or written to the cache.

Each entry is one small JSON file written to a temporary name and renamed into place,
so concurrent runs sharing the folder only ever see whole entries.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import stat
import tempfile
from typing import Any, Optional

from . import __version__
from .reading import read_regular

#: an entry file is JSON: _HEAD, the MAC (64 hex digits), _MIDDLE, the entry, "}" -- read
#: by slicing, so the MAC is checked on the stored bytes without re-serialising them
_HEAD = b'{"amplint-cache":2,"mac":"'
_MIDDLE = b'","entry":'
_SECRET_NAME = "cache-secret"


def _secret_folder() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "amplint")


def _exposed(st: os.stat_result) -> Optional[str]:
    """Why a secret file or its folder with this ``stat`` could be known or changed by
    someone else (None: only this user can): another owner, or group/other permission
    bits (read or write on the secret; write on the folder)."""
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return f"owned by uid {st.st_uid}, not this user"
    bits = stat.S_IMODE(st.st_mode) & (0o022 if stat.S_ISDIR(st.st_mode) else 0o077)
    if bits:
        return f"mode {stat.S_IMODE(st.st_mode):04o}, {'writable' if bits & 0o022 else 'readable'} by others"
    return None


def _warn(message: str) -> None:
    import sys

    print(f"amplint: warning: {message}", file=sys.stderr)


def load_secret() -> Optional[bytes]:
    """This user's signing secret, created on first use; None when it cannot be.

    As ssh does with a private key, a secret others could read or change is not trusted:
    one that is group/world readable or writable, or not this user's, may have been read
    and used to forge entries, so it is replaced with a new private one (every entry
    signed with the old one becomes a miss), with one warning line.  In a folder others
    can write (or own) no secret is safe: the cache is off for the run, with one warning."""
    folder = _secret_folder()
    path = os.path.join(folder, _SECRET_NAME)
    for _ in range(2):
        try:
            secret, st = read_regular(path, with_stat=True, limit=4096)
        except FileNotFoundError:
            secret = None
        except OSError:
            return None
        try:
            where = os.stat(folder)
        except OSError:
            where = None
        if where is not None and _exposed(where):
            _warn(f"cache secret folder {folder} is {_exposed(where)}; the cache is off for this run "
                  f"(chmod 700 it)")
            return None
        if secret is not None:
            why = _exposed(st)
            if why is None:
                return secret if len(secret) >= 32 else None
            try:
                _new_secret(folder, path, replace=True)
            except OSError:
                _warn(f"cache secret {path} is {why} and cannot be replaced; the cache is off for this run")
                return None
            _warn(f"cache secret {path} was {why}: replaced with a new private one (entries signed with "
                  f"the old one are misses)")
            continue
        try:
            _new_secret(folder, path, replace=False)
        except OSError:
            return None
    return None


def _new_secret(folder: str, path: str, replace: bool) -> None:
    """Write a new random secret, mode 0600, at ``path``: without ``replace`` only where
    none is (never replacing one another run created meanwhile)."""
    os.makedirs(folder, mode=0o700, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".secret-")  # mode 0600
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(secrets.token_bytes(32))
        if replace:
            os.replace(tmp, path)
            return
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)


#: the largest entry file read (a 20 MB source's entry is about 100 MB)
_ENTRY_LIMIT = 512 * 1024 * 1024


def _real_folder(path: str) -> bool:
    """``path`` is a folder itself, not a symbolic link to one."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


class Cache:
    """The cache folder.  A repository may commit ``.amplint_cache`` (or a shard folder in
    it) as a symbolic link to another repository: the cache then writes nothing (unless
    the user named that folder with ``--cache-dir``), its ``.gitignore`` is created only
    where nothing, not even a dangling link, is, and entries are read as regular files
    only."""

    def __init__(self, folder: str, secret: Optional[bytes] = None, named: bool = False):
        self.folder = folder
        self._ready = False
        self._secret = secret if secret is not None else load_secret()
        if not named and os.path.islink(folder):
            self._secret = None  # a committed link: neither read nor write through it

    @staticmethod
    def key(*parts: bytes | str) -> str:
        h = hashlib.sha256(__version__.encode())
        for part in parts:
            h.update(b"\0")
            h.update(part if isinstance(part, bytes) else part.encode())
        return h.hexdigest()

    def _path(self, key: str) -> str:
        return os.path.join(self.folder, key[:2], key[2:] + ".json")

    def _mac(self, key: str, blob: bytes) -> str:
        return hmac.new(self._secret, key.encode() + b"\0" + blob, hashlib.sha256).hexdigest()

    def get(self, key: str) -> Optional[Any]:
        """The entry stored under ``key`` if this user signed it for that key; else None."""
        if self._secret is None:
            return None
        try:
            data = read_regular(self._path(key), limit=_ENTRY_LIMIT, follow=False)
            start = len(_HEAD) + 64 + len(_MIDDLE)
            if not (data.startswith(_HEAD) and data[start - len(_MIDDLE):start] == _MIDDLE and data.endswith(b"}")):
                return None
            blob = data[start:-1]
            if not hmac.compare_digest(data[len(_HEAD):len(_HEAD) + 64], self._mac(key, blob).encode()):
                return None
            return json.loads(blob)
        except (OSError, ValueError, RecursionError):
            return None

    def put(self, key: str, value: Any) -> None:
        if self._secret is None:
            return
        path = self._path(key)
        try:
            blob = json.dumps(value, separators=(",", ":")).encode()
            if not self._ready:
                os.makedirs(self.folder, exist_ok=True)
                try:  # O_EXCL: never through a link, dangling or not
                    fd = os.open(os.path.join(self.folder, ".gitignore"),
                                 os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
                    with os.fdopen(fd, "w") as fh:
                        fh.write("# created by amplint\n*\n")
                except FileExistsError:
                    pass
                self._ready = True
            shard = os.path.dirname(path)
            os.makedirs(shard, exist_ok=True)
            if not _real_folder(shard):
                return  # a planted link to a folder elsewhere
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
            with os.fdopen(fd, "wb") as fh:
                fh.write(_HEAD + self._mac(key, blob).encode() + _MIDDLE + blob + b"}")
            os.replace(tmp, path)
        except (OSError, ValueError):
            pass  # a cache that cannot be written is only a slower run


# --- what the engine stores -----------------------------------------------------------

def entry_key(kind: str, path: str, raw: bytes, settings, unused: bool, *extra: str) -> str:
    """The key of ``path``'s result: see the module docstring for what it covers."""
    from .config import _relative
    from .registry import rules_fingerprint

    return Cache.key(
        kind, path, os.path.abspath(path), os.path.abspath(settings.root), _relative(path, settings.root), raw,
        settings.fingerprint(), rules_fingerprint(settings.rule_paths, settings.load_plugins), str(unused), *extra,
    )


def _int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _keys(d, names) -> bool:
    return isinstance(d, dict) and len(d) == len(names) and all(n in d for n in names)


_FINDING_KEYS = frozenset(("path", "line", "column", "end_line", "end_column", "code", "rule", "message", "severity", "fix", "related", "fingerprint"))


def _edit_ok(e) -> bool:
    return (_keys(e, ("line", "column", "end_line", "end_column", "content")) and isinstance(e["content"], str)
            and all(_int(e[k]) for k in ("line", "column", "end_line", "end_column")))


def _fix_ok(fix) -> bool:
    from .rule import Applicability

    if not isinstance(fix, dict):
        return False
    registrations = fix.get("registrations", [])
    return (_keys(fix, ("applicability", "description", "edits") + (("registrations",) if "registrations" in fix else ()))
            and isinstance(fix["description"], str) and fix["applicability"] in Applicability._value2member_map_
            and isinstance(fix["edits"], list) and all(_edit_ok(e) for e in fix["edits"])
            and isinstance(registrations, list)
            and all(isinstance(r, list) and len(r) == 3 and all(isinstance(x, str) for x in r) for r in registrations))


def _finding_ok(f) -> bool:
    from .rule import Severity

    if not _keys(f, _FINDING_KEYS):
        return False
    if not (all(_int(f[k]) for k in ("line", "column", "end_line", "end_column"))
            and all(isinstance(f[k], str) for k in ("path", "code", "rule", "message"))
            and f["severity"] in Severity._value2member_map_):
        return False
    if f["fix"] is not None and not _fix_ok(f["fix"]):
        return False
    if not isinstance(f["fingerprint"], str):
        return False
    return isinstance(f["related"], list) and all(
        _keys(r, ("path", "line", "column", "note")) and isinstance(r["path"], str) and isinstance(r["note"], str)
        and _int(r["line"]) and _int(r["column"]) for r in f["related"])


def _summary_ok(s) -> bool:
    if s is None:
        return True
    if not (_keys(s, ("path", "configs", "facts")) and isinstance(s["path"], str) and isinstance(s["facts"], dict)
            and all(isinstance(k, str) for k in s["facts"]) and isinstance(s["configs"], list)):
        return False
    return all(
        _keys(c, ("cls", "field", "value", "path", "line", "column")) and isinstance(c["cls"], str)
        and isinstance(c["field"], str) and isinstance(c["path"], str) and _int(c["line"]) and _int(c["column"])
        and isinstance(c["value"], (int, float)) and not isinstance(c["value"], bool) for c in s["configs"])


def _query_ok(q) -> bool:
    if not isinstance(q, list) or not q:
        return False
    if q[0] == "config":
        return len(q) == 3 and isinstance(q[1], str) and (q[2] is None or isinstance(q[2], str))
    if q[0] == "named":  # ("named", code, name): one named fact of other files (ProjectIndex.named)
        return len(q) == 3 and isinstance(q[1], str) and isinstance(q[2], str)
    return q[0] == "facts" and len(q) == 2 and isinstance(q[1], str)


def valid_entry(entry, path: str) -> bool:
    """Whether ``entry`` has the exact shape the engine writes for ``path`` (every field's
    type), so that reading it can never raise."""
    if not _keys(entry, ("path", "findings", "frames", "errors", "summary", "queries")) or entry["path"] != path:
        return False
    return (
        isinstance(entry["findings"], list) and all(_finding_ok(f) for f in entry["findings"])
        and isinstance(entry["frames"], dict)
        and all(isinstance(k, str) and k.isascii() and k.isdigit() and isinstance(v, str) for k, v in entry["frames"].items())
        and isinstance(entry["errors"], list)
        and all(_keys(e, ("path", "reason", "line", "col")) and isinstance(e["path"], str) and isinstance(e["reason"], str)
                and _int(e["line"]) and _int(e["col"]) for e in entry["errors"])
        and _summary_ok(entry["summary"])
        and isinstance(entry["queries"], list) and all(_query_ok(q) for q in entry["queries"])
    )
