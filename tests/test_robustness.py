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

#: one AMP101 (masked_fill with -1e9 on a named tensor: its safe fix writes
#: ``torch.finfo(scores.dtype).min``) and one AMP301 (softmax in forward: info under O1, which
#: already runs it in fp32, so no fix)
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
        assert "-1e9" not in text and "torch.finfo(scores.dtype).min" in text, (name, text)
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
    assert new.count("torch.finfo(scores.dtype).min") == 2 and "-1e9" not in new
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
    assert "torch.finfo(scores.dtype).min" in open(target).read()


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


# --- issue 15: fix never loses an edit, keeps owner and bytes -------------------------------------

#: runs the real CLI with ``fix_text`` wrapped: after amplint has read the file and computed
#: its fixes, ``ACTION`` (edit, delete, replace) is done to the file named ``TARGET`` --
#: what an editor's autosave or a ``git checkout`` does during a long ``fix``
_CHANGE_DURING_FIX = textwrap.dedent(
    """\
    import os, sys
    import amplint.pipeline as engine

    action, target = sys.argv[1], sys.argv[2]
    real_fix_text = engine.fix_text

    def fix_text(path, *args, **kwargs):
        out = real_fix_text(path, *args, **kwargs)
        if os.path.abspath(path) == os.path.abspath(target):
            if action == "edit":
                with open(path, "a") as fh:
                    fh.write("# USER EDIT\\n")
            elif action == "same-size-edit":  # same size, same mtime: only the hash can tell
                st = os.stat(path)
                data = open(path, "rb").read()
                with open(path, "r+b") as fh:
                    fh.write(data.replace(b"scores", b"SCORES", 1))
                os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
            elif action == "delete":
                os.unlink(path)
            elif action == "replace":  # a new file renamed over the old one (what editors do)
                with open(path + ".new", "w") as fh:
                    fh.write(open(path).read() + "# SAVED\\n")
                os.replace(path + ".new", path)
        return out

    engine.fix_text = fix_text
    from amplint.cli import main
    sys.exit(main(sys.argv[3:]))
    """
)


@pytest.mark.parametrize("action", ["edit", "same-size-edit", "delete", "replace"])
def test_fix_leaves_a_file_changed_while_fixing_alone(tmp_path, action):
    path = write(tmp_path / "m.py", MODEL)
    other = write(tmp_path / "other.py", MODEL)
    proc = subprocess.run(
        [sys.executable, "-c", _CHANGE_DURING_FIX, action, path, "fix", path, other, "--unsafe-fixes", "--no-cache", "-j", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"{path}:1:1: error: changed while amplint was fixing it; left unchanged" in proc.stdout + proc.stderr
    if action == "delete":
        assert not os.path.exists(path), "a file deleted during fix was re-created"
    else:
        now = (tmp_path / "m.py").read_text()
        assert "-1e9" in now and "torch.finfo(scores.dtype).min" not in now, "the fix was written over the user's edit"
        assert {"edit": "# USER EDIT\n", "replace": "# SAVED\n", "same-size-edit": "SCORES"}[action] in now
    assert "torch.finfo(scores.dtype).min" in (tmp_path / "other.py").read_text(), "the other file was not fixed"
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".amplint-")], "temporary file left behind"


def test_unchanged_since_compares_inode_size_mtime_and_content(tmp_path):
    from amplint.files import read_source, unchanged_since

    path = write(tmp_path / "m.py", MODEL)
    identity = read_source(path).identity
    assert unchanged_since(path, identity)
    st = os.stat(path)
    write(path, MODEL.replace("scores", "SCORES", 1))  # same size
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(path).st_size == st.st_size and not unchanged_since(path, identity)
    write(path, MODEL)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert unchanged_since(path, identity)  # same inode, bytes and times: the very file
    os.rename(write(tmp_path / "copy.py", MODEL), path)  # same bytes, another inode
    assert not unchanged_since(path, identity)
    os.unlink(path)
    assert not unchanged_since(path, identity)


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file to another owner")
def test_fix_as_root_keeps_owner_group_and_mode(tmp_path, amplint):
    path = write(tmp_path / "owned.py", MODEL, mode=0o640)
    os.chown(path, 1234, 5678)
    proc = amplint("fix", path, "--unsafe-fixes", "--no-cache")
    assert proc.returncode in (0, 1), proc.stderr
    st = os.stat(path)
    assert "torch.finfo(scores.dtype).min" in open(path).read()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (1234, 5678, 0o640)


