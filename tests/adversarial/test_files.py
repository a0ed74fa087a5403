"""The adversarial report of 2026-12-01 (shared/reports/adversarial-2026-12-01.md), the
file cases: every path that writes a user's file goes through one writer
(amplint.files.write_file) and every file a repository can commit is read by the bounded
reader (read_regular).  Each test names its case (N45...) and runs the real CLI, bounded
in time: a hang fails as a timeout, not as a stuck CI job."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

MODEL = "import torch\ndef f(s, m):\n    return s.masked_fill(m, -1e9)\n"
TIMEOUT = 60


@pytest.fixture
def env(tmp_path):
    """A private cache secret: the tests never read or change the user's."""
    return {"XDG_CACHE_HOME": str(tmp_path / "xdg")}


def _git_init(folder):
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", str(folder)], check=True)


def _repo(tmp_path):
    repo = tmp_path / "repo"
    _git_init(repo)
    (repo / "pyproject.toml").write_text("[tool.amplint]\n")
    (repo / "m.py").write_text(MODEL)
    return repo


# --- the cache folder -------------------------------------------------------------------

def test_n45_committed_cache_link_writes_nothing_into_another_repository(tmp_path, amplint, env):
    victim = tmp_path / "victim"
    _git_init(victim)
    (victim / "notes.txt").write_text("x\n")
    repo = _repo(tmp_path)
    os.symlink("../victim", repo / ".amplint_cache")
    proc = amplint("check", ".", cwd=repo, env=env, timeout=TIMEOUT)
    assert proc.returncode == 1 and "AMP101" in proc.stdout
    assert sorted(os.listdir(victim)) == [".git", "notes.txt"]


def test_n46_dangling_cache_gitignore_link_creates_nothing(tmp_path, amplint, env):
    repo = _repo(tmp_path)
    (repo / ".amplint_cache").mkdir()
    os.symlink("../../target/created.sh", repo / ".amplint_cache" / ".gitignore")
    (tmp_path / "target").mkdir()
    proc = amplint("check", ".", cwd=repo, env=env, timeout=TIMEOUT)
    assert proc.returncode == 1
    assert os.listdir(tmp_path / "target") == []
    # the cache still works: a second run is a hit with the same output
    assert amplint("check", ".", cwd=repo, env=env, timeout=TIMEOUT).stdout == proc.stdout


def test_cache_shard_link_is_not_written_through(tmp_path, amplint, env):
    repo = _repo(tmp_path)
    amplint("check", ".", cwd=repo, env=env, timeout=TIMEOUT)
    shards = [d for d in os.listdir(repo / ".amplint_cache") if len(d) == 2]
    assert shards
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for shard in shards:
        for name in os.listdir(repo / ".amplint_cache" / shard):
            os.unlink(repo / ".amplint_cache" / shard / name)
        os.rmdir(repo / ".amplint_cache" / shard)
        os.symlink(str(elsewhere), repo / ".amplint_cache" / shard)
    amplint("check", ".", cwd=repo, env=env, timeout=TIMEOUT)
    assert os.listdir(elsewhere) == []


# --- files a repository can commit: read bounded -------------------------------------------

@pytest.mark.parametrize("name", [".gitignore", ".ignore", "sub/.gitignore"])
@pytest.mark.parametrize("target", ["/dev/zero", "/dev/urandom", "fifo"])
def test_n49_n50_ignore_file_that_is_a_device_or_fifo(tmp_path, amplint, env, name, target):
    repo = _repo(tmp_path)
    (repo / "sub").mkdir()
    (repo / "sub" / "s.py").write_text(MODEL)
    if target == "fifo":
        os.mkfifo(repo / name)
    else:
        os.symlink(target, repo / name)
    proc = amplint("check", "--no-cache", ".", cwd=repo, env=env, timeout=TIMEOUT)
    assert proc.returncode == 1
    assert "m.py:3:" in proc.stdout and "s.py:3:" in proc.stdout


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero"])
def test_n31_n32_baseline_that_is_a_fifo_or_device(tmp_path, amplint, env, kind):
    repo = _repo(tmp_path)
    if kind == "fifo":
        os.mkfifo(repo / "b.json")
    else:
        os.symlink(kind, repo / "b.json")
    proc = amplint("check", ".", "--baseline", "b.json", cwd=repo, env=env, timeout=TIMEOUT)
    assert proc.returncode == 2
    assert proc.stderr.startswith("amplint: error: --baseline b.json: cannot read: not a regular file")


def test_n28_deeply_nested_baseline_is_one_line(tmp_path, amplint, env):
    repo = _repo(tmp_path)
    (repo / "deep.json").write_text('{"amplint-baseline":1,"findings":' + "[" * 100000 + "]" * 100000 + "}")
    proc = amplint("check", ".", "--baseline", "deep.json", cwd=repo, env=env, timeout=TIMEOUT)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "nested too deeply" in proc.stderr


