"""What `check` and `fix` agree to run, through the real command line: local rules and
plugins only when allowed, never from a config above the repository or a folder outside
the config's; `python -m amplint` never imports modules from the current folder."""
from __future__ import annotations

import os

import pytest

APEX = "from apex import amp  # old\nimport torch\n"
LOCAL_RULE = '''
import ast
from amplint.rule import Rule


class NoHalfCall(Rule):
    code = "LOC001"
    name = "no-half-call"
    summary = "calls .half() (a local rule)"
    docs = "## What it does\\nFlags `.half()`.\\n## Why is this bad?\\nLocal policy.\\n## Example\\n`m.half()`\\n"

    def visit_Call(self, node, ctx):
        if isinstance(node.func, ast.Attribute) and node.func.attr == "half" and not node.args:
            ctx.report(self, node, "`.half()` call")
'''

EVIL = "import os\nopen(os.path.join({marker!r}), 'w').write('ran')\n"


def run(amplint, *args, cwd, env=None):
    """The CLI with local rules not allowed by the caller's environment (conftest's runner)."""
    return amplint(*args, cwd=cwd, env={"NO_COLOR": None, "AMPLINT_ALLOW_LOCAL_RULES": None, **(env or {})})


def _evil_rules(folder, marker):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "evil.py").write_text(EVIL.format(marker=str(marker)) + LOCAL_RULE)


@pytest.fixture
def repo(tmp_path):
    """A repository whose config names a folder of local rules that leave a marker."""
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    (root / "src").mkdir()
    (root / "src" / "model.py").write_text("import torch\nm = torch.nn.Linear(8, 8)\nm.half()\n")
    (root / "pyproject.toml").write_text('[tool.amplint]\nrule-paths = ["tools/amplint_rules"]\n')
    _evil_rules(root / "tools" / "amplint_rules", tmp_path / "MARKER")
    return root


@pytest.mark.parametrize("command", [["check", "--no-cache"], ["fix", "--unsafe-fixes"]])
def test_rule_paths_never_run_unless_allowed(repo, command, amplint):
    """The pre-commit hook's `amplint check --no-cache src/model.py` on an untrusted clone."""
    proc = run(amplint, *command, "src/model.py", cwd=repo)
    assert not (repo.parent / "MARKER").exists(), "a rule-paths folder ran without permission"
    assert proc.returncode == 0 and "LOC001" not in proc.stdout and "Traceback" not in proc.stderr
    warning = [line for line in proc.stderr.splitlines() if "not loaded" in line]
    assert len(warning) == 1 and "rule-paths in pyproject.toml" in warning[0]
    assert "--allow-local-rules" in warning[0] and "AMPLINT_ALLOW_LOCAL_RULES=1" in warning[0]
    assert (repo / "src" / "model.py").read_text().endswith("m.half()\n")


def test_rule_paths_run_when_allowed_by_flag_or_environment(repo, amplint):
    proc = run(amplint, "check", "--no-cache", "src/model.py", "--allow-local-rules", cwd=repo)
    assert proc.returncode == 1 and "LOC001" in proc.stdout and "not loaded" not in proc.stderr
    assert (repo.parent / "MARKER").read_text() == "ran"
    (repo.parent / "MARKER").unlink()
    proc = run(amplint, "check", "--no-cache", "src/model.py", cwd=repo, env={"AMPLINT_ALLOW_LOCAL_RULES": "1"})
    assert proc.returncode == 1 and "LOC001" in proc.stdout and (repo.parent / "MARKER").exists()


def test_rule_paths_resolve_against_the_config_file(repo, amplint):
    """Run from a subfolder: `tools/amplint_rules` is the config's, not the current folder's."""
    proc = run(amplint, "check", "--no-cache", "model.py", "--allow-local-rules", cwd=repo / "src")
    assert proc.returncode == 1 and "LOC001" in proc.stdout, proc.stderr


@pytest.mark.parametrize("entry", ["../elsewhere", "linked", "/abs/elsewhere"])
def test_rule_paths_outside_the_config_folder_are_refused(tmp_path, repo, entry, amplint):
    _evil_rules(tmp_path / "elsewhere", tmp_path / "MARKER")
    (repo / "linked").symlink_to(tmp_path / "elsewhere")
    entry = str(tmp_path / "elsewhere") if entry.startswith("/") else entry
    (repo / "pyproject.toml").write_text(f'[tool.amplint]\nselect = ["AMP"]\nrule-paths = ["{entry}"]\n')
    proc = run(amplint, "check", "--no-cache", "src/model.py", "--allow-local-rules", cwd=repo)
    assert not (tmp_path / "MARKER").exists()
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "Traceback" not in out
    assert "pyproject.toml:3:1: error: [tool.amplint] rule-paths:" in out and "outside this config's folder" in out


