"""Bad input through the real command line (issue 9): every bad file gets a clear
``path:line:col: error: reason`` line on stderr and exit code 2, the other files are
still linted, nothing prints a traceback, and ``fix`` never leaves a file half written.

Runs ``python -m amplint`` in subprocesses, as users do.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import textwrap
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: one AMP101 (masked_fill with -1e9 on a named tensor) and one AMP301 (softmax in forward)
MODEL = textwrap.dedent(
    """\
    import torch
    import torch.nn.functional as F


    class Attention(torch.nn.Module):
        def forward(self, scores, mask):
            scores = scores.masked_fill(mask, -1e9)
            return F.softmax(scores, dim=-1)
    """
)
MODEL_LINES = {7: "AMP101", 8: "AMP301"}


def error_lines(stderr: str) -> dict[str, str]:
    """path -> the ``line:col: error: reason`` part of its error line."""
    out = {}
    for line in stderr.splitlines():
        if ": error: " in line and not line.startswith("amplint:"):
            path, _, rest = line.partition(":")
            out[path] = rest
    return out


def write(path, data: bytes | str, mode=None):
    with open(path, "wb") as fh:
        fh.write(data.encode() if isinstance(data, str) else data)
    if mode is not None:
        os.chmod(path, mode)
    return str(path)


@pytest.fixture
def bad_folder(tmp_path):
    d = tmp_path / "proj"
    d.mkdir()
    write(d / "good.py", MODEL)
    write(d / "syntax.py", "import torch\ndef f(:\n    pass\n")
    write(d / "empty.py", b"")
    write(d / "binary.py", bytes(range(256)) * 8)
    write(d / "latin_nocookie.py", b'import torch\nname = "caf\xe9"\n')
    write(d / "latin_cookie.py", b"# -*- coding: latin-1 -*-\n" + MODEL.replace("import torch\n", 'import torch\nname = "caf\xe9"\n', 1).encode("latin-1"))
    write(d / "bad_cookie.py", b"# -*- coding: klingon -*-\nimport torch\n")
    write(d / "crlf.py", MODEL.replace("\n", "\r\n"))
    write(d / "bom.py", b"\xef\xbb\xbf" + MODEL.encode())
    write(d / "tabs.py", MODEL.replace("    ", "\t"))
    write(d / "mixed_tabs.py", "import torch\nif True:\n        x = 1\n\ty = 2\n")
    os.symlink("loop_b.py", d / "loop_a.py")
    os.symlink("loop_a.py", d / "loop_b.py")
    os.symlink("missing_target.py", d / "dangling.py")
    os.mkfifo(d / "fifo.py")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(d / "sock.py"))
    (d / "folder.py").mkdir()  # a folder named like a module: walked, not read
    write(d / "folder.py" / "inner.py", MODEL)
    yield d
    sock.close()


EXPECTED_ERRORS = {
    "syntax.py": ("2:", "syntax error"),
    "binary.py": ("1:1", "binary file"),
    "latin_nocookie.py": ("2:", "not valid utf-8"),
    "bad_cookie.py": ("1:1", "encoding"),
    "mixed_tabs.py": ("4:", "indent"),
    "loop_a.py": ("1:1", "symlink loop"),
    "loop_b.py": ("1:1", "symlink loop"),
    "dangling.py": ("1:1", "broken symbolic link"),
    "fifo.py": ("1:1", "not a regular file"),
    "sock.py": ("1:1", "not a regular file"),
}
LINTED = ("good.py", "latin_cookie.py", "crlf.py", "bom.py", "tabs.py", "folder.py/inner.py")


@pytest.mark.parametrize("jobs", ["1", "4"], ids=["in-process", "process-pool"])
def test_bad_inputs_are_reported_and_the_rest_is_linted(bad_folder, jobs, amplint):
    missing = str(bad_folder / "does_not_exist.py")
    proc = amplint("check", str(bad_folder), missing, "--format", "json", "--no-cache", "-j", jobs, timeout=120)
    assert proc.returncode == 2, proc.stderr
    errors = error_lines(proc.stderr)
    for name, (where, reason) in EXPECTED_ERRORS.items():
        path = str(bad_folder / name)
        assert path in errors, f"no error line for {name}:\n{proc.stderr}"
        assert errors[path].startswith(where) and reason in errors[path].lower(), (name, errors[path])
    assert missing in errors and "no such file" in errors[missing]
    # exactly the bad files have errors; the good ones were linted completely
    assert set(errors) == {str(bad_folder / n) for n in EXPECTED_ERRORS} | {missing}, sorted(errors)
    found = {(os.path.relpath(f["path"], bad_folder), f["line"], f["code"]) for f in json.loads(proc.stdout)}
    offset = {"latin_cookie.py": 2}  # the cookie and the added line come first
    for name in LINTED:
        for line, code in MODEL_LINES.items():
            assert (name, line + offset.get(name, 0), code) in found, (name, sorted(found))
    assert not [f for f in found if f[0] == "empty.py"]


def test_text_and_concise_output_name_the_file_line_and_reason(bad_folder, amplint):
    for fmt in ("text", "concise", "github", "sarif"):
        proc = amplint("check", str(bad_folder / "syntax.py"), str(bad_folder / "good.py"), "--no-cache", "--format", fmt)
        assert proc.returncode == 2
        both = proc.stdout + proc.stderr
        path = str(bad_folder / "syntax.py")
        assert "syntax error" in both, (fmt, both)
        if fmt == "github":
            assert f"::error file={path},line=2," in both, both
        elif fmt == "sarif":
            notes = json.loads(proc.stdout)["runs"][0]["invocations"][0]["toolExecutionNotifications"]
            where = [n["locations"][0]["physicalLocation"] for n in notes if "syntax error" in n["message"]["text"]]
            assert where and where[0]["region"]["startLine"] == 2
            assert where[0]["artifactLocation"]["uri"].endswith("syntax.py")
        else:
            assert f"{path}:2:" in both, (fmt, both)


def test_fix_leaves_unreadable_and_broken_files_alone_and_fixes_the_rest(bad_folder, amplint):
    before = {p: (bad_folder / p).read_bytes() for p in ("syntax.py", "binary.py", "latin_nocookie.py", "empty.py", "mixed_tabs.py")}
    proc = amplint("fix", str(bad_folder), "--unsafe-fixes", "--no-cache", timeout=180)
    assert proc.returncode == 2
    for name, data in before.items():
        assert (bad_folder / name).read_bytes() == data, name
    # the good files were fixed (the softmax fix is safe, the mask fix unsafe)
    for name in LINTED:
        text = (bad_folder / name).read_bytes().decode("latin-1")
        assert "-1e9" not in text and "dtype=torch.float32" in text, (name, text)
    assert not [n for n in os.listdir(bad_folder) if n.startswith(".amplint-")], "temporary files left behind"


@pytest.mark.skipif(os.geteuid() == 0, reason="running as root: chmod 000 does not stop root from reading; "
                    "the FIFO, socket and dangling-link cases above cover files that cannot be read")
def test_unreadable_file(tmp_path, amplint):
    path = write(tmp_path / "secret.py", MODEL, mode=0)
    good = write(tmp_path / "good.py", MODEL)
    proc = amplint("check", path, good, "--no-cache", "-q")
    assert proc.returncode == 2
    assert f"{path}:1:1: error: permission denied" in proc.stdout + proc.stderr
    assert f"{good}:7:" in proc.stdout


def test_directory_named_like_a_module_given_explicitly(tmp_path, amplint):
    d = tmp_path / "x.py"
    d.mkdir()
    write(d / "m.py", MODEL)
    proc = amplint("check", str(d), "--no-cache", "-q")
    assert proc.returncode == 1, proc.stderr
    assert f"{d / 'm.py'}:7:" in proc.stdout


def test_nonexistent_path_alone(tmp_path, amplint):
    proc = amplint("check", str(tmp_path / "nope.py"), "--no-cache")
    assert proc.returncode == 2
    assert f"{tmp_path / 'nope.py'}:1:1: error: no such file or directory" in proc.stdout + proc.stderr


def test_symlink_loop_as_first_argument(tmp_path, amplint):
    os.symlink("b.py", tmp_path / "a.py")
    os.symlink("a.py", tmp_path / "b.py")
    good = write(tmp_path / "good.py", MODEL)
    proc = amplint("check", str(tmp_path / "a.py"), good, "--no-cache", "-q")
    assert proc.returncode == 2
    assert "symlink loop" in proc.stdout + proc.stderr and f"{good}:7:" in proc.stdout


@pytest.mark.parametrize(
    "config, line, reason",
    [
        ('[tool.amplint]\ntarget = "fp12"\n', 2, "target"),
        ("[tool.amplint\ntarget = 'fp16'\n", 1, "invalid toml"),
        ("[tool.amplint]\nselect = 5\n", 2, "select"),
        ("[tool.amplint]\nopt_levle = 'O2'\n", 2, "unknown key"),
        ("[tool.amplint]\nalignment = 12\n", 2, "power of two"),
        ('[tool]\namplint = "yes"\n', None, "must be a table"),
    ],
    ids=["bad-value", "bad-toml", "bad-type", "unknown-key", "bad-alignment", "not-a-table"],
)
def test_broken_config_is_a_clear_error_and_writes_nothing(tmp_path, config, line, reason, amplint):
    cfg = write(tmp_path / "pyproject.toml", config)
    model = write(tmp_path / "model.py", MODEL)
    for command in (["check"], ["fix", "--unsafe-fixes"]):
        proc = amplint(*command, str(tmp_path), "--no-cache")
        assert proc.returncode == 2, proc.stdout + proc.stderr
        where = f"{cfg}:{line}:" if line else f"{cfg}:"
        out = proc.stdout + proc.stderr
        assert where in out and reason in out.lower() and "Traceback" not in out, out
        assert (tmp_path / "model.py").read_text() == MODEL


def test_ten_megabyte_file(tmp_path, amplint):
    filler = "# " + "x" * 98 + "\n"
    blob = '"""' + ("generated table row " * 4 + "\n") * (10 * 1024 * 1024 // 81) + '"""\n'
    text = MODEL + "\n\n" + blob + filler * 100 + MODEL.replace("class Attention", "class Attention2")
    assert len(text) > 10 * 1024 * 1024
    path = write(tmp_path / "huge.py", text)
    tail_start = text.count("\n", 0, text.rindex("import torch\nimport torch.nn.functional")) + 1
    proc = amplint("check", path, "--no-cache", "--format", "json", timeout=300)
    assert proc.returncode == 1, proc.stderr
    got = {(f["line"], f["code"]) for f in json.loads(proc.stdout)}
    want = {(line, code) for line, code in MODEL_LINES.items()} | {(line + tail_start - 1, code) for line, code in MODEL_LINES.items()}
    assert got == want
    proc = amplint("fix", path, "--no-cache", "--unsafe-fixes", timeout=300)
    assert proc.returncode in (0, 1), proc.stderr
    new = (tmp_path / "huge.py").read_text()
    assert new.count("dtype=torch.float32") == 2 and "-1e9" not in new
    assert blob in new and new.endswith("\n")


# --- fix keeps what it does not own ---------------------------------------------------------

@pytest.mark.parametrize("variant", ["crlf", "bom", "latin-1", "tabs", "mode-0640", "crlf+bom"])
def test_fix_preserves_line_endings_bom_encoding_and_permissions(tmp_path, variant, amplint):
    text = MODEL
    if variant == "tabs":
        text = text.replace("    ", "\t")
    if "crlf" in variant:
        text = text.replace("\n", "\r\n")
    if variant == "latin-1":
        data = b"# -*- coding: latin-1 -*-\n" + text.replace(
            "import torch\n", 'import torch\nNAME = "r\xe9seau"  # \xe9t\xe9\n', 1).encode("latin-1")
    else:
        data = text.encode()
    if "bom" in variant:
        data = b"\xef\xbb\xbf" + data
    mode = 0o640 if variant == "mode-0640" else 0o664
    path = write(tmp_path / "m.py", data, mode=mode)
    proc = amplint("fix", path, "--unsafe-fixes", "--no-cache")
    assert proc.returncode in (0, 1), proc.stderr
    new = (tmp_path / "m.py").read_bytes()
    assert new != data, "nothing was fixed"
    assert stat.S_IMODE(os.stat(path).st_mode) == mode
    assert new.startswith(b"\xef\xbb\xbf") == ("bom" in variant)
    if "crlf" in variant:
        assert new.count(b"\r\n") == new.count(b"\n"), new
    else:
        assert b"\r" not in new
    if variant == "latin-1":
        assert b'NAME = "r\xe9seau"  # \xe9t\xe9\n' in new
        new.decode("latin-1")
    if variant == "tabs":
        assert b"\n\tdef forward" in new and b"\n\t\treturn" in new
    compile(new, path, "exec")
    # a second run changes nothing
    amplint("fix", path, "--unsafe-fixes", "--no-cache")
    assert (tmp_path / "m.py").read_bytes() == new


def test_fix_through_a_symlink_keeps_the_link(tmp_path, amplint):
    target = write(tmp_path / "real.py", MODEL)
    os.symlink("real.py", tmp_path / "link.py")
    proc = amplint("fix", str(tmp_path / "link.py"), "--no-cache")
    assert proc.returncode in (0, 1), proc.stderr
    assert os.path.islink(tmp_path / "link.py")
    assert "dtype=torch.float32" in open(target).read()


# --- SIGKILL in the middle of a write ---------------------------------------------------------

_SLOW_WRITE = textwrap.dedent(
    """\
    import os, sys, time
    import amplint.files as files

    real_fdopen = os.fdopen

    class HalfThenHang:
        def __init__(self, fh):
            self.fh = fh
        def write(self, data):
            self.fh.write(data[: len(data) // 2])
            self.fh.flush()
            os.fsync(self.fh.fileno())
            print("HALF-WRITTEN", flush=True)
            time.sleep(120)
        def __getattr__(self, name):
            return getattr(self.fh, name)
        def __enter__(self):
            return self
        def __exit__(self, *exc):
            return self.fh.__exit__(*exc)

    def fdopen(fd, mode="r", *args, **kwargs):
        fh = real_fdopen(fd, mode, *args, **kwargs)
        return HalfThenHang(fh) if "w" in mode else fh

    files.os.fdopen = fdopen
    from amplint.cli import main
    sys.exit(main(sys.argv[1:]))
    """
)


def test_sigkill_in_the_middle_of_a_write_leaves_the_old_file_whole(tmp_path, amplint):
    path = write(tmp_path / "m.py", MODEL * 20)
    child = subprocess.Popen(
        [sys.executable, "-c", _SLOW_WRITE, "fix", path, "--no-cache", "-j", "1", "--unsafe-fixes"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        line = child.stdout.readline()
        assert line.strip() == "HALF-WRITTEN", line + child.stderr.read()
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    finally:
        if child.poll() is None:
            child.kill()
    assert (tmp_path / "m.py").read_text() == MODEL * 20
    # the half-written temporary file is not where anyone looks for source
    leftovers = [n for n in os.listdir(tmp_path) if n != "m.py"]
    assert all(n.startswith(".amplint-") and n.endswith(".tmp") for n in leftovers), leftovers
    # and a later run lints only the real file
    proc = amplint("check", str(tmp_path), "--no-cache", "-q")
    assert proc.returncode == 1 and all(line.startswith(path) for line in proc.stdout.splitlines())


def test_sigkill_at_random_moments_leaves_old_or_new_file(tmp_path, amplint):
    """The real CLI on a file with hundreds of fixes, killed at random moments: the file
    is always exactly the old text or exactly the fully fixed text."""
    import random

    original = MODEL + "".join(MODEL.split("\n\n\n", 1)[1].replace("Attention", f"Attention{i}") for i in range(150))
    reference = tmp_path / "reference"
    reference.mkdir()
    write(reference / "m.py", original)
    t0 = time.monotonic()
    amplint("fix", str(reference / "m.py"), "--no-cache", "--unsafe-fixes", "-j", "1")
    duration = time.monotonic() - t0
    fixed = (reference / "m.py").read_text()
    assert fixed != original
    rng = random.Random(9)
    seen = set()
    for attempt in range(6):
        work = tmp_path / f"run{attempt}"
        work.mkdir()
        path = write(work / "m.py", original)
        child = subprocess.Popen([sys.executable, "-m", "amplint", "fix", path, "--no-cache", "--unsafe-fixes", "-j", "1"],
                                 cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.2, duration * 1.1))
        child.send_signal(signal.SIGKILL)
        child.wait(30)
        now = (work / "m.py").read_text()
        assert now in (original, fixed), f"attempt {attempt}: the file is neither the old nor the new text"
        seen.add(now == fixed)
    assert seen, "no attempt ran"


# --- a shared cache -----------------------------------------------------------------------------

def test_two_processes_sharing_one_cache_folder(tmp_path, amplint):
    src = tmp_path / "src"
    src.mkdir()
    for i in range(12):
        write(src / f"m{i}.py", MODEL.replace("Attention", f"Attention{i}") + ("\nX = 1\n" * i))
    cache = tmp_path / "cache"
    expected = amplint("check", str(src), "--no-cache", "--format", "json").stdout
    for round_ in range(3):
        procs = [
            subprocess.Popen([sys.executable, "-m", "amplint", "check", str(src), "--format", "json", "--cache-dir", str(cache), "-j", "2"],
                             cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)
        ]
        outs = [p.communicate(timeout=240) for p in procs]
        for p, (out, err) in zip(procs, outs):
            assert p.returncode == 1 and "Traceback" not in err, err
            assert json.loads(out) == json.loads(expected)
    entries = [os.path.join(d, n) for d, _, names in os.walk(cache) for n in names if n.endswith(".json")]
    assert entries, "the cache was never written"
    for entry in entries:
        with open(entry) as fh:
            json.load(fh)  # every entry is whole
    assert not [n for d, _, names in os.walk(cache) for n in names if n.endswith(".tmp")]
    # a damaged entry is a miss, not an error
    for entry in entries:
        with open(entry, "w") as fh:
            fh.write('{"truncated": ')
    proc = amplint("check", str(src), "--format", "json", "--cache-dir", str(cache))
    assert proc.returncode == 1 and json.loads(proc.stdout) == json.loads(expected)


# --- the corpus itself: importable, runnable, and its golden fixes keep it so ---------------------

MODELS = os.path.join(ROOT, "fixtures", "models")


def _corpus_models():
    out = []
    for folder, _, names in os.walk(MODELS):
        for name in sorted(names):
            if name.endswith(".py") and not name.startswith("configuration_"):
                out.append(os.path.relpath(os.path.join(folder, name), MODELS))
    return sorted(out)


def _run_example(path: str, tag: str):
    import importlib.machinery
    import importlib.util

    import torch

    name = f"_amplint_corpus_{tag}_{abs(hash(path))}"
    loader = importlib.machinery.SourceFileLoader(name, path)
    spec = importlib.util.spec_from_loader(name, loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # as a real import does (fixed code may use sys.modules[__name__])
    try:
        loader.exec_module(module)
        model, inputs = module.example()
        with torch.no_grad():
            out = model(*inputs)
    finally:
        sys.modules.pop(name, None)
    return out if isinstance(out, tuple) else (out,)


@pytest.mark.parametrize("rel", _corpus_models())
def test_corpus_model_runs_and_its_golden_fixes_keep_it_running(rel):
    """Every corpus model imports and runs its ``example()`` in fp32; after the golden safe
    fixes it gives the same fp32 output (safe means fp32 behaviour is unchanged), after the
    unsafe ones it still builds and runs with outputs of the same shapes."""
    import torch

    torch.set_num_threads(1)
    path = os.path.join(MODELS, rel)
    reference = _run_example(path, "orig")
    assert all(torch.isfinite(t).all() for t in reference), rel
    if os.path.exists(path + ".fixed"):
        fixed = _run_example(path + ".fixed", "safe")
        for a, b in zip(reference, fixed):
            assert a.dtype == b.dtype and a.shape == b.shape
            torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5, msg=f"{rel}: a safe fix changed the fp32 output")
    if os.path.exists(path + ".unsafe-fixed"):
        fixed = _run_example(path + ".unsafe-fixed", "unsafe")
        assert [t.shape for t in fixed] == [t.shape for t in reference]
        assert all(torch.isfinite(t).all() for t in fixed), rel


def test_broken_config_skips_only_the_files_it_governs(tmp_path, amplint):
    broken, fine = tmp_path / "broken", tmp_path / "fine"
    broken.mkdir()
    fine.mkdir()
    cfg = write(broken / "pyproject.toml", '[tool.amplint]\ntarget = "fp12"\n')
    write(broken / "model.py", MODEL)
    good = write(fine / "model.py", MODEL)
    for first in (broken, fine):
        other = fine if first is broken else broken
        proc = amplint("check", str(first), str(other), "--no-cache", "-q")
        assert proc.returncode == 2, proc.stdout + proc.stderr
        out = proc.stdout + proc.stderr
        assert f"{cfg}:2:1: error: [tool.amplint] target" in out and "Traceback" not in out
        assert f"{good}:7:" in proc.stdout
        assert str(broken / "model.py") not in proc.stdout
