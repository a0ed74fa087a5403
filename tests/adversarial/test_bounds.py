"""The adversarial report of 2026-12-01, resource bounds and the constant evaluator:
stdin is linted in pieces like a large file (N26); huge powers are bounded, not computed
(A7); long sums of constants are folded (A8)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

TIMEOUT = 120


#: the real CLI with the large-file threshold and the piece size made small (as
#: tests/test_robustness.py does), so that a test-sized input is cut into many pieces; at
#: exit it writes its peak RSS (VmHWM, this process's own memory since its exec: the
#: ru_maxrss a parent sees also counts the forked copy of a large pytest before the exec)
_SMALL_PIECES = (
    "import atexit, os, sys\n"
    "def peak():\n"
    "    with open('/proc/self/status') as fh:\n"
    "        kb = next(line.split()[1] for line in fh if line.startswith('VmHWM:'))\n"
    "    with open(os.environ['PEAK_FILE'], 'w') as out:\n"
    "        out.write(kb)\n"
    "atexit.register(peak)\n"
    "import amplint.pipeline as engine\n"
    "engine.LARGE_FILE, engine.PIECE = int(sys.argv[1]), int(sys.argv[2])\n"
    "from amplint.cli import main\n"
    "sys.exit(main(sys.argv[3:]))\n"
)


def _peak_rss_kb(args, cwd, stdin_path, env):
    """Run amplint with stdin from a file; its exit code, output and peak RSS in KB."""
    peak_file = cwd / "peak.txt"
    with open(stdin_path, "rb") as stdin:
        proc = subprocess.run([sys.executable, "-c", _SMALL_PIECES, *args], cwd=cwd, stdin=stdin, capture_output=True,
                              env={**os.environ, **env, "PEAK_FILE": str(peak_file)}, timeout=TIMEOUT)
    return proc.returncode, (proc.stdout + proc.stderr).decode(), int(peak_file.read_text())


def test_n26_stdin_over_the_large_file_size_is_linted_in_pieces(tmp_path):
    """1.1 MB through ``--stdin-filename``, over the large-file size (made 300 KB here,
    pieces of 220 KB, in one process; the next test spreads stdin's pieces over the pool): a quarter of it lists of names, whose syntax trees
    take about 200 MB when the input is parsed whole and about 40 MB per piece, as a file
    given by path is linted (the report: 6 MB through stdin took 1.4 GB)."""
    pad = "#" + "p" * 990
    model = ("class M(torch.nn.Module):\n    def forward(self, s, m):\n"
             "        return torch.softmax(s.masked_fill(m, -1e9), -1)\n")
    heavy = "X{i} = [" + "a," * 480 + "]\n"
    rows = [model if i % 100 == 0 else heavy.format(i=i) if i % 4 == 0 else f"X{i} = {i}  {pad}\n"
            for i in range(1100)]
    (tmp_path / "big.py").write_text("import torch\n" + "".join(rows))
    code, out, peak_kb = _peak_rss_kb(["300000", "220000", "check", "--no-cache", "-j", "1", "--format", "concise",
                                       "--stdin-filename", "big.py"], tmp_path, tmp_path / "big.py",
                                      {"XDG_CACHE_HOME": str(tmp_path / "xdg")})
    assert code == 1 and "Traceback" not in out
    assert out.count("AMP101") == 11 and out.count("AMP301") == 11 and "Found 22 findings" in out, out
    assert peak_kb < 120 * 1024, f"stdin linted whole: peak RSS {peak_kb // 1024} MB"


def test_n26_stdin_pieces_over_two_workers_have_the_findings_of_the_file(tmp_path):
    """About 30 pieces of stdin over two workers (each given the bytes, checked by hash)
    find what the same file does by path, in pieces too."""
    body = ("def helper_{i}(scores, mask):\n    return torch.log(scores.masked_fill(mask, NEG) + 1e-8)\n\n\n"
            "class Block{i}(torch.nn.Module):\n    def forward(self, s, m):\n"
            "        return torch.softmax(s.masked_fill(m, -1e9), -1)\n\n\n")
    (tmp_path / "big.py").write_text("import torch\nNEG = -1e9\n\n\n" + "".join(body.format(i=i) for i in range(60)))
    args = ["1000", "3000", "check", "--no-cache", "-j", "2", "--format", "json"]
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    code, by_path, _ = _peak_rss_kb([*args, "big.py"], tmp_path, os.devnull, env)
    code2, by_stdin, _ = _peak_rss_kb([*args, "--stdin-filename", "big.py"], tmp_path, tmp_path / "big.py", env)
    assert code == code2 == 1 and "Traceback" not in by_stdin
    assert json.loads(by_stdin) == json.loads(by_path) and len(json.loads(by_path)) >= 180


def test_a7_huge_integer_powers_are_bounded_not_computed(tmp_path, amplint):
    (tmp_path / "p.py").write_text(
        "import torch\n"
        "def f(s, m):\n"
        "    a = s.masked_fill(m, -10**10000)\n"
        "    b = torch.full((2, 2), 9**9**9, dtype=torch.float16)\n"  # 370 million digits if computed
        "    c = s.masked_fill(m, 10**10000 // 10**9999)\n"  # 10: a bound is no operand, so no guess
        "    d = s.masked_fill(m, 2**-10000)\n"
        "    return a, b, c, d\n")
    proc = amplint("check", "--no-cache", "--format", "concise", "p.py", cwd=tmp_path,
                   env={"XDG_CACHE_HOME": str(tmp_path / "xdg")}, timeout=60)
    lines = [line for line in proc.stdout.splitlines() if "AMP" in line]
    assert proc.returncode == 1 and len(lines) == 2, proc.stdout
    assert lines[0].startswith("p.py:3:26: AMP101") and "(below -1e308)" in lines[0]
    assert lines[1].startswith("p.py:4:28: AMP101") and "(above 1e308)" in lines[1]


def test_a8_a_long_sum_of_constants_is_folded(tmp_path, amplint):
    for n in (10, 50, 200, 500):
        (tmp_path / f"k{n}.py").write_text(
            f"import torch\nK = {'+'.join(['1e5'] * n)}\ndef f(s, m):\n    return s.masked_fill(m, -K)\n")
    proc = amplint("check", "--no-cache", "--format", "concise", ".", cwd=tmp_path,
                   env={"XDG_CACHE_HOME": str(tmp_path / "xdg")}, timeout=60)
    flagged = sorted(line.split(":")[0] for line in proc.stdout.splitlines() if "AMP101" in line)
    assert flagged == ["k10.py", "k200.py", "k50.py", "k500.py"], proc.stdout