ESCAPE_BODY = 'import torch\ns = "\\x41"\n\n\ndef f(s, m):\n    return torch.softmax(s.masked_fill(m, -1e9), -1)\n'


@pytest.mark.parametrize("encoding, body", [
    ("unicode_escape", ESCAPE_BODY),
    ("raw_unicode_escape", ESCAPE_BODY.replace('"\\x41"', '"\\u00e9"')),
    ("utf-7", ESCAPE_BODY),
    ("idna", ESCAPE_BODY.replace('s = "\\x41"\n', "")),
])
def test_fix_refuses_encodings_that_do_not_keep_the_bytes(tmp_path, encoding, body, amplint):
    data = f"# -*- coding: {encoding} -*-\n{body}".encode("ascii")
    path = write(tmp_path / "e.py", data)
    other = write(tmp_path / "other.py", MODEL)
    proc = amplint("fix", path, other, "--unsafe-fixes", "--no-cache")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = [l for l in (proc.stdout + proc.stderr).splitlines() if l.startswith(f"{path}:")]
    assert len(line) == 1 and "error: cannot fix: encoding" in line[0] and encoding in line[0], proc.stdout + proc.stderr
    assert (tmp_path / "e.py").read_bytes() == data
    assert "torch.finfo(scores.dtype).min" in (tmp_path / "other.py").read_text()


def test_fix_keeps_a_multibyte_encoding_byte_for_byte(tmp_path, amplint):
    """shift_jis is not one of the cheap known encodings: the per-character check passes
    and the comment's bytes outside the edit are kept."""
    comment = "# 注意: マスク\n"
    data = ("# -*- coding: shift_jis -*-\n" + comment + MODEL).encode("shift_jis")
    path = write(tmp_path / "j.py", data)
    proc = amplint("fix", path, "--unsafe-fixes", "--no-cache")
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    new = (tmp_path / "j.py").read_bytes()
    assert new.startswith(data[: data.index(b"import torch")]) and b"torch.finfo(scores.dtype).min" in new


# --- issue 15: every bad input is one line, exit 2, the rest still linted --------------------------

@pytest.mark.parametrize("cookie, reason", [
    ("rot13", "not a text encoding"), ("punycode", "cannot decode"), ("klingon", "encoding"),
])
def test_bad_coding_cookie_is_one_line(tmp_path, cookie, reason, amplint):
    bad = write(tmp_path / "bad.py", f"# -*- coding: {cookie} -*-\nimport torch\n")
    good = write(tmp_path / "good.py", MODEL)
    for command in (["check"], ["fix", "--unsafe-fixes"]):
        proc = amplint(*command, str(tmp_path), "--no-cache", "-q")
        assert proc.returncode == 2, proc.stdout + proc.stderr
        out = proc.stdout + proc.stderr
        assert f"{bad}:1:1: error: " in out and reason in out, out
    assert "torch.finfo(scores.dtype).min" in open(good).read()


def test_idna_cookie_checks_but_is_not_rewritten(tmp_path, amplint):
    data = b"# coding: idna\nimport torch\ndef f(s, m):\n    return s.masked_fill(m, -1e9)\n"
    path = write(tmp_path / "i.py", data)
    proc = amplint("check", path, "--no-cache", "-q")
    assert proc.returncode == 1 and f"{path}:4:" in proc.stdout, proc.stdout + proc.stderr
    proc = amplint("fix", path, "--no-cache", "--unsafe-fixes")
    assert proc.returncode == 2 and "cannot fix: encoding 'idna'" in proc.stdout + proc.stderr
    assert (tmp_path / "i.py").read_bytes() == data


SETPRIV = ["setpriv", "--inh-caps=-dac_override,-dac_read_search", "--bounding-set=-dac_override,-dac_read_search"]


def _without_root_file_powers() -> list[str]:
    """The command prefix under which chmod 000 stops us (root has CAP_DAC_* otherwise)."""
    if os.geteuid() != 0:
        return []
    import shutil

    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: cannot drop CAP_DAC_OVERRIDE to make a folder unsearchable")
    return SETPRIV