def test_config_above_the_repository_never_loads_rules(tmp_path, amplint):
    outer = tmp_path / "outer"
    (outer / "repo" / ".git").mkdir(parents=True)
    (outer / "pyproject.toml").write_text('[tool.amplint]\nrule-paths = ["r"]\n')
    _evil_rules(outer / "r", tmp_path / "MARKER")
    (outer / "repo" / "m.py").write_text(APEX)
    proc = run(amplint, "check", "--no-cache", "m.py", "--allow-local-rules", cwd=outer / "repo")
    assert not (tmp_path / "MARKER").exists()
    assert proc.returncode == 1 and "AMP501" in proc.stdout  # linted with the bundled rules
    assert "outside the repository" in proc.stderr and "not loaded" in proc.stderr
    # without a git repository, the folder the run starts in is the limit
    (outer / "repo" / ".git").rmdir()
    proc = run(amplint, "check", "--no-cache", "m.py", "--allow-local-rules", cwd=outer / "repo")
    assert not (tmp_path / "MARKER").exists() and proc.returncode == 1
    # named explicitly with --config, the user chose it
    proc = run(amplint, "check", "--no-cache", "m.py", "--allow-local-rules", "--config", "../pyproject.toml", cwd=outer / "repo")
    assert (tmp_path / "MARKER").exists() and proc.returncode == 1


def test_vendored_package_with_rule_paths_does_not_abort_the_run(tmp_path, amplint):
    (tmp_path / "main.py").write_text(APEX)
    vendored = tmp_path / "third_party" / "pkg"
    vendored.mkdir(parents=True)
    (vendored / "pyproject.toml").write_text('[tool.amplint]\nrule-paths = ["r"]\n')
    (vendored / "lib.py").write_text(APEX)
    _evil_rules(vendored / "r", tmp_path / "MARKER")
    proc = run(amplint, "check", ".", "--no-cache", "--format", "concise", cwd=tmp_path)
    assert not (tmp_path / "MARKER").exists()
    assert proc.returncode == 1 and "main.py:1:1: AMP501" in proc.stdout and "lib.py:1:1: AMP501" in proc.stdout
    assert "third_party/pkg/pyproject.toml" in proc.stderr and "not loaded" in proc.stderr
    # allowed, and the rule folder missing: one error against that config; main.py still linted
    (vendored / "r" / "evil.py").unlink()
    (vendored / "r").rmdir()
    proc = run(amplint, "check", ".", "--no-cache", "--format", "concise", "--allow-local-rules", cwd=tmp_path)
    assert proc.returncode == 2 and "main.py:1:1: AMP501" in proc.stdout and "Traceback" not in proc.stderr
    assert "third_party/pkg/pyproject.toml:2:1: error: [tool.amplint] rule-paths: 'r': no such folder" in proc.stdout + proc.stderr


SHADOWED = ("tomllib", "tempfile", "hashlib", "libcst")


@pytest.mark.parametrize("command", [["check"], ["fix", "--unsafe-fixes"]])
@pytest.mark.parametrize("name", SHADOWED)
def test_python_m_does_not_import_modules_from_the_current_folder(tmp_path, command, name, amplint):
    """`python -m` puts the current folder first on sys.path: a repository's tomllib.py,
    tempfile.py, hashlib.py or libcst.py must not run (libcst is imported by `fix`)."""
    (tmp_path / f"{name}.py").write_text(f"open({str(tmp_path / 'MARKER')!r}, 'w').write('ran')\n")
    (tmp_path / "pyproject.toml").write_text("[tool.amplint]\ntarget = 'fp16'\n")
    (tmp_path / "model.py").write_text(APEX)
    proc = run(amplint, *command, "model.py", cwd=tmp_path)
    assert not (tmp_path / "MARKER").exists(), f"{name}.py was imported from the current folder"
    assert "Traceback" not in proc.stderr
    if command[0] == "fix":
        assert proc.returncode == 0 and (tmp_path / "model.py").read_text().startswith("from amplint import amp")
    else:
        assert proc.returncode == 1 and "AMP501" in proc.stdout


# --- the result cache ---------------------------------------------------------------------

@pytest.fixture
def cached(tmp_path):
    """A project whose config ignores AMP5 under tests/; the cache secret in tmp_path."""
    project = tmp_path / "p"
    for folder in ("tests", "src"):
        (project / folder).mkdir(parents=True)
        (project / folder / "a.py").write_text(APEX)
    (project / "pyproject.toml").write_text('[tool.amplint]\nper-file-ignores = { "tests/*" = ["AMP5"] }\n')
    env = {"XDG_CACHE_HOME": str(tmp_path / "home-cache")}
    return project, env


def _entries(project):
    cache = project / ".amplint_cache"
    return sorted(p for p in cache.rglob("*.json"))


def _sign(entry_file, entry, secret):
    import hashlib
    import hmac
    import json

    key = entry_file.parent.name + entry_file.stem
    blob = json.dumps(entry).encode()
    mac = hmac.new(secret, key.encode() + b"\0" + blob, hashlib.sha256).hexdigest()
    entry_file.write_bytes(b'{"amplint-cache":2,"mac":"' + mac.encode() + b'","entry":' + blob + b"}")


def _stored(entry_file):
    """(MAC, entry) of an entry file."""
    import json

    stored = json.loads(entry_file.read_bytes())
    return stored["mac"], stored["entry"]


