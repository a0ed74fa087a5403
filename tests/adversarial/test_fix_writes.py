"""The adversarial report of 2026-12-01, what ``fix`` writes and what it says it wrote:
hard links (B4), the summary when a write fails (N53), CR-only line endings (A3), and
where ``--add-noqa`` puts its comment (N36).  Each runs the real CLI, bounded in time."""
from __future__ import annotations

import os
import resource
import subprocess

import pytest

import shutil
import sys

MODEL = "import torch\ndef f(s, m):\n    return s.masked_fill(m, -1e9)\n"
TIMEOUT = 60


@pytest.fixture
def env(tmp_path):
    """A private cache secret: the tests never read or change the user's."""
    return {"XDG_CACHE_HOME": str(tmp_path / "xdg")}


FIXED = MODEL.replace("-1e9", "torch.finfo(s.dtype).min")


def test_b4_fix_keeps_hard_links(tmp_path, amplint, env):
    (tmp_path / "m.py").write_text(MODEL)
    os.link(tmp_path / "m.py", tmp_path / "other.txt")
    os.chmod(tmp_path / "m.py", 0o640)
    proc = amplint("fix", "--unsafe-fixes", "--no-cache", "m.py", cwd=tmp_path, env=env, timeout=TIMEOUT)
    assert proc.returncode == 0 and "Fixed 1 finding" in proc.stdout + proc.stderr
    assert (tmp_path / "other.txt").read_text() == FIXED  # the other name sees the fix
    assert os.stat(tmp_path / "m.py").st_ino == os.stat(tmp_path / "other.txt").st_ino
    assert oct(os.stat(tmp_path / "m.py").st_mode & 0o777) == oct(0o640)
    assert [n for n in os.listdir(tmp_path) if n.startswith(".amplint-")] == []
    proc = amplint("fix", "--unsafe-fixes", "--no-cache", "m.py", cwd=tmp_path, env=env, timeout=TIMEOUT)
    assert proc.returncode == 0 and (tmp_path / "m.py").read_text() == FIXED  # idempotent


def _file_size_limit(nbytes):
    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, nbytes))  # Python ignores SIGXFSZ: writes fail EFBIG
    return limit


def _fix_under_size_limit(tmp_path, env, nbytes, *paths):
    script = shutil.which("amplint", path=os.path.dirname(sys.executable))
    return subprocess.run([script, "fix", "--unsafe-fixes", "--no-cache", "-j", "1", *paths], cwd=tmp_path,
                          capture_output=True, text=True, timeout=TIMEOUT, env={**os.environ, **env},
                          preexec_fn=_file_size_limit(nbytes))


@pytest.mark.parametrize("linked", [False, True], ids=["renamed", "hard-linked"])
def test_n53_b8_a_write_that_fails_is_not_counted_and_leaves_the_file(tmp_path, env, linked):
    # the disk-full case without a tmpfs: a file-size limit makes the big file's write fail
    big = MODEL + "".join(f"x{i} = {i}  # padding\n" for i in range(4000))
    (tmp_path / "big.py").write_text(big)
    (tmp_path / "small.py").write_text(MODEL)
    if linked:
        os.link(tmp_path / "big.py", tmp_path / "big-link.py")
    proc = _fix_under_size_limit(tmp_path, env, 32 * 1024, "big.py", "small.py")
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out
    assert proc.returncode == 2 and "big.py:1:1: error: cannot write" in out, out
    assert "Fixed 1 finding." in out, out  # small.py only
    assert (tmp_path / "big.py").read_text() == big and (tmp_path / "small.py").read_text() == FIXED
    assert [n for n in os.listdir(tmp_path) if n.startswith(".amplint-")] == []


CR_ONLY = b"import torch\rdef f(s,m):\r    return s.masked_fill(m, -1e9)\r"
MIXED_ENDING_IN_CR = (b"import torch\r\nclass M(torch.nn.Module):\n\tdef forward(self, s, m):\r\n"
                      b"\t\treturn torch.softmax(s.masked_fill(m, -1e9), -1)\r")


def test_a3_cr_only_file_ending_in_cr_is_fixed_with_its_bytes_kept(tmp_path, amplint, env):
    (tmp_path / "cr.py").write_bytes(CR_ONLY)
    proc = amplint("fix", "--unsafe-fixes", "--no-cache", "cr.py", cwd=tmp_path, env=env, timeout=TIMEOUT)
    assert proc.returncode == 0 and "internal error" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert (tmp_path / "cr.py").read_bytes() == CR_ONLY.replace(b"-1e9", b"torch.finfo(s.dtype).min")


def test_n22_mixed_endings_ending_in_cr_through_stdin(tmp_path, amplint, env):
    proc = subprocess.run([shutil.which("amplint", path=os.path.dirname(sys.executable)), "fix", "--stdin-filename",
                           "x.py"], input=MIXED_ENDING_IN_CR, capture_output=True, cwd=tmp_path, timeout=TIMEOUT,
                          env={**os.environ, **env})
    assert proc.returncode == 0 and b"internal error" not in proc.stderr, proc.stderr
    assert proc.stdout == MIXED_ENDING_IN_CR.replace(b"-1e9", b"torch.finfo(s.dtype).min")