@pytest.mark.parametrize("version", ["true", "1.0"])
def test_n29_baseline_version_must_be_the_integer(tmp_path, amplint, env, version):
    repo = _repo(tmp_path)
    (repo / "b.json").write_text('{"amplint-baseline": %s, "findings": []}' % version)
    proc = amplint("check", ".", "--baseline", "b.json", cwd=repo, env=env, timeout=TIMEOUT)
    assert proc.returncode == 2 and "not an amplint baseline" in proc.stderr


def test_pyproject_fifo_and_git_config_device_do_not_hang(tmp_path, amplint, env):
    repo = _repo(tmp_path)
    for name in ("config", "info/exclude"):
        (repo / ".git" / name).parent.mkdir(exist_ok=True)
        if (repo / ".git" / name).exists():
            os.unlink(repo / ".git" / name)
        os.symlink("/dev/zero", repo / ".git" / name)
    sub = repo / "pkg"
    sub.mkdir()
    os.mkfifo(sub / "pyproject.toml")
    (sub / "p.py").write_text(MODEL)
    proc = amplint("check", "--no-cache", ".", cwd=repo, env=env, timeout=TIMEOUT)
    assert "m.py:3:" in proc.stdout and "p.py:3:" in proc.stdout  # a FIFO pyproject.toml is no config (N51)


# --- writes: links, read-only files --------------------------------------------------------