def test_cache_key_covers_the_path_relative_to_the_config(cached, amplint):
    """The same bytes, typed as `a.py` from tests/ (ignored) and from src/ (not ignored)."""
    project, env = cached
    assert run(amplint, "check", "a.py", cwd=project / "tests", env=env).returncode == 0
    proc = run(amplint, "check", "a.py", cwd=project / "src", env=env)
    assert proc.returncode == 1 and "AMP501" in proc.stdout
    assert run(amplint, "check", "a.py", cwd=project / "tests", env=env).returncode == 0  # both cached now
    assert run(amplint, "check", "a.py", cwd=project / "src", env=env).returncode == 1


def test_every_entry_the_engine_writes_is_valid_when_read_back(cached, amplint):
    """A warm run must hit: an entry whose cross-file questions include a named fact
    (a module constant of another file) was once rejected as malformed on every read."""
    from amplint.cache import valid_entry

    project, env = cached
    (project / "src" / "consts.py").write_text("NEG_INF = -1e9\n")
    (project / "src" / "model.py").write_text(
        "import torch\nfrom consts import NEG_INF\n\n\nclass M(torch.nn.Module):\n"
        "    def forward(self, s, m):\n        return s.masked_fill(m, NEG_INF).softmax(-1)\n")
    assert run(amplint, "check", ".", cwd=project / "src", env=env).returncode == 1
    entries = [_stored(f)[1] for f in _entries(project)]
    assert any(q[0] == "named" for e in entries for q in e["queries"]), "the model's entry asks a named fact"
    assert all(valid_entry(e, e["path"]) for e in entries)


def test_a_crafted_cache_entry_cannot_hide_findings(cached, tmp_path, amplint):
    import json

    project, env = cached
    assert run(amplint, "check", "src/a.py", "--format", "json", cwd=project, env=env).returncode == 1
    (entry_file,) = _entries(project)
    mac, entry = _stored(entry_file)
    clean = {**entry, "findings": [], "frames": {}}
    attempts = [
        json.dumps({"amplint-cache": 2, "mac": mac, "entry": clean}, separators=(",", ":")).encode(),  # edited, old MAC
        json.dumps(clean).encode(),  # an unsigned entry (the format before signing)
        None,  # signed with the attacker's own secret
    ]
    for attempt in attempts:
        if attempt is None:
            _sign(entry_file, clean, b"x" * 32)
        else:
            entry_file.write_bytes(attempt)
        proc = run(amplint, "check", "src/a.py", "--format", "json", cwd=project, env=env)
        assert proc.returncode == 1 and [f["code"] for f in json.loads(proc.stdout)] == ["AMP501"], attempt
    # the control: signed with this user's secret, the same entry is trusted
    secret = (tmp_path / "home-cache" / "amplint" / "cache-secret").read_bytes()
    assert oct(os.stat(tmp_path / "home-cache" / "amplint" / "cache-secret").st_mode & 0o777) == "0o600"
    (entry_file,) = _entries(project)
    _sign(entry_file, clean, secret)
    assert run(amplint, "check", "src/a.py", cwd=project, env=env).returncode == 0


@pytest.mark.parametrize("signed", [True, False], ids=["signed", "unsigned"])
@pytest.mark.parametrize("damage", ["list", "finding-without-fix", "bad-frames", "bad-summary", "bad-query", "not-json"])
def test_a_malformed_cache_entry_is_a_miss(cached, tmp_path, damage, signed, amplint):
    """Entries that are valid JSON, unsigned or even correctly signed, but not what the
    engine writes: a miss, never a traceback or a lost finding."""
    import json

    project, env = cached
    assert run(amplint, "check", "src/a.py", cwd=project, env=env).returncode == 1
    (entry_file,) = _entries(project)
    entry = json.loads(entry_file.read_text())
    entry = entry.get("entry", entry)  # (the format before signing: the entry itself)
    if damage == "list":
        entry = [1, 2]
    elif damage == "finding-without-fix":
        del entry["findings"][0]["fix"]
    elif damage == "bad-frames":
        entry["frames"] = {"abc": 5}
    elif damage == "bad-summary":
        entry["summary"] = {"path": "src/a.py", "facts": {}}
    elif damage == "bad-query":
        entry["queries"] = [["config"]]
    if signed:
        _sign(entry_file, entry, (tmp_path / "home-cache" / "amplint" / "cache-secret").read_bytes())
    else:
        entry_file.write_text(json.dumps(entry))
    if damage == "not-json":
        entry_file.write_bytes(b"\xff{")
    proc = run(amplint, "check", "src/a.py", "--format", "concise", cwd=project, env=env)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 1 and "src/a.py:1:1: AMP501" in proc.stdout


def test_no_usable_secret_means_no_cache(cached, tmp_path, amplint):
    project, env = cached
    blocker = tmp_path / "blocked"
    blocker.write_text("a file where the secret's folder should be")
    proc = run(amplint, "check", "src/a.py", cwd=project, env={"XDG_CACHE_HOME": str(blocker)})
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert _entries(project) == []
