"""Re-run the command-line cases of shared/reports/adversarial-2026-12-01.md against this
checkout: ``python bench/adversarial_rerun.py [--only A3,N26] [--out results.md]``.

Each case builds its scratch folder, runs the installed ``amplint`` with a time limit
(60 s) and an address-space limit (3 GB), and checks what the report says the right
behaviour is.  It prints one row per case: held / BROKEN, the test in tests/ that covers
it (found by the case id in a test's name or text), and a note.  Cases the script does
not re-run (the language server, the AMP engine, verify, runs at scale) are listed with
the test that covers them.  Exit 1 when a case is broken.
"""
from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AMPLINT = shutil.which("amplint", path=os.path.dirname(sys.executable)) or "amplint"
LIMIT_S, LIMIT_AS = 60, 3 * 1024 ** 3
MODEL = "import torch\ndef f(s, m):\n    return s.masked_fill(m, -1e9)\n"
SOFTMAX = ("import torch\nclass M(torch.nn.Module):\n    def forward(self, s, m):\n"
           "        return torch.softmax(s.masked_fill(m, -1e9), -1)\n")
FIXED = MODEL.replace("-1e9", "torch.finfo(s.dtype).min")


def _limits():
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT_AS, LIMIT_AS))


def run(*args, cwd, input=None, timeout=LIMIT_S):
    """(exit code, stdout + stderr as text); 124 on the time limit."""
    env = {**os.environ, "XDG_CACHE_HOME": os.path.join(cwd, ".xdg")}
    try:
        p = subprocess.run([AMPLINT, *args], cwd=cwd, input=input, capture_output=True, timeout=timeout, env=env,
                           preexec_fn=_limits)
    except subprocess.TimeoutExpired:
        return 124, "timeout"
    return p.returncode, (p.stdout + p.stderr).decode("utf-8", "replace")


def one_line(out: str) -> bool:
    return "Traceback" not in out