def test_unsearchable_folder_is_one_line_and_the_rest_is_linted(tmp_path):
    prefix = _without_root_file_powers()
    write(tmp_path / "good.py", MODEL)
    for name in ("locked", "deep/er/locked2"):
        os.makedirs(tmp_path / name)
        write(tmp_path / name / "m.py", MODEL)
    try:
        os.chmod(tmp_path / "locked", 0)
        os.chmod(tmp_path / "deep/er/locked2", 0)
        proc = subprocess.run([*prefix, sys.executable, "-m", "amplint", "check", ".", "--no-cache", "-q"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": ROOT})
        named = subprocess.run([*prefix, sys.executable, "-m", "amplint", "check", "locked/m.py", "good.py", "--no-cache", "-q"],
                               cwd=tmp_path, capture_output=True, text=True, timeout=120,
                               env={**os.environ, "PYTHONPATH": ROOT})
    finally:
        os.chmod(tmp_path / "locked", 0o755)
        os.chmod(tmp_path / "deep/er/locked2", 0o755)
    assert "Traceback" not in proc.stderr + named.stderr, proc.stderr + named.stderr
    assert proc.returncode == 2, proc.stdout + proc.stderr
    # paths as typed, without a ./ prefix (Ruff's convention)
    assert "\nlocked:1:1: error: cannot list folder: permission denied" in "\n" + proc.stderr
    assert "./locked" not in proc.stderr
    assert "deep/er/locked2:1:1: error: cannot list folder: permission denied" in proc.stderr
    assert "good.py:7:" in proc.stdout and "./good.py" not in proc.stdout
    assert named.returncode == 2
    assert "locked/m.py:1:1: error: permission denied" in named.stderr and "good.py:7:" in named.stdout


@pytest.mark.parametrize("config, line, reason", [
    ("tool = 5\n", 1, "`tool` must be a table"),
    ('[project]\nname = "x"\n[tool]\namplint = 5\n', None, "[tool.amplint] must be a table"),
    ("[tool.amplint]\nper-file-ignores = 5\n", 2, "[tool.amplint] per-file-ignores: must be a table"),
])
def test_config_of_the_wrong_type_skips_only_its_files(tmp_path, config, line, reason, amplint):
    sub, fine = tmp_path / "vendored", tmp_path / "fine"
    sub.mkdir()
    fine.mkdir()
    cfg = write(sub / "pyproject.toml", config)
    write(sub / "model.py", MODEL)
    good = write(fine / "model.py", MODEL)
    proc = amplint("check", str(tmp_path), "--no-cache", "-q")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    where = f"{cfg}:{line}:1: error: " if line else f"{cfg}:1:1: error: "
    assert where + reason in proc.stderr, proc.stderr
    assert f"{good}:7:" in proc.stdout and str(sub / "model.py") not in proc.stdout


@pytest.mark.parametrize("table, line, key", [
    ('select = ["AMP999"]\n', 2, "select"),
    ('ignore = ["AMP1", "FOO1"]\n', 2, "ignore"),
    ('target = "fp16"\nextend-select = ["AMP77"]\n', 3, "extend-select"),
    ('per-file-ignores = { "tests/*" = ["AMP101", "AMP8"] }\n', 2, "per-file-ignores 'tests/*'"),
    ('target = "fp16"\n\n[tool.amplint.per-file-ignores]\n"src/*" = ["NOPE"]\n', 5, "per-file-ignores 'src/*'"),
])
def test_unknown_codes_in_the_config_are_errors_with_file_and_line(tmp_path, table, line, key, amplint):
    cfg = write(tmp_path / "pyproject.toml", "[tool.amplint]\n" + table)
    write(tmp_path / "model.py", MODEL)
    proc = amplint("check", str(tmp_path), "--no-cache")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"{cfg}:{line}:1: error: [tool.amplint] {key}: unknown rule code or prefix" in proc.stdout + proc.stderr


def test_known_codes_and_amp900_in_the_config_are_accepted(tmp_path, amplint):
    write(tmp_path / "pyproject.toml", '[tool.amplint]\nselect = ["AMP1", "AMP301", "AMP900"]\n'
                                       'per-file-ignores = { "tests/*" = ["AMP9"] }\n')
    path = write(tmp_path / "model.py", MODEL)
    proc = amplint("check", str(tmp_path), "--no-cache", "-q")
    assert proc.returncode == 1 and f"{path}:7:" in proc.stdout, proc.stdout + proc.stderr


def test_named_non_python_file_gets_a_warning(tmp_path, amplint):
    notes = write(tmp_path / "notes.txt", "not python at all (\n")
    proc = amplint("check", notes, "--no-cache")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{notes}:1:1: warning: not linted: not a Python file" in proc.stderr
    assert "All checks passed" not in proc.stdout
    script = write(tmp_path / "tool", "#!/usr/bin/env python3\n" + MODEL)
    proc = amplint("check", notes, script, "--no-cache", "--format", "github")
    assert proc.returncode == 1 and f"::warning file={notes}," in proc.stdout


def test_syntax_error_in_a_file_without_torch_words_is_reported(tmp_path, amplint):
    bad = write(tmp_path / "bad.py", "def f(:\n")
    write(tmp_path / "plain.py", "x = 1\n")
    for command in (["check"], ["check", "--format", "json"], ["fix"], ["fix", "--diff"]):
        proc = amplint(*command, str(tmp_path), "--no-cache")
        assert proc.returncode == 2, (command, proc.stdout + proc.stderr)
        assert f"{bad}:1:7: error: syntax error" in proc.stdout + proc.stderr, command


def test_output_into_a_closed_pipe_is_quiet(tmp_path):
    for i in range(40):
        write(tmp_path / f"m{i}.py", MODEL)
    proc = subprocess.run(f"{sys.executable} -m amplint check {tmp_path} --no-cache -j 1 | head -1",
                          shell=True, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.stderr == "", proc.stderr
    assert proc.stdout.count("\n") == 1


def test_jobs_is_capped_and_negative_is_a_usage_error(tmp_path, amplint):
    from amplint.engine import worker_count

    cores = os.cpu_count() or 1
    assert worker_count(1000, 3) == 3
    assert worker_count(1000, 10_000) == 2 * cores
    assert worker_count(0, 10_000) == cores and worker_count(0, 1) == 1
    path = write(tmp_path / "m.py", MODEL)
    for bad in ("-1", "-5", "x"):
        proc = amplint("check", path, "-j", bad, "--no-cache")
        assert proc.returncode == 2 and "-j/--jobs" in proc.stderr, proc.stderr
    for i in range(12):
        write(tmp_path / f"n{i}.py", MODEL)
    t0 = time.monotonic()
    proc = amplint("check", str(tmp_path), "-j", "1000", "--no-cache", "-q")
    assert proc.returncode == 1 and proc.stdout.count(":7:") == 13
    assert time.monotonic() - t0 < 60


def test_control_characters_in_paths_and_source_lines_are_escaped(tmp_path, amplint):
    name = "nl\nfake.py:1:1: error: injected line\n.py"
    write(tmp_path / name, MODEL.replace("            return F.softmax", "            return F.softmax").replace(
        "scores = scores.masked_fill(mask, -1e9)", "scores = scores.masked_fill(mask, -1e9)  # \x1b]0;PWNED\x07\x1b[2J"))
    for fmt in ("text", "concise"):
        proc = amplint("check", str(tmp_path), "--no-cache", "--format", fmt)
        assert proc.returncode == 1, proc.stderr
        assert "\x1b" not in proc.stdout and "\x07" not in proc.stdout
        assert not [l for l in proc.stdout.splitlines() if l.startswith("fake.py")], proc.stdout
        assert "nl\\nfake.py:1:1: error: injected line\\n.py:7:" in proc.stdout
        if fmt == "text":
            assert "# \\x1b]0;PWNED\\x07\\x1b[2J" in proc.stdout


# --- issue 15: a file that changes type while it is read never hangs --------------------------------

_SWAP_WHILE_READING = textwrap.dedent(
    """\
    import os, sys, threading
    from amplint.files import read_regular

    folder = sys.argv[1]
    path = os.path.join(folder, "x.py")
    regular, fifo = os.path.join(folder, "regular"), os.path.join(folder, "fifo")
    stop = threading.Event()
    sys.setswitchinterval(1e-6)  # interleave the two threads finely: hit the window between checks

    def swap():
        n = 0
        while not stop.is_set():
            n += 1
            if n % 2:
                with open(regular, "w") as fh:
                    fh.write("import torch\\n")
                os.replace(regular, path)
            else:
                os.mkfifo(fifo)
                os.replace(fifo, path)

    thread = threading.Thread(target=swap)
    thread.start()
    kinds = set()
    try:
        for _ in range(20000):
            try:
                read_regular(path)
                kinds.add("regular")
            except OSError as exc:
                kinds.add("refused" if "not a regular file (FIFO)" in str(exc) else type(exc).__name__)
    finally:
        stop.set()
        thread.join()
    print(sorted(kinds))
    """
)


def test_a_path_swapped_between_file_and_fifo_never_hangs(tmp_path):
    """Regular file and FIFO renamed over one path in a loop while it is read 20,000 times:
    every read returns or refuses.  (The old stat-then-open hung in about half the runs
    of this script: a FIFO opened for reading without O_NONBLOCK blocks forever.)"""
    proc = subprocess.run([sys.executable, "-c", _SWAP_WHILE_READING, str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    kinds = eval(proc.stdout)
    assert "regular" in kinds and "refused" in kinds and set(kinds) <= {"regular", "refused", "FileNotFoundError"}, kinds


# --- issue 15: very large files are checked in pieces, with the same findings ------------------

#: the real CLI with the large-file threshold and the piece size made small, so that a
#: test-sized file is cut into many pieces
_SMALL_PIECES = textwrap.dedent(
    """\
    import sys
    import amplint.pipeline as engine

    engine.LARGE_FILE, engine.PIECE = int(sys.argv[1]), int(sys.argv[2])
    from amplint.cli import main
    sys.exit(main(sys.argv[3:]))
    """
)

PIECES_HEAD = textwrap.dedent(
    """\
    import math
    import torch
    import torch.nn.functional as F
    from torch import nn

    NEG = -1e9
    EPS: float = 1e-8


    @dataclass
    class Config:
        vocab_size: int = 50257
        hidden: int = 768

    """
)
PIECES_BODY = textwrap.dedent(
    """\
    def helper_{i}(scores, mask):
        scores = scores.masked_fill(mask, NEG)
        return torch.log(scores + EPS)


    @torch.no_grad()
    def decorated_{i}(x, m):
        return x.masked_fill(m, -1e9)


    class Block{i}(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(768, 50257)

        def forward(self, scores, mask):
            scores = scores.masked_fill(mask, -1e9)
            return F.softmax(scores, dim=-1).sum()


    if math.pi > 3:
        LIMIT_{i} = 1e5
    else:
        LIMIT_{i} = 1e4

    """
)


def _check_json(path, large, piece):
    proc = subprocess.run([sys.executable, "-c", _SMALL_PIECES, str(large), str(piece), "check", path, "--no-cache",
                           "--format", "json", "-j", "2"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout) if proc.stdout.strip() else None, proc.stderr


def test_a_large_file_in_pieces_has_the_findings_of_the_whole_file(tmp_path):
    text = PIECES_HEAD + "".join(PIECES_BODY.format(i=i) for i in range(60))
    path = write(tmp_path / "big.py", text)
    code, whole, _ = _check_json(path, 10**9, 10**9)
    assert code == 1 and len(whole) > 200
    code, pieces, _ = _check_json(path, 1000, 3000)  # about 30 pieces, spread over 2 workers
    assert code == 1
    assert pieces == whole


def test_a_large_file_with_a_syntax_error_or_a_cut_inside_a_string_is_linted_whole(tmp_path):
    body = "".join(PIECES_BODY.format(i=i) for i in range(30))
    # column-0 `def` lines inside a string: a cut there cannot parse, the file is linted whole
    text = PIECES_HEAD + body + 'DOC = """\n' + "def not_code(x):\n    pass\n" * 400 + '"""\n' + body.replace("_{", "_x{")
    path = write(tmp_path / "big.py", text)
    assert _check_json(path, 1000, 3000)[:2] == _check_json(path, 10**9, 10**9)[:2]
    broken = write(tmp_path / "broken.py", text + "def f(:\n    pass\n" + body)
    code, out, err = _check_json(broken, 1000, 3000)
    line = text.count("\n") + 1
    assert code == 2 and f"{broken}:{line}:7: error: syntax error" in err, err
