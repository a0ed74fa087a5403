"""Discovery against git itself, and the runs that checked nothing (issue 25).

Each ``.py`` file of a scratch repository with tricky ignore patterns is linted by
``amplint check .`` exactly when git lists it as untracked and not ignored: ground truth
is ``git check-ignore`` on the file and on each folder above it (git never enters an
ignored folder), cross-checked with ``git ls-files --others --exclude-standard``."""
import os
import shutil
import subprocess

import pytest

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

#: (ignore file, its lines); the files every case is tried on are FILES
IGNORES = {
    ".gitignore": [
        "**/foo.py", "**/foodir/", "a/**/b.py", r"\#file.py", "trail.py   ", r"s\ p.py", r"\!important.py",
        "out2/", "!out2/keep.py",          # a folder's file cannot be re-included
        "logs/*", "!logs/keep.py",         # but a pattern on its contents can be
        "*.gen.py", "[a-c].py", "/doc/frotz.py",
        "starstar/**", "!starstar/top.py",  # the folder itself is entered
        "deep/**/", "!deep/keep.py",
        "*.tmp.py", "!*.tmp.py", "tmpd/*.tmp.py",
        "one/two/", "anch/", "/rootonly.py",
    ],
    "gen/.gitignore": ["!keep.gen.py"],
    "nest/.gitignore": ["/anchored.py", "sub/*.py", "!sub/kept.py"],
    ".git/info/exclude": ["excl_info.py"],
    "personal-ignore": ["excl_global.py"],
}
FILES = [
    "ok.py", "foo.py", "x/foo.py", "foodir/m.py", "q/foodir/m.py", "a/b.py", "a/x/y/b.py", "a/c.py",
    "#file.py", "trail.py", "s p.py", "!important.py", "out2/keep.py", "out2/other.py", "logs/keep.py",
    "logs/other.py", "logs/sub/keep.py", "x.gen.py", "gen/keep.gen.py", "gen/sub/keep.gen.py", "a.py", "d.py",
    "doc/frotz.py", "x/doc/frotz.py", "starstar/top.py", "starstar/any/t.py", "starstar/other.py",
    "deep/keep.py", "deep/in/m.py", "k.tmp.py", "tmpd/k.tmp.py", "one/two/m.py", "x/one/two/m.py",
    "x/anch/m.py", "rootonly.py", "x/rootonly.py", "nest/anchored.py", "nest/in/anchored.py",
    "nest/sub/a.py", "nest/sub/kept.py", "excl_info.py", "excl_global.py",
]


def _git(repo, *args, env):
    return subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True)


@pytest.fixture()
def tricky_repo(tmp_path):
    repo = tmp_path / "r"
    env = {**os.environ, "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
           "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": str(tmp_path / "gitconfig")}
    repo.mkdir()
    assert _git(repo, "init", "-q", env=env).returncode == 0
    _git(repo, "config", "core.excludesFile", str(repo / "personal-ignore"), env=env)
    for name in FILES:
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text("x = 1\n")
    for name, lines in IGNORES.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text("\n".join(lines) + "\n")
    return repo, env


def _git_truth(repo, env) -> list[str]:
    def ignored(path):
        return _git(repo, "check-ignore", "-q", "--no-index", path, env=env).returncode == 0

    truth = []
    for name in FILES:
        parts = name.split("/")
        folders = ["/".join(parts[:i]) for i in range(1, len(parts))]
        if not any(ignored(p) for p in folders + [name]):
            truth.append(name)
    listed = _git(repo, "ls-files", "--others", "--exclude-standard", env=env).stdout.splitlines()
    assert sorted(truth) == sorted(p.strip('"') for p in listed if p.strip('"').endswith(".py")), "check-ignore vs ls-files"
    return sorted(truth)


def test_discovery_agrees_with_git_on_tricky_patterns(tricky_repo, amplint):
    repo, env = tricky_repo
    truth = _git_truth(repo, env)
    assert "starstar/top.py" in truth and "starstar/any/t.py" not in truth  # the case amplint got wrong
    proc = amplint("check", "--show-files", ".", cwd=repo, env={k: env[k] for k in ("HOME", "XDG_CONFIG_HOME", "GIT_CONFIG_NOSYSTEM")})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == truth


def test_dir_star_star_then_reinclude_is_linted(tmp_path, amplint):
    """The reported repro: ``s/**`` then ``!s/top.py``: git lists s/top.py, so it is linted."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "s" / "any").mkdir(parents=True)
    (tmp_path / "s" / "top.py").write_text("def (:\n")
    (tmp_path / "s" / "any" / "t.py").write_text("def (:\n")
    (tmp_path / ".gitignore").write_text("s/**\n!s/top.py\n")
    proc = amplint("check", "--no-cache", ".", cwd=tmp_path)
    assert proc.returncode == 2 and "s/top.py:1:" in proc.stderr and "s/any/t.py" not in proc.stderr


def test_empty_folder_warns_that_nothing_was_linted(tmp_path, amplint):
    for command in ("check", "fix"):
        proc = amplint(command, "--no-cache", cwd=tmp_path)
        assert proc.returncode == 0
        assert "warning: No Python files found under the given path(s)" in proc.stderr
        assert "All checks passed" not in proc.stdout + proc.stderr


def test_folder_named_inside_an_ignored_parent_is_linted(tmp_path, amplint):
    (tmp_path / ".git").mkdir()
    (tmp_path / ".gitignore").write_text(".cache/\n")
    models = tmp_path / ".cache" / "models"
    models.mkdir(parents=True)
    (models / "m.py").write_text("import apex.amp\n")
    proc = amplint("check", "--no-cache", "--format", "concise", ".cache/models/", cwd=tmp_path)
    assert proc.returncode == 1 and ".cache/models/m.py:1:1: AMP501" in proc.stdout
    walked = amplint("check", "--no-cache", ".", cwd=tmp_path)  # walking from above: ignored, and said so
    assert walked.returncode == 0 and "No Python files found" in walked.stderr
    forced = amplint("check", "--no-cache", "--force-exclude", ".cache/models/m.py", cwd=tmp_path)
    assert forced.returncode == 0 and "No Python files found" in forced.stderr


def test_env_folders_can_be_linted_exclude_replaces_defaults(tmp_path, amplint):
    for folder in ("env", ".env", "vendor"):
        (tmp_path / "pkg" / folder).mkdir(parents=True)
        (tmp_path / "pkg" / folder / "model.py").write_text("import apex.amp\n")

    def linted(*args):
        proc = amplint("check", "--no-cache", "--show-files", *args, cwd=tmp_path)
        return proc.stdout.splitlines()

    assert linted() == ["pkg/vendor/model.py"]  # the defaults skip env/ and .env/
    assert linted("pkg/env") == ["pkg/env/model.py"]  # named: linted
    (tmp_path / "pyproject.toml").write_text("[tool.amplint]\nexclude = ['vendor']\n")
    assert linted() == ["pkg/.env/model.py", "pkg/env/model.py"]  # exclude replaces the defaults
    (tmp_path / "pyproject.toml").write_text("[tool.amplint]\nextend-exclude = ['vendor']\n")
    assert linted() == []  # extend-exclude adds to them
    assert linted("--extend-exclude", "nothing") == []
    assert linted("--exclude", "vendor") == ["pkg/.env/model.py", "pkg/env/model.py"]
    proc = amplint("check", "--no-cache", cwd=tmp_path)
    assert proc.returncode == 0 and "No Python files found" in proc.stderr