def w(folder, name, data):
    path = os.path.join(folder, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb" if isinstance(data, bytes) else "w") as fh:
        fh.write(data)
    return path


def read(folder, name) -> bytes:
    with open(os.path.join(folder, name), "rb") as fh:
        return fh.read()


def git_init(folder):
    subprocess.run(["git", "init", "-q", folder], check=True)


CASES = {}


def case(cid, what):
    def deco(fn):
        CASES[cid] = (what, fn)
        return fn
    return deco


# --- 1. the 2026-11-30 cases ---------------------------------------------------------------

@case("A1", "syntax error, NUL byte, non-UTF-8 byte: one line each, exit 2, others linted")
def a1(d):
    w(d, "s.py", "def f(:\n"); w(d, "n.py", b"x = 1\0\n"); w(d, "u.py", b"x = 1\n# \xff\n"); w(d, "m.py", MODEL)
    code, out = run("check", "--no-cache", ".", cwd=d)
    return code == 2 and one_line(out) and "m.py:3" in out and out.count(": error:") >= 3, out[-300:]


@case("A2", "latin-1 cookie, BOM, CRLF, tabs under fix --unsafe-fixes: only edited bytes change")
def a2(d):
    files = {"l.py": b"# -*- coding: latin-1 -*-\n# caf\xe9\n" + MODEL.encode(),
             "b.py": b"\xef\xbb\xbf" + MODEL.encode(), "c.py": MODEL.replace("\n", "\r\n").encode(),
             "t.py": MODEL.replace("    ", "\t").encode()}
    for n, b in files.items():
        w(d, n, b)
    code, out = run("fix", "--no-cache", "--unsafe-fixes", ".", cwd=d)
    ok = all(read(d, n) == b.replace(b"-1e9", b"torch.finfo(s.dtype).min") for n, b in files.items())
    return ok and code == 0, out[-200:]


@case("A3", "CR-only endings ending in CR, fix --unsafe-fixes")
def a3(d):
    src = b"import torch\rdef f(s,m):\r    return s.masked_fill(m, -1e9)\r"
    w(d, "cr.py", src)
    code, out = run("fix", "--no-cache", "--unsafe-fixes", "cr.py", cwd=d)
    return code == 0 and read(d, "cr.py") == src.replace(b"-1e9", b"torch.finfo(s.dtype).min"), out[-200:]


@case("A4", "5,000 nested parens / a+a+... x100k / torch.a.a... x100k: one-line errors")
def a4(d):
    w(d, "p.py", "x = " + "(" * 5000 + "1" + ")" * 5000 + "\n")
    w(d, "a.py", "x = " + "+".join(["a"] * 100_000) + "\n")
    w(d, "t.py", "x = torch" + ".a" * 100_000 + "\n")
    code, out = run("check", "--no-cache", ".", cwd=d)
    return code == 2 and one_line(out), out[-300:]


@case("A5", "100,000 unary minus signs: a reason, not `cannot parse: `")
def a5(d):
    w(d, "u.py", "x = " + "-" * 100_000 + "1\n")
    code, out = run("check", "--no-cache", "u.py", cwd=d)
    return code == 2 and one_line(out) and not re.search(r"cannot parse: *$", out, re.M), out.strip()[-200:]


@case("A6", "2,000-term expression on a fixed line: no internal error")
def a6(d):
    w(d, "e.py", "import torch\ndef f(s, m):\n    return s.masked_fill(m, -1e9) + " + "+".join(["s"] * 2000) + "\n")
    code, out = run("fix", "--no-cache", "--unsafe-fixes", "e.py", cwd=d, timeout=120)
    return code == 0 and "internal error" not in out, out.strip()[-200:]


@case("A7", "masked_fill(m, -10**10000), torch.full(..., 9**9**9, dtype=float16) flagged")
def a7(d):
    w(d, "p.py", "import torch\ndef f(s, m):\n    a = s.masked_fill(m, -10**10000)\n"
                 "    return torch.full((2,), 9**9**9, dtype=torch.float16)\n")
    code, out = run("check", "--no-cache", "--format", "concise", "p.py", cwd=d)
    return code == 1 and out.count("AMP101") == 2, out[-200:]


@case("A8", "K = 1e5+1e5+... (n = 50, 200 terms), masked_fill(m, -K) flagged")
def a8(d):
    for n in (50, 200):
        w(d, f"k{n}.py", f"import torch\nK = {'+'.join(['1e5'] * n)}\ndef f(s, m):\n    return s.masked_fill(m, -K)\n")
    code, out = run("check", "--no-cache", "--format", "concise", ".", cwd=d)
    return code == 1 and out.count("AMP101") == 2, out[-200:]


@case("A9", "match, walrus, star-assign, Unicode identifiers: findings, fixed file compiles")
def a9(d):
    w(d, "m.py", "import torch\ndef f(s, m, k):\n    match k:\n        case 1:\n            pass\n"
                 "    a, *b = (n := 3), 4\n    \u00e9t\u00e9 = s.masked_fill(m, -1e9)\n    return \u00e9t\u00e9\n")
    code, out = run("fix", "--no-cache", "--unsafe-fixes", "m.py", cwd=d)
    comp = subprocess.run([sys.executable, "-m", "py_compile", os.path.join(d, "m.py")]).returncode
    return code == 0 and comp == 0 and b"finfo" in read(d, "m.py"), out[-200:]


@case("A11", "FIFO, /dev/zero link, symlink loop: one line each, no hang")
def a11(d):
    os.mkfifo(os.path.join(d, "f.py")); os.symlink("/dev/zero", os.path.join(d, "z.py"))
    os.symlink("l2.py", os.path.join(d, "l1.py")); os.symlink("l1.py", os.path.join(d, "l2.py"))
    code, out = run("check", "--no-cache", "f.py", "z.py", "l1.py", cwd=d, timeout=20)
    return code == 2 and one_line(out), out.strip()[-300:]


@case("A14", "unsearchable folder: one line, the other files linted, exit 2")
def a14(d):
    if os.geteuid() == 0:
        return None, "as root every folder can be searched"
    os.mkdir(os.path.join(d, "d")); w(d, "d/x.py", MODEL); os.chmod(os.path.join(d, "d"), 0); w(d, "m.py", MODEL)
    try:
        code, out = run("check", "--no-cache", ".", cwd=d)
    finally:
        os.chmod(os.path.join(d, "d"), 0o755)
    return code == 2 and one_line(out) and "m.py:3" in out, out[-200:]


@case("A16", "# coding: rot13 / punycode / base64: one line each, the other files linted")
def a16(d):
    for enc in ("rot13", "punycode", "base64"):
        w(d, f"{enc}.py", f"# coding: {enc}\nx = 1\n")
    w(d, "m.py", MODEL)
    code, out = run("check", "--no-cache", ".", cwd=d)
    return code == 2 and one_line(out) and "m.py:3" in out, out[-300:]


@case("A17", "# coding: idna under fix: refused with one line")
def a17(d):
    w(d, "i.py", "# coding: idna\n" + MODEL)
    code, out = run("fix", "--no-cache", "--unsafe-fixes", "i.py", cwd=d)
    return code == 2 and "cannot fix" in out and one_line(out), out[-200:]


@case("A18", "pyproject.toml with `tool = 5`: one line, exit 2")
def a18(d):
    w(d, "pyproject.toml", "tool = 5\n"); w(d, "m.py", MODEL)
    code, out = run("check", "--no-cache", ".", cwd=d)
    return code == 2 and one_line(out) and "must be a table" in out, out[-200:]


@case("A22", "-j extremes: -j 1000 capped, -j -5 refused")
def a22(d):
    for i in range(20):
        w(d, f"m{i}.py", MODEL)
    code, _ = run("check", "--no-cache", "-j", "1000", ".", cwd=d)
    code2, out = run("check", "--no-cache", "-j", "-5", ".", cwd=d)
    return code == 1 and code2 == 2 and one_line(out), out[-200:]


@case("A23", "control characters in a source line / a file name with a newline: escaped")
def a23(d):
    w(d, "c.py", "import torch\ndef f(s, m):\n    return s.masked_fill(m, -1e9)  # \x1b]0;PWNED\x07\n")
    w(d, "nl\nfake.py", MODEL)
    code, out = run("check", "--no-cache", ".", cwd=d)
    return code == 1 and "\x1b" not in out and "\nfake.py" not in out, ""


@case("B1", "file edited while fix runs: the edit is kept")
def b1(d):
    body = "".join(f"    def f{i}(self, s, m):\n        return torch.softmax(s.masked_fill(m, -1e9), -1)\n"
                   for i in range(1500))
    w(d, "race.py", "import torch\nclass M(torch.nn.Module):\n" + body)
    env = {**os.environ, "XDG_CACHE_HOME": os.path.join(d, ".xdg")}
    p = subprocess.Popen([AMPLINT, "fix", "--no-cache", "--unsafe-fixes", "race.py"], cwd=d, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=_limits)
    time.sleep(1.5)
    with open(os.path.join(d, "race.py"), "a") as fh:
        fh.write("# USER EDIT\n")
    out = p.communicate(timeout=LIMIT_S)[0].decode()
    kept = b"# USER EDIT" in read(d, "race.py")
    if p.returncode == 0 and kept:
        return None, "fix finished before the edit (not a race this time)"
    return kept and p.returncode == 2 and "changed while" in out, out[-200:]


@case("B3", "file owned by another user, 0640, fixed as root: owner and mode kept")
def b3(d):
    if os.geteuid() != 0:
        return None, "needs root"
    p = w(d, "o.py", MODEL); os.chown(p, 1234, 5678); os.chmod(p, 0o640)
    code, out = run("fix", "--no-cache", "--unsafe-fixes", "o.py", cwd=d)
    st = os.stat(p)
    return code == 0 and (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (1234, 5678, 0o640), out[-200:]


@case("B4", "hard-linked file: every name sees the fix")
def b4(d):
    w(d, "m.py", MODEL); os.link(os.path.join(d, "m.py"), os.path.join(d, "other.txt"))
    code, out = run("fix", "--no-cache", "--unsafe-fixes", "m.py", cwd=d)
    return code == 0 and read(d, "other.txt") == FIXED.encode(), out[-200:]


@case("B5", "*.py symlink to a file outside the tree: refused")
def b5(d):
    outside = tempfile.mkdtemp()
    try:
        w(outside, "t.py", MODEL); git_init(d); os.symlink(os.path.join(outside, "t.py"), os.path.join(d, "l.py"))
        code, out = run("fix", "--no-cache", "--unsafe-fixes", "l.py", cwd=d)
        return code == 2 and read(outside, "t.py") == MODEL.encode(), out.strip()[-200:]
    finally:
        shutil.rmtree(outside)


@case("B6", "immutable file: cannot write, its fixes not counted (N53)")
def b6(d):
    w(d, "imm.py", MODEL); w(d, "a.py", MODEL)
    if subprocess.run(["chattr", "+i", os.path.join(d, "imm.py")], capture_output=True).returncode != 0:
        return None, "chattr +i not permitted here"
    try:
        code, out = run("fix", "--no-cache", "--unsafe-fixes", ".", cwd=d)
    finally:
        subprocess.run(["chattr", "-i", os.path.join(d, "imm.py")])
    return code == 2 and "Fixed 1 finding." in out and read(d, "imm.py") == MODEL.encode(), out[-200:]


@case("B7", "0444 file as any user: never written")
def b7(d):
    p = w(d, "r.py", MODEL); os.chmod(p, 0o444)
    code, out = run("fix", "--no-cache", "--unsafe-fixes", "r.py", cwd=d)
    return code == 2 and read(d, "r.py") == MODEL.encode() and "read-only" in out, out[-200:]


@case("B8", "disk full (a file-size limit): original intact, fixes not counted (N53)")
def b8(d):
    big = MODEL + "".join(f"x{i} = {i}  # padding\n" for i in range(4000))
    w(d, "big.py", big); w(d, "small.py", MODEL)
    env = {**os.environ, "XDG_CACHE_HOME": os.path.join(d, ".xdg")}

    def lim():
        _limits(); resource.setrlimit(resource.RLIMIT_FSIZE, (32768, 32768))
    p = subprocess.run([AMPLINT, "fix", "--no-cache", "--unsafe-fixes", "big.py", "small.py"], cwd=d, env=env,
                       capture_output=True, timeout=LIMIT_S, preexec_fn=lim)
    out = (p.stdout + p.stderr).decode()
    return (p.returncode == 2 and "Fixed 1 finding." in out and read(d, "big.py") == big.encode()
            and not [n for n in os.listdir(d) if n.startswith(".amplint-")]), out[-200:]


@case("B11", "idempotence: a second fix changes nothing")
def b11(d):
    w(d, "m.py", SOFTMAX)
    run("fix", "--no-cache", "--unsafe-fixes", "m.py", cwd=d)
    once = read(d, "m.py")
    run("fix", "--no-cache", "--unsafe-fixes", "m.py", cwd=d)
    return read(d, "m.py") == once and once != SOFTMAX.encode(), ""


@case("B12", "unicode_escape / utf-7 file: refused by fix, --stdin-filename and --add-noqa (N23, N37)")
def b12(d):
    esc = b'# -*- coding: unicode_escape -*-\nimport torch\ns = "\\x41"\ndef f(s, m):\n    return s.masked_fill(m, -1e9)\n'
    results = []
    for name, src in (("e.py", esc), ("u7.py", esc.replace(b"unicode_escape", b"utf-7"))):
        w(d, name, src)
        c1, _ = run("fix", "--no-cache", "--unsafe-fixes", name, cwd=d)
        c2, _ = run("check", "--no-cache", "--add-noqa", name, cwd=d)
        p = subprocess.run([AMPLINT, "fix", "--unsafe-fixes", "--stdin-filename", name], input=src, capture_output=True,
                           cwd=d, timeout=LIMIT_S)
        results.append(c1 == 2 and c2 == 2 and read(d, name) == src and p.stdout == src)
    return all(results), str(results)


@case("C1", "check/fix never import the linted code")
def c1(d):
    for n in ("model.py", "__init__.py", "conftest.py", "setup.py"):
        w(d, n, f"open({os.path.join(d, 'MARKER')!r}, 'w').write('x')\n" + MODEL)
    run("check", "--no-cache", ".", cwd=d); run("fix", "--no-cache", "--unsafe-fixes", ".", cwd=d)
    return not os.path.exists(os.path.join(d, "MARKER")), ""


@case("C2", "rule-paths do not run repo code without --allow-local-rules")
def c2(d):
    w(d, "pyproject.toml", '[tool.amplint]\nrule-paths = ["r"]\n')
    w(d, "r/evil.py", f"open({os.path.join(d, 'MARKER')!r}, 'w').write('x')\n"); w(d, "m.py", MODEL)
    code, out = run("check", "--no-cache", ".", cwd=d)
    return not os.path.exists(os.path.join(d, "MARKER")) and "not loaded" in out, out[-200:]


@case("C4", "python -m amplint with tomllib.py / re.py in the cwd: they do not run")
def c4(d):
    for n in ("tomllib", "tempfile", "hashlib", "libcst", "re", "tokenize"):
        w(d, f"{n}.py", f"open({os.path.join(d, 'MARKER')!r}, 'w').write('x')\n")
    w(d, "m.py", MODEL)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run([sys.executable, "-m", "amplint", "check", "--no-cache", "m.py"], cwd=d, capture_output=True,
                   timeout=LIMIT_S, env=env)
    return not os.path.exists(os.path.join(d, "MARKER")), ""


@case("C6", "cache across folders with per-file-ignores: the right exit code each time")
def c6(d):
    w(d, "pyproject.toml", '[tool.amplint]\n[tool.amplint.per-file-ignores]\n"tests/*" = ["AMP101"]\n')
    w(d, "tests/m.py", MODEL); w(d, "src/m.py", MODEL)
    codes = [run("check", "m.py", cwd=os.path.join(d, sub))[0] for sub in ("tests", "src", "src", "tests")]
    return codes == [0, 1, 1, 0], str(codes)


@case("C7", "a crafted cache entry (edited, old MAC) is a miss")
def c7(d):
    w(d, "m.py", MODEL)
    run("check", "m.py", cwd=d)
    for root, _, files in os.walk(os.path.join(d, ".amplint_cache")):
        for n in files:
            if n.endswith(".json"):
                p = os.path.join(root, n)
                with open(p, "rb") as fh:
                    data = fh.read()
                with open(p, "wb") as fh:
                    fh.write(data.replace(b"AMP101", b"AMP999"))
    code, out = run("check", "m.py", cwd=d)
    return code == 1 and "AMP101" in out, ""


@case("C8", "malformed but signed cache entries: misses, no traceback")
def c8(d):
    w(d, "m.py", MODEL)
    w(d, ".amplint_cache/ab/cd.json", '{"amplint-cache":2,"mac":"' + "0" * 64 + '","entry":' + "[" * 100000 + "]" * 100000 + "}")
    code, out = run("check", "m.py", cwd=d)
    return code == 1 and one_line(out), ""


# --- 2. the new cases ------------------------------------------------------------------------

@case("N22", "mixed LF/CRLF ending in CR through --stdin-filename: fixed, bytes kept")
def n22(d):
    src = (b"import torch\r\nclass M(torch.nn.Module):\n\tdef forward(self, s, m):\r\n"
           b"\t\treturn torch.softmax(s.masked_fill(m, -1e9), -1)\r")
    p = subprocess.run([AMPLINT, "fix", "--stdin-filename", "x.py"], input=src, capture_output=True, cwd=d,
                       timeout=LIMIT_S, preexec_fn=_limits)
    return p.returncode == 0 and p.stdout == src.replace(b"-1e9", b"torch.finfo(s.dtype).min"), p.stderr.decode()[-200:]


@case("N24", "NUL, bad UTF-8, syntax error, empty through stdin: echoed byte for byte")
def n24(d):
    ok = []
    for src in (b"x = 1\0\n", b"x = '\xff'\n", b"def f(:\n", b"", b"\xef\xbb\xbf"):
        p = subprocess.run([AMPLINT, "fix", "--stdin-filename", "x.py"], input=src, capture_output=True, cwd=d,
                           timeout=LIMIT_S)
        ok.append(p.stdout == src and b"Traceback" not in p.stderr)
    return all(ok), str(ok)


@case("N26", "6 MB through --stdin-filename: in pieces, memory like a file by path (checked at 4.3 MB, 1.2 GB AS)")
def n26(d):
    pad = "#" + "p" * 990
    heavy = "X{i} = [" + "a," * 480 + "]\n"
    rows = [SOFTMAX.split("\n", 1)[1] if i % 500 == 0 else heavy.format(i=i) if i % 12 == 0 else f"X{i} = {i}  {pad}\n"
            for i in range(4300)]
    src = ("import torch\n" + "".join(rows)).encode()

    def lim():
        resource.setrlimit(resource.RLIMIT_AS, (1200 * 1024 ** 2,) * 2)  # whole: about 300 MB RSS, 1.5 GB AS
    p = subprocess.run([AMPLINT, "check", "--no-cache", "--format", "concise", "--stdin-filename", "big.py"], input=src,
                       capture_output=True, cwd=d, timeout=300, preexec_fn=lim)
    out = p.stdout.decode()
    return p.returncode == 1 and out.count("AMP101") == 9, (out + p.stderr.decode())[-200:]


@case("N28", "baseline nested 100,000 deep: one line, exit 2")
def n28(d):
    w(d, "m.py", MODEL); w(d, "deep.json", '{"amplint-baseline":1,"findings":' + "[" * 100000 + "]" * 100000 + "}")
    code, out = run("check", "--no-cache", ".", "--baseline", "deep.json", cwd=d)
    return code == 2 and one_line(out), out.strip()[-200:]


@case("N29", "baseline version `true` / 1.0: refused")
def n29(d):
    w(d, "m.py", MODEL); w(d, "b.json", '{"amplint-baseline": true, "findings": []}')
    code, out = run("check", "--no-cache", ".", "--baseline", "b.json", cwd=d)
    return code == 2 and one_line(out), out.strip()[-200:]


@case("N31", "baseline linked to /dev/zero: one line, no memory blow-up")
def n31(d):
    w(d, "m.py", MODEL); os.symlink("/dev/zero", os.path.join(d, "amplint-baseline.json"))
    code, out = run("check", "--no-cache", ".", "--baseline", "amplint-baseline.json", cwd=d, timeout=20)
    return code == 2 and one_line(out), out.strip()[-200:]


@case("N32", "baseline that is a FIFO: no hang")
def n32(d):
    w(d, "m.py", MODEL); os.mkfifo(os.path.join(d, "b.json"))
    code, out = run("check", "--no-cache", ".", "--baseline", "b.json", cwd=d, timeout=20)
    return code == 2 and one_line(out), out.strip()[-200:]


@case("N33", "--write-baseline / -o through a committed link out of the tree: refused")
def n33(d):
    outside = tempfile.mkdtemp()
    try:
        git_init(d); w(d, "m.py", MODEL); w(outside, "bashrc", "keep\n")
        os.symlink(os.path.join(outside, "bashrc"), os.path.join(d, "amplint-baseline.json"))
        os.symlink(os.path.join(outside, "new"), os.path.join(d, "report.json"))
        c1, _ = run("check", ".", "--write-baseline", "amplint-baseline.json", cwd=d)
        c2, _ = run("check", "--format", "json", "-o", "report.json", ".", cwd=d)
        return (c1 == 2 and c2 == 2 and read(outside, "bashrc") == b"keep\n"
                and not os.path.exists(os.path.join(outside, "new"))), f"{c1} {c2}"
    finally:
        shutil.rmtree(outside)


@case("N34", "--add-noqa never edits a string literal holding `# noqa:`")
def n34(d):
    src = 'import torch\ndef f(s, m):\n    x = "# noqa: E501"; y = s.masked_fill(m, -1e9)  # noqa: E402\n    return x, y\n'
    w(d, "n1.py", src)
    run("check", "--no-cache", "--add-noqa", "n1.py", cwd=d)
    after = read(d, "n1.py").decode()
    return '"# noqa: E501"' in after and "E402, AMP101" in after, after.splitlines()[2]


@case("N35", "a string literal holding `# noqa` / `# amplint: ignore` silences nothing")
def n35(d):
    w(d, "q1.py", 'import torch\ndef f(s, m):\n    y = s.masked_fill(m, -1e9); x = "# noqa: AMP101"\n'
                  '    z = s.masked_fill(m, -1e9); w = "# amplint: ignore"\n    u = s.masked_fill(m, -1e9); h = "# noqa"\n'
                  '    return y\n')
    code, out = run("check", "--no-cache", "--format", "concise", "q1.py", cwd=d)
    return code == 1 and out.count("AMP101") == 3, out[-200:]


@case("N36", "--add-noqa placement: continuation, string running on, f-string, a; b, type: ignore, #noqa:, NOQA, CRLF")
def n36(d):
    src = ('import torch\ndef f(s, m, name):\n    a = s.masked_fill(m, \\\n        -1e9)\n'
           '    b = s.masked_fill(m, -1e9); doc = """\n    text"""\n'
           '    c = s.masked_fill(m, -1e9) if f"{name}" else 0\n    d = 1; e = s.masked_fill(m, -1e9)\n'
           '    g = s.masked_fill(m, -1e9)  # type: ignore[attr-defined]\n    h = s.masked_fill(m, -1e9)  #noqa:E501,W291\n'
           '    i = s.masked_fill(m, -1e9)  # NOQA\n    return a, b, c, e, g, h, i, doc\n')
    w(d, "p.py", src); w(d, "crlf.py", MODEL.replace("\n", "\r\n").rstrip("\r\n"))
    run("check", "--no-cache", "--add-noqa", "p.py", "crlf.py", cwd=d)
    once = read(d, "p.py")
    run("check", "--no-cache", "--add-noqa", "p.py", "crlf.py", cwd=d)
    code, out = run("check", "--no-cache", "--extend-select", "AMP900", "p.py", "crlf.py", cwd=d)
    comp = subprocess.run([sys.executable, "-m", "py_compile", os.path.join(d, "p.py")]).returncode
    return (code == 0 and comp == 0 and read(d, "p.py") == once and b'doc = """\n' in once
            and b"\r\n" in read(d, "crlf.py")), out[-200:]


@case("N38", "--add-noqa keeps an edit made while it runs (covered by a test that pauses it)")
def n38(d):
    return None, "timing-dependent here; tests/adversarial/test_files.py pauses --add-noqa between read and write"


@case("N41", "SARIF on a file named $'\\xff.py': no traceback")
def n41(d):
    w(d, b"\xff.py".decode("utf-8", "surrogateescape"), MODEL)
    code, out = run("check", "--no-cache", "--format", "sarif", ".", cwd=d)
    return code == 1 and one_line(out) and '"runs"' in out, out[-200:]


@case("N42", "JUnit with control characters in a file name: well-formed XML")
def n42(d):
    import xml.etree.ElementTree as ET
    w(d, "\x1b[31mred.py", MODEL); w(d, "ctl\x01\x02.py", MODEL)
    p = subprocess.run([AMPLINT, "check", "--no-cache", "--format", "junit", "."], cwd=d, capture_output=True,
                       timeout=LIMIT_S)
    try:
        ET.fromstring(p.stdout)
        return p.returncode == 1, ""
    except ET.ParseError as exc:
        return False, str(exc)


@case("N44", "a world-readable cache secret is replaced, with one warning")
def n44(d):
    w(d, "m.py", MODEL)
    run("check", "m.py", cwd=d)
    secret = os.path.join(d, ".xdg", "amplint", "cache-secret")
    os.chmod(secret, 0o644)
    code, out = run("check", "m.py", cwd=d)
    return code == 1 and "cache secret" in out and os.stat(secret).st_mode & 0o077 == 0, out[-200:]


@case("N45", ".amplint_cache committed as a link to another repo: nothing written there")
def n45(d):
    victim = os.path.join(d, "victim"); repo = os.path.join(d, "repo")
    git_init(victim); w(victim, "notes.txt", "x\n"); git_init(repo); w(repo, "pyproject.toml", "[tool.amplint]\n")
    w(repo, "m.py", MODEL); os.symlink("../victim", os.path.join(repo, ".amplint_cache"))
    run("check", ".", cwd=repo)
    return sorted(os.listdir(victim)) == [".git", "notes.txt"], str(os.listdir(victim))


@case("N46", "dangling .amplint_cache/.gitignore link: its target is not created")
def n46(d):
    os.makedirs(os.path.join(d, "repo", ".amplint_cache")); os.makedirs(os.path.join(d, "target"))
    w(d, "repo/m.py", MODEL); os.symlink("../../target/created.sh", os.path.join(d, "repo", ".amplint_cache", ".gitignore"))
    run("check", ".", cwd=os.path.join(d, "repo"))
    return os.listdir(os.path.join(d, "target")) == [], ""


@case("N47", "--cache-dir naming a regular file: still lints")
def n47(d):
    w(d, "m.py", MODEL); w(d, "afile", "x")
    code, out = run("check", "--cache-dir", "afile", "m.py", cwd=d)
    return code == 1 and read(d, "afile") == b"x", out[-200:]


@case("N49", ".gitignore / .ignore / nested .gitignore linked to /dev/zero, /dev/urandom: no blow-up")
def n49(d):
    w(d, "m.py", MODEL); os.symlink("/dev/zero", os.path.join(d, ".gitignore"))
    os.symlink("/dev/urandom", os.path.join(d, ".ignore")); os.makedirs(os.path.join(d, "sub"))
    os.symlink("/dev/zero", os.path.join(d, "sub", ".gitignore")); w(d, "sub/n.py", MODEL)
    code, out = run("check", "--no-cache", ".", cwd=d, timeout=30)
    return code in (1, 2) and one_line(out) and "m.py:3" in out, out[-200:]


@case("N50", ".gitignore that is a FIFO: no hang")
def n50(d):
    w(d, "m.py", MODEL); os.mkfifo(os.path.join(d, ".gitignore"))
    code, out = run("check", "--no-cache", ".", cwd=d, timeout=30)
    return code != 124 and one_line(out), out[-200:]


@case("N51", "pyproject.toml linked to /dev/zero: skipped, files linted")
def n51(d):
    w(d, "m.py", MODEL); os.symlink("/dev/zero", os.path.join(d, "pyproject.toml"))
    code, out = run("check", "--no-cache", ".", cwd=d, timeout=30)
    return code in (1, 2) and one_line(out) and "m.py:3" in out, out[-200:]


@case("N53", "fix summary does not count fixes that were not written (read-only file)")
def n53(d):
    p = w(d, "r.py", MODEL); os.chmod(p, 0o444); w(d, "a.py", MODEL)
    code, out = run("fix", "--no-cache", "--unsafe-fixes", ".", cwd=d)
    return code == 2 and "Fixed 1 finding." in out, out[-200:]


@case("N76", "a chain of 20,000 aliases K0 = 1e9; K1 = K0; ...: flagged")
def n76(d):
    w(d, "a.py", "import torch\nK0 = 1e9\n" + "".join(f"K{i} = K{i - 1}\n" for i in range(1, 20000))
      + "def f(s, m):\n    return s.masked_fill(m, -K19999)\n")
    code, out = run("check", "--no-cache", "--format", "concise", "a.py", cwd=d, timeout=120)
    return code == 1 and "AMP101" in out, out[-200:]


@case("N77", "helper chain n = 3,000: linear, found at depth")
def n77(d):
    n = 3000
    src = "import torch\n" + "".join(f"def h{i}(s, m, v):\n    return h{i + 1}(s, m, v)\n" for i in range(n))
    src += f"def h{n}(s, m, v):\n    return s.masked_fill(m, v)\ndef f(s, m):\n    return h0(s, m, -1e9)\n"
    w(d, "c.py", src)
    t = time.monotonic()
    code, out = run("check", "--no-cache", "c.py", cwd=d, timeout=120)
    return code in (0, 1) and time.monotonic() - t < 40, f"{time.monotonic() - t:.1f} s, exit {code}"


@case("N78", "cyclic constants, self-recursive helper, 1M-char identifier, 20,000-long attribute chain")
def n78(d):
    w(d, "a.py", "import torch\nA = B\nB = A\ndef r(s, m, v):\n    return r(s, m, v)\n"
                 "def f(s, m):\n    return s.masked_fill(m, -A)\n")
    w(d, "b.py", "x" * 1_000_000 + " = 1\n"); w(d, "c.py", "x = torch" + ".a" * 20000 + "\n")
    code, out = run("check", "--no-cache", ".", cwd=d, timeout=120)
    return code in (0, 1, 2) and one_line(out), out[-200:]


@case("N81", "killing check -j 2 leaves no worker (covered by tests/adversarial/test_processes.py)")
def n81(d):
    return None, "tests/adversarial/test_processes.py kills a run with SIGTERM and SIGKILL"


COVERED_ELSEWHERE = {
    "N1-N20 (language server)": "tests/adversarial/test_server_adversarial.py, tests/test_server.py",
    "D1-D14, N54-N63 (AMP engine)": "tests/amp/",
    "N64-N73 (verify)": "tests/adversarial/test_verify_target.py, tests/verify/",
    "A19, A20, N52, N74, N79 (scale)": "bench/real_code.py, bench/chain_cost.py, test_robustness.py (pieces)",
}


def tests_naming(cid: str) -> list[str]:
    pattern = re.compile(rf"(^|[^A-Za-z0-9]){cid}([^0-9]|$)", re.I)
    found = []
    for root, _, files in os.walk(os.path.join(ROOT, "tests")):
        for n in files:
            if n.endswith(".py"):
                with open(os.path.join(root, n), encoding="utf-8", errors="replace") as fh:
                    if pattern.search(fh.read()):
                        found.append(os.path.relpath(os.path.join(root, n), ROOT))
    return found


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="comma-separated case ids")
    args = ap.parse_args(argv)
    wanted = args.only.split(",") if args.only else list(CASES)
    broken = 0
    print("| case | state | seconds | test | what / note |\n|---|---|---|---|---|")
    for cid in wanted:
        what, fn = CASES[cid]
        d = tempfile.mkdtemp(prefix=f"adv-{cid}-")
        t = time.monotonic()
        try:
            ok, note = fn(d)
        except Exception as exc:  # a case that cannot be set up here is reported, not fatal
            ok, note = False, f"{type(exc).__name__}: {exc}"
        finally:
            subprocess.run(["chattr", "-R", "-i", d], capture_output=True)
            shutil.rmtree(d, ignore_errors=True)
        state = "held" if ok else "not run here" if ok is None else "BROKEN"
        broken += ok is False
        tests = ", ".join(t.replace("tests/", "") for t in tests_naming(cid)) or "none by id"
        note = " ".join(str(note).split())[:160].replace("|", "/")
        print(f"| {cid} | {state} | {time.monotonic() - t:.1f} | {tests} | {what}{' -- ' + note if note and not ok else ''} |",
              flush=True)
    for what, where in COVERED_ELSEWHERE.items():
        print(f"| {what} | not re-run by this script | | {where} | |")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
