"""The adversarial report of 2026-12-01, N44: a cache secret others can read (or write)
is not trusted, as ssh refuses such a private key: it is replaced with a private one, with
one warning line; a secret folder others can write turns the cache off for the run."""
from __future__ import annotations

import os
import stat

MODEL = "import torch\ndef f(s, m):\n    return s.masked_fill(m, -1e9)\n"
TIMEOUT = 60


def _secret(tmp_path):
    return tmp_path / "xdg" / "amplint" / "cache-secret"


def test_n44_exposed_secret_is_replaced_with_a_warning(tmp_path, amplint):
    (tmp_path / "m.py").write_text(MODEL)
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    first = amplint("check", "m.py", cwd=tmp_path, env=env, timeout=TIMEOUT)
    assert first.returncode == 1 and "warning" not in first.stderr
    secret = _secret(tmp_path)
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    old = secret.read_bytes()
    for mode in (0o644, 0o620):  # world-readable, group-writable
        os.chmod(secret, mode)
        proc = amplint("check", "m.py", cwd=tmp_path, env=env, timeout=TIMEOUT)
        warnings = [line for line in proc.stderr.splitlines() if "cache secret" in line]
        assert len(warnings) == 1 and f"mode {mode:04o}" in warnings[0] and "replaced" in warnings[0], proc.stderr
        assert proc.returncode == 1 and proc.stdout == first.stdout  # same result, linted again
        assert stat.S_IMODE(secret.stat().st_mode) == 0o600 and secret.read_bytes() != old
        old = secret.read_bytes()
    again = amplint("check", "m.py", cwd=tmp_path, env=env, timeout=TIMEOUT)
    assert "cache secret" not in again.stderr and again.stdout == first.stdout


def test_n44_secret_folder_others_can_write_turns_the_cache_off(tmp_path, amplint):
    (tmp_path / "m.py").write_text(MODEL)
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    amplint("check", "m.py", cwd=tmp_path, env=env, timeout=TIMEOUT)
    os.chmod(_secret(tmp_path).parent, 0o777)
    before = sorted(os.listdir(tmp_path / ".amplint_cache"))
    (tmp_path / "n.py").write_text(MODEL)
    proc = amplint("check", "m.py", "n.py", cwd=tmp_path, env=env, timeout=TIMEOUT)
    assert proc.returncode == 1 and "Found 2 findings" in proc.stdout
    assert [line for line in proc.stderr.splitlines() if "cache" in line] == [
        line for line in proc.stderr.splitlines() if "cache is off" in line] and "cache is off" in proc.stderr
    assert sorted(os.listdir(tmp_path / ".amplint_cache")) == before  # nothing written with it