def test_n33_write_baseline_through_a_link_out_of_the_tree_is_refused(tmp_path, amplint, env):
    repo = _repo(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bashrc").write_text("export PS1=x\n")
    os.symlink("../home/.bashrc", repo / "amplint-baseline.json")
    proc = amplint("check", ".", "--write-baseline", "amplint-baseline.json", cwd=repo, env=env, timeout=TIMEOUT)
    assert proc.returncode == 2 and "outside this tree" in proc.stderr
    assert (home / ".bashrc").read_text() == "export PS1=x\n"


def test_n33_output_file_through_a_dangling_link_creates_nothing(tmp_path, amplint, env):
    repo = _repo(tmp_path)
    (tmp_path / "home").mkdir()
    os.symlink("../home/new", repo / "report.json")
    proc = amplint("check", "--format", "json", "-o", "report.json", ".", cwd=repo, env=env, timeout=TIMEOUT)
    assert proc.returncode == 2 and "missing file" in proc.stderr
    assert os.listdir(tmp_path / "home") == []


def test_output_file_inside_the_tree_and_to_a_stream(tmp_path, amplint, env):
    repo = _repo(tmp_path)
    (repo / "reports").mkdir()
    os.symlink("reports/r.json", repo / "report.json")  # a link inside the tree is followed
    (repo / "reports" / "r.json").write_text("old")
    proc = amplint("check", "--format", "json", "-o", "report.json", ".", cwd=repo, env=env, timeout=TIMEOUT)
    assert proc.returncode == 1 and os.path.islink(repo / "report.json")
    assert '"AMP101"' in (repo / "reports" / "r.json").read_text()
    proc = amplint("check", "--format", "json", "-o", "/dev/stdout", ".", cwd=repo, env=env, timeout=TIMEOUT)
    assert proc.returncode == 1 and '"AMP101"' in proc.stdout


def test_read_only_files_are_never_written(tmp_path, amplint, env):
    repo = _repo(tmp_path)
    (repo / "b.json").write_text("{}")
    os.chmod(repo / "b.json", 0o444)
    os.chmod(repo / "m.py", 0o444)
    proc = amplint("check", ".", "--write-baseline", "b.json", cwd=repo, env=env, timeout=TIMEOUT)
    assert proc.returncode == 2 and "read-only" in proc.stderr and (repo / "b.json").read_text() == "{}"
    proc = amplint("fix", "--unsafe-fixes", "m.py", cwd=repo, env=env, timeout=TIMEOUT)
    assert proc.returncode == 2 and "read-only" in proc.stdout + proc.stderr
    assert (repo / "m.py").read_text() == MODEL
    assert "Fixed 1" not in proc.stdout + proc.stderr  # N53: nothing written, nothing counted
    proc = amplint("check", "--add-noqa", "m.py", cwd=repo, env=env, timeout=TIMEOUT)
    assert proc.returncode == 2 and (repo / "m.py").read_text() == MODEL


def test_b5_fix_through_a_link_out_of_the_tree_is_refused(tmp_path, amplint, env):
    repo = _repo(tmp_path)
    outside = tmp_path / "outside.py"
    outside.write_text(MODEL)
    os.symlink(str(outside), repo / "link.py")
    proc = amplint("fix", "--unsafe-fixes", "link.py", cwd=repo, env=env, timeout=TIMEOUT)
    assert proc.returncode == 2 and "outside this tree" in proc.stdout + proc.stderr
    assert outside.read_text() == MODEL


# --- encodings that cannot keep bytes: every writer refuses ----------------------------------

ESCAPED = b'# -*- coding: unicode_escape -*-\nimport torch\ns = "\\x41"\ndef f(s, m):\n    return torch.softmax(s.masked_fill(m, -1e9), -1)\n'
UTF7 = ESCAPED.replace(b"unicode_escape", b"utf-7")


@pytest.mark.parametrize("raw", [ESCAPED, UTF7], ids=["unicode_escape", "utf-7"])
def test_n23_fix_stdin_echoes_a_file_it_cannot_keep(tmp_path, env, raw):
    script = os.path.join(os.path.dirname(sys.executable), "amplint")
    proc = subprocess.run([script, "fix", "--unsafe-fixes", "--stdin-filename", "x.py"], input=raw, cwd=tmp_path,
                          capture_output=True, env={**os.environ, **env}, timeout=TIMEOUT)
    assert proc.stdout == raw
    assert proc.returncode == 2 and b"does not keep the bytes" in proc.stderr


@pytest.mark.parametrize("raw", [ESCAPED, UTF7], ids=["unicode_escape", "utf-7"])
def test_n37_add_noqa_refuses_a_file_it_cannot_keep(tmp_path, amplint, env, raw):
    (tmp_path / "e.py").write_bytes(raw)
    proc = amplint("check", "--add-noqa", "e.py", cwd=tmp_path, env=env, timeout=TIMEOUT)
    assert proc.returncode == 2 and "does not keep the bytes" in proc.stderr
    assert (tmp_path / "e.py").read_bytes() == raw


# --- --add-noqa and concurrent edits ---------------------------------------------------------

_HOOKED = textwrap.dedent("""\
    import sys
    import amplint.noqa as noqa
    from amplint.cli import main

    path, when = sys.argv[1], sys.argv[2]
    if when == "before-read":   # the file changes between the check and --add-noqa's read
        real = noqa.read_source
        def read_source(p, *a):
            with open(path, "r+") as fh:
                text = fh.read(); fh.seek(0); fh.write("# one\\n# two\\n" + text)
            return real(p, *a)
        noqa.read_source = read_source
    else:                       # the file changes while --add-noqa works on it (N38)
        real = noqa.apply_fixes
        def apply_fixes(*a):
            out = real(*a)
            with open(path, "a") as fh:
                fh.write("# USER EDIT\\n")
            return out
        noqa.apply_fixes = apply_fixes
    sys.exit(main(["check", "--no-cache", "--add-noqa", path]))
""")


@pytest.mark.parametrize("when", ["before-read", "while-writing"])
def test_n38_n39_add_noqa_keeps_a_concurrent_edit(tmp_path, env, when):
    (tmp_path / "m.py").write_text(MODEL)
    proc = subprocess.run([sys.executable, "-c", _HOOKED, "m.py", when], cwd=tmp_path, capture_output=True,
                          text=True, env={**os.environ, **env}, timeout=TIMEOUT)
    assert "Traceback" not in proc.stderr, proc.stderr
    text = (tmp_path / "m.py").read_text()
    assert proc.returncode == 2 and "left unchanged" in proc.stderr
    assert "noqa" not in text
    assert ("# one\n# two\n" in text) if when == "before-read" else text.endswith("# USER EDIT\n")


# --- comments are tokens ---------------------------------------------------------------------

def test_n35_a_directive_inside_a_string_silences_nothing(tmp_path, amplint, env):
    (tmp_path / "q.py").write_text(
        'import torch\ndef f(s, m):\n'
        '    y = s.masked_fill(m, -1e9); x = "# noqa: AMP101"\n'
        '    z = s.masked_fill(m, -1e9); w = "# amplint: ignore"\n'
        '    u = s.masked_fill(m, -1e9); h = "# noqa"\n'
        '    v = s.masked_fill(m, -1e9); k = "# noqa"  # noqa: AMP101\n'
        '    return y\n')
    proc = amplint("check", "--no-cache", "q.py", cwd=tmp_path, env=env, timeout=TIMEOUT)
    assert proc.returncode == 1
    assert [line.split(":")[1] for line in proc.stdout.splitlines() if "AMP101 " in line and line.startswith("q.py")] == ["3", "4", "5"]


def test_n34_add_noqa_never_edits_a_string(tmp_path, amplint, env):
    src = ('import torch\ndef f(s, m):\n'
           '    x = "# noqa: E501"; y = s.masked_fill(m, -1e9)  # noqa: E402\n'
           '    return x, y\n')
    (tmp_path / "n.py").write_text(src)
    proc = amplint("check", "--no-cache", "--add-noqa", "n.py", cwd=tmp_path, env=env, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "n.py").read_text() == src.replace("# noqa: E402", "# noqa: E402, AMP101")
    assert amplint("check", "--no-cache", "n.py", cwd=tmp_path, env=env).returncode == 0
