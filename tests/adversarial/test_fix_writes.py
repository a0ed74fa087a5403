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


N36_BEFORE = '''import torch
def f(s, m, name):
    a = s.masked_fill(m, \\
        -1e9)
    b = s.masked_fill(m, -1e9); doc = """
    text"""
    c = s.masked_fill(m, -1e9) if f"{name}" else 0
    d = 1; e = s.masked_fill(m, -1e9)
    g = s.masked_fill(m, -1e9)  # type: ignore[attr-defined]
    h = s.masked_fill(m, -1e9)  #noqa:E501,W291
    i = s.masked_fill(m, -1e9)  # NOQA
    j = s.masked_fill(m, -1e9); k = 1; doc2 = f"""{name}
    """; l = 2
    return a, b, c, e, g, h, i, j, k, l, doc, doc2
'''
N36_AFTER = '''import torch
def f(s, m, name):
    a = s.masked_fill(m, \\
        -1e9)  # noqa: AMP101
    b = s.masked_fill(m, -1e9); doc = """
    text"""  # noqa: AMP101
    c = s.masked_fill(m, -1e9) if f"{name}" else 0  # noqa: AMP101
    d = 1; e = s.masked_fill(m, -1e9)  # noqa: AMP101
    g = s.masked_fill(m, -1e9)  # type: ignore[attr-defined]  # noqa: AMP101
    h = s.masked_fill(m, -1e9)  #noqa:E501,W291, AMP101
    i = s.masked_fill(m, -1e9)  # NOQA
    j = s.masked_fill(m, -1e9); k = 1; doc2 = f"""{name}
    """; l = 2  # noqa: AMP101
    return a, b, c, e, g, h, i, j, k, l, doc, doc2
'''


def test_n36_add_noqa_places_each_comment_where_it_silences_and_changes_no_string(tmp_path, amplint, env):
    """A statement followed on its line by a string that runs on (``b = ...; doc = \"\"\"``)
    takes its comment where the logical line ends: on its own line the comment was
    inserted into the string (the program changed, the finding stayed)."""
    (tmp_path / "p.py").write_text(N36_BEFORE)
    (tmp_path / "crlf.py").write_bytes(b"import torch\r\ndef f(s, m):\r\n    return s.masked_fill(m, -1e9)")
    proc = amplint("check", "--no-cache", "--add-noqa", "p.py", "crlf.py", cwd=tmp_path, env=env, timeout=TIMEOUT)
    assert proc.returncode == 0 and "Added 8 noqa codes on 8 lines in 2 files" in proc.stdout + proc.stderr
    assert (tmp_path / "p.py").read_text() == N36_AFTER
    assert (tmp_path / "crlf.py").read_bytes() == (b"import torch\r\ndef f(s, m):\r\n"
                                                   b"    return s.masked_fill(m, -1e9)  # noqa: AMP101")
    again = amplint("check", "--no-cache", "--add-noqa", "p.py", "crlf.py", cwd=tmp_path, env=env, timeout=TIMEOUT)
    assert "Added 0 noqa codes" in again.stdout + again.stderr and (tmp_path / "p.py").read_text() == N36_AFTER
    proc = amplint("check", "--no-cache", "--extend-select", "AMP900", "p.py", "crlf.py", cwd=tmp_path, env=env,
                   timeout=TIMEOUT)
    assert proc.returncode == 0 and "All checks passed" in proc.stdout, proc.stdout  # each one used


def test_a6_a_line_libcst_cannot_read_is_fixed_on_ast_s_check(tmp_path, amplint, env):
    """600 terms on the fixed line exceed libcst's recursion for the original file too:
    its round-trip has nothing to compare, so it no longer refuses the fix (the ast
    re-parse still guards it)."""
    src = "import torch\ndef f(s, m):\n    return s.masked_fill(m, -1e9) + " + "+".join(["s"] * 600) + "\n"
    (tmp_path / "e.py").write_text(src)
    proc = amplint("fix", "--no-cache", "--unsafe-fixes", "e.py", cwd=tmp_path, env=env, timeout=TIMEOUT)
    assert proc.returncode == 0 and "internal error" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert (tmp_path / "e.py").read_text() == src.replace("-1e9", "torch.finfo(s.dtype).min")


def test_a5_a_parser_memory_error_has_a_reason(tmp_path, amplint, env):
    (tmp_path / "u.py").write_text("x = " + "-" * 100_000 + "1\n")
    (tmp_path / "m.py").write_text(MODEL)
    proc = amplint("check", "--no-cache", ".", cwd=tmp_path, env=env, timeout=TIMEOUT)
    assert proc.returncode == 2 and "m.py:3:" in proc.stdout
    assert "u.py:1:1: error: cannot parse: Python's parser ran out of memory" in proc.stderr, proc.stderr


_EDIT_DURING_FIX = """\
import sys
import amplint.engine as engine

real_fix_text = engine.fix_text

def fix_text(path, *args, **kwargs):
    out = real_fix_text(path, *args, **kwargs)
    with open(path, "a") as fh:  # an editor's save between the read and the write
        fh.write("# USER EDIT\\n")
    return out

engine.fix_text = fix_text
from amplint.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_b4_a_hard_linked_file_edited_while_fixing_is_left_alone(tmp_path, env):
    (tmp_path / "m.py").write_text(MODEL)
    os.link(tmp_path / "m.py", tmp_path / "other.py")
    proc = subprocess.run([sys.executable, "-c", _EDIT_DURING_FIX, "fix", "--unsafe-fixes", "--no-cache", "-j", "1",
                           "m.py"], cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT,
                          env={**os.environ, **env})
    assert proc.returncode == 2 and "m.py:1:1: error: changed while amplint was fixing it" in proc.stdout + proc.stderr
    assert (tmp_path / "other.py").read_text() == MODEL + "# USER EDIT\n"  # the edit kept, no fix written
