"""Install profiles, package metadata, the sdist, and the docs the project cites.

The light install (`pip install amplint`, no torch) is measured for real by
`bench/light_install.py` (a fresh virtualenv from the registry: too slow for the suite); here
torch is made unimportable in a subprocess instead, which is what a venv without it looks like
to amplint.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import textwrap

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = "import torch\nimport torch.nn as nn\n\nclass M(nn.Module):\n    def forward(self, x):\n        return x.masked_fill(x > 0, -1e9).softmax(-1)\n\ndef build():\n    return M(), (torch.randn(2, 4),)\n"
TORCH_HINT = 'pip install "amplint[verify]"'

# Runs `python -m amplint ARGS` (or `-c CODE`) in a process where `import torch` fails
# exactly as it does when torch is not installed.
NO_TORCH = textwrap.dedent('''
    import importlib.abc, runpy, sys

    class NoTorch(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "torch":
                raise ModuleNotFoundError("No module named 'torch'", name="torch")
            return None

    sys.meta_path.insert(0, NoTorch())
    if sys.argv[1] == "-c":
        exec(sys.argv[2])
    else:
        sys.argv = ["amplint", *sys.argv[1:]]
        runpy.run_module("amplint", run_name="__main__", alter_sys=True)
''')


def without_torch(*args, cwd):
    return subprocess.run([sys.executable, "-c", NO_TORCH, *args], cwd=cwd, capture_output=True, text=True)


def pyproject() -> dict:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as fh:
        return tomllib.load(fh)


def requirement_names(requirements) -> set[str]:
    return {re.match(r"[A-Za-z0-9_.-]+", r).group(0).lower() for r in requirements}


# --- install profiles ---------------------------------------------------------------

def test_base_install_is_the_linter_and_torch_comes_with_the_verify_extra():
    project = pyproject()["project"]
    assert "torch" not in requirement_names(project["dependencies"])
    assert {"libcst", "rich"} <= requirement_names(project["dependencies"])
    extras = project["optional-dependencies"]
    for extra in ("verify", "amp", "dev"):  # dev: the quick start and CI keep the pinned CPU torch
        assert any(r.startswith("torch>=2.1") for r in extras[extra]), extra


def test_quick_start_and_ci_install_the_dev_extra_with_constraints():
    readme = open(os.path.join(ROOT, "README.md")).read()
    quick = readme.split("## Quick start", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    assert quick == 'pip install -c constraints.txt -e ".[dev]" && amplint check fixtures/\npython -m pytest\n'
    assert 'pip install -q -c constraints.txt -e ".[dev]"' in open(os.path.join(ROOT, ".ci", "run")).read()


def test_linter_commands_work_without_torch(tmp_path):
    (tmp_path / "model.py").write_text(MODEL)
    check = without_torch("check", "model.py", "--no-cache", "--format", "concise", cwd=tmp_path)
    assert check.returncode == 1 and "AMP101" in check.stdout, check.stderr
    diff = without_torch("fix", "model.py", "--diff", "--unsafe-fixes", "--no-cache", cwd=tmp_path)
    assert diff.returncode == 1 and "+++ model.py" in diff.stdout, diff.stderr
    fix = without_torch("fix", "model.py", "--no-cache", cwd=tmp_path)
    assert fix.returncode == 0 and "finfo" in (tmp_path / "model.py").read_text(), fix.stderr
    assert without_torch("rules", cwd=tmp_path).returncode == 0
    explain = without_torch("explain", "AMP101", cwd=tmp_path)
    assert explain.returncode == 0 and "## Why is this bad?" in explain.stdout
    assert without_torch("verify", "--help", cwd=tmp_path).returncode == 0
    # pytest loads the plugin (entry point pytest11) in every project of a light install
    plugin = without_torch("-c", "import amplint.verify.pytest_plugin, amplint.verify, amplint.amp.policy", cwd=tmp_path)
    assert plugin.returncode == 0, plugin.stderr
    for proc in (check, diff, fix, explain):
        assert "Traceback" not in proc.stderr


def test_verify_without_torch_is_one_line_naming_the_extra(tmp_path):
    (tmp_path / "model.py").write_text(MODEL)
    verify = without_torch("verify", "model.py::build", cwd=tmp_path)
    assert verify.returncode == 2
    assert verify.stderr == f"amplint verify needs torch: {TORCH_HINT}\n"
    fix = without_torch("fix", "model.py", "--verify", "model.py::build", cwd=tmp_path)
    assert fix.returncode == 2
    assert fix.stderr.splitlines()[0] == f"amplint fix --verify needs torch: {TORCH_HINT}"
    assert "Traceback" not in fix.stderr and (tmp_path / "model.py").read_text() == MODEL


def test_amp_engine_without_torch_names_the_extra(tmp_path):
    proc = without_torch("-c", "from amplint import amp\namp.initialize", cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.splitlines()[-1] == f"ModuleNotFoundError: amplint.amp needs torch: {TORCH_HINT}"


def test_pre_commit_hooks_use_the_light_install():
    import yaml  # libcst's dependency, so always there

    with open(os.path.join(ROOT, ".pre-commit-hooks.yaml")) as fh:
        hooks = yaml.safe_load(fh)
    assert {h["id"] for h in hooks} == {"amplint", "amplint-fix"}
    for hook in hooks:
        # pre-commit installs the repository itself (`pip install .`): its base dependencies only
        assert hook["language"] == "python" and not hook.get("additional_dependencies")


# --- metadata and the sdist ---------------------------------------------------------

def test_license_metadata_is_an_spdx_expression_with_the_file():
    project = pyproject()["project"]
    assert project["license"] == "MIT" and project["license-files"] == ["LICENSE"]
    assert open(os.path.join(ROOT, "LICENSE")).read().startswith("MIT License\n")
    assert not any(c.startswith("License ::") for c in project["classifiers"])  # PEP 639: the expression replaces them
    assert pyproject()["build-system"]["requires"] == ["setuptools>=77"]
    # no invented home page: URLs are added when the project has a public one
    assert "urls" not in project


def tracked_files(folder: str) -> list[str]:
    proc = subprocess.run(["git", "ls-files", folder], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:  # an unpacked sdist: no git
        return []
    return [line for line in proc.stdout.splitlines() if os.path.exists(os.path.join(ROOT, line))]


def test_sdist_carries_what_its_tests_need(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".git", "__pycache__", "*.egg-info", ".amplint_cache", ".pytest_cache", ".hypothesis", "build", "dist"))
    out = tmp_path / "dist"
    out.mkdir()
    proc = subprocess.run(
        [sys.executable, "-c", "import sys, setuptools.build_meta as b; print(b.build_sdist(sys.argv[1]))", str(out)],
        cwd=src, capture_output=True, text=True,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    name = proc.stdout.split()[-1]
    with tarfile.open(out / name) as sdist:
        members = {m.split("/", 1)[1] for m in sdist.getnames() if "/" in m}
        metadata = sdist.extractfile(f"{name[:-len('.tar.gz')]}/PKG-INFO").read().decode()
    for needed in ("LICENSE", "README.md", "pyproject.toml", "constraints.txt", "tests/conftest.py",
                   "tests/amp/conftest.py", "tests/verify/conftest.py", "docs/fp16-facts.md",
                   "fixtures/models/gpt2.py", "fixtures/models/gpt2.py.fixed", "rules/amp101_overflow_constant.py"):
        assert needed in members, needed
    for folder in ("tests", "fixtures", "docs", "bench"):
        missing = [path for path in tracked_files(folder) if path not in members]
        assert not missing, missing[:10]
    assert not [m for m in members if "__pycache__" in m or ".amplint_cache" in m]
    assert "License-Expression: MIT" in metadata and "License-File: LICENSE" in metadata
    assert "Requires-Dist: torch" in metadata and 'Requires-Dist: torch>=2.1; extra == "verify"' in metadata
    assert not re.search(r"^Requires-Dist: torch[^;]*$", metadata, re.M)  # never unconditional


def test_readme_names_no_release_tag_that_does_not_exist():
    readme = open(os.path.join(ROOT, "README.md")).read()
    revs = re.findall(r"^\s*rev:\s*(\S+)", readme, re.M)
    assert revs
    tags = subprocess.run(["git", "tag", "--list"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    for rev in revs:
        if re.fullmatch(r"v?\d+(\.\d+)*", rev):
            assert rev in tags, f"README's pre-commit snippet names {rev}, which is not a tag"
    assert "Releases are tagged" in readme


# --- docs the rules cite ------------------------------------------------------------

CITATION = re.compile(r"`((?:docs|bench)/[^`\s]+|[\w.-]+\.md)`")


def test_every_citation_in_explain_and_the_rule_docs_resolves(tmp_path):
    from amplint.registry import all_rules

    cited = {}
    for rule in all_rules():
        explain = subprocess.run([sys.executable, "-m", "amplint", "explain", rule.code],
                                 cwd=tmp_path, capture_output=True, text=True).stdout
        for text in (rule.docs, explain):
            for path in CITATION.findall(text):
                cited.setdefault(path, set()).add(rule.code)
    assert "docs/fp16-facts.md" in cited
    for path, codes in cited.items():
        assert os.path.isfile(os.path.join(ROOT, path)), f"{sorted(codes)} cite {path}, not in the repository"
    numerics = open(os.path.join(ROOT, "amplint", "numerics.py")).read()
    assert "docs/fp16-facts.md" in numerics


def test_fp16_facts_doc_holds_the_numbers_the_rules_quote():
    facts = open(os.path.join(ROOT, "docs", "fp16-facts.md")).read()
    assert "python bench/fp16_facts.py" in facts
    for number in ("65504", "6.10e-5", "5.96e-8", "c10::Half without overflow", "59872", "-30.125",
                   "99840", "1.54x", "5.127", "transformers#17306", "-3.297", "0.000912", "448"):
        assert number in facts, number


# --- the README's rule table ---------------------------------------------------------

def readme_rule_rows() -> list[tuple[str, str, str]]:
    readme = open(os.path.join(ROOT, "README.md")).read()
    table = readme.split("<!-- rules-table:", 1)[1].split("<!-- /rules-table -->", 1)[0]
    rows = []
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| AMP") or (line.startswith("|") and re.fullmatch(r"[A-Z]+\d+", cells[0])):
            rows.append((cells[0], cells[1], cells[2]))
    return rows


def test_readme_rule_table_matches_amplint_rules(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "amplint", "rules", "--format", "json"], cwd=tmp_path,
                          capture_output=True, text=True)
    generated = [(r["code"], r["name"], r["fix"]) for r in json.loads(proc.stdout)]
    expected = "\n".join(f"| {c} | {n} | {f} | ... |" for c, n, f in generated)
    assert readme_rule_rows() == generated, f"README.md's rules table (code | name | fix) should start:\n{expected}"


def test_declared_fix_applicabilities_cover_every_fix_a_rule_offers():
    from amplint.registry import all_rules
    from amplint.rule import Invalid
    from amplint.testing import run_example

    # A rule's INVALID examples plus its regression examples (kept in tests/rules/ for the
    # rules whose files would pass 500 lines with every example embedded).
    spec = importlib.util.spec_from_file_location(
        "regression_examples", os.path.join(ROOT, "tests", "rules", "test_regression_examples.py"))
    regression = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(regression)
    for rule in all_rules():
        offered = set()
        extra = [Invalid(e) if isinstance(e, str) else e
                 for e in regression.EXAMPLES.get(rule, ((), ()))[1]]
        for example in [*rule.invalid_examples(), *extra]:
            findings, _, _ = run_example(rule, example.code, example.settings)
            offered |= {f.fix.applicability.value for f in findings if f.code == rule.code and f.fix is not None}
        offered.discard("display")  # a suggestion shown in the message, never applied
        declared = {a.value for a in rule.fix_applicabilities} - {"display"}
        assert offered == declared, f"{rule.code}: its examples get {sorted(offered)} fixes, it declares {sorted(declared)}"


def test_release_script_sets_the_version_points_the_snippets_at_the_tag_and_tags(tmp_path):
    """`.ci/release.py` (README, "Releases are tagged"): on a copy of the repository's files
    in a fresh git repository, it commits the version and the snippets' `rev:` and makes the
    annotated tag; a second run, or one with uncommitted changes, refuses."""
    for rel in ("pyproject.toml", "amplint/__init__.py", "README.md", "docs/adoption.md"):
        os.makedirs(tmp_path / os.path.dirname(rel), exist_ok=True)
        shutil.copy(os.path.join(ROOT, rel), tmp_path / rel)
    shutil.copytree(os.path.join(ROOT, "docs", "rules"), tmp_path / "docs" / "rules")
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org"}

    def git(*args):
        return subprocess.run(["git", *args], cwd=tmp_path, capture_output=True, text=True, env=env, check=True).stdout

    def release(*args):
        return subprocess.run([sys.executable, os.path.join(ROOT, ".ci", "release.py"), "--root", str(tmp_path), *args],
                              capture_output=True, text=True, env=env)

    git("init", "-q")
    git("add", "-A")
    git("commit", "-q", "-m", "initial")
    dry = release("--version", "0.2.0", "--dry-run")
    assert dry.returncode == 0 and "tag v0.2.0" in dry.stdout and not git("tag", "--list")
    proc = release("--version", "0.2.0")
    assert proc.returncode == 0, proc.stderr
    assert git("tag", "--list").split() == ["v0.2.0"]
    assert git("cat-file", "-t", "v0.2.0").strip() == "tag"  # annotated
    assert git("log", "-1", "--format=%s", "v0.2.0").strip() == "release: v0.2.0"
    assert 'version = "0.2.0"' in (tmp_path / "pyproject.toml").read_text()
    assert '__version__ = "0.2.0"' in (tmp_path / "amplint" / "__init__.py").read_text()
    for rel in ("README.md", "docs/adoption.md"):
        assert re.findall(r"^\s*rev:\s*(\S+)", (tmp_path / rel).read_text(), re.M) == ["v0.2.0"], rel
    again = release("--version", "0.2.0")
    assert again.returncode == 1 and "exists already" in again.stderr
    (tmp_path / "README.md").write_text("edited\n")
    dirty = release("--version", "0.3.0")
    assert dirty.returncode == 1 and "uncommitted changes" in dirty.stderr


def test_amp_verify_fixture_without_torch_gives_the_install_line(tmp_path):
    """A test that uses the fixture in a torch-free install fails with the one line of
    advice, not a bare ModuleNotFoundError (issue 25)."""
    (tmp_path / "test_model.py").write_text("def test_it(amp_verify):\n    amp_verify(object)\n")
    runner = NO_TORCH.replace('runpy.run_module("amplint"', 'runpy.run_module("pytest"')
    proc = subprocess.run([sys.executable, "-c", runner, "-q", "-p", "no:cacheprovider", "test_model.py"],
                          cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"the amp_verify fixture needs torch: {TORCH_HINT}" in proc.stdout
    assert "ModuleNotFoundError" not in proc.stdout


def test_verify_extra_brings_numpy():
    """torch warns "Failed to initialize NumPy" on every run without it."""
    extras = pyproject()["project"]["optional-dependencies"]
    for extra in ("verify", "amp", "dev"):
        assert "numpy" in requirement_names(extras[extra]), extra


def test_docs_install_from_a_checkout_until_a_release_exists():
    """No command in the README or docs/ is `pip install amplint` (there is no release on the
    index: it fails), and the CPU-only install names PyTorch's CPU wheel index (issue 25)."""
    texts = {name: open(os.path.join(ROOT, name), encoding="utf-8").read()
             for name in ("README.md", "docs/adoption.md", "constraints.txt")}
    for name, text in texts.items():
        commands = re.findall(r"^[ \t>*-]*(?:- run: |- )?(pip install [^\n]*)", text, re.M)
        assert not [c for c in commands if re.match(r"pip install \"?amplint(\[|\"|\s|$)", c)], name
    assert "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in texts["README.md"]
    assert "--index-url https://download.pytorch.org/whl/cpu" in texts["constraints.txt"]
    assert "no release on PyPI yet" in texts["README.md"]


def test_every_package_folder_is_listed_for_the_wheel():
    """pyproject lists packages by name: a new folder left out imports from a checkout and
    fails in every installed copy (amplint.semantic did: `No module named 'amplint.semantic'`)."""
    listed = set(pyproject()["tool"]["setuptools"]["packages"])
    found = {"amplint." + os.path.relpath(root, os.path.join(ROOT, "amplint")).replace(os.sep, ".")
             for root, _, names in os.walk(os.path.join(ROOT, "amplint")) if "__init__.py" in names}
    found = {name.replace("amplint..", "amplint") for name in found}
    assert found - listed == set(), f"package folders missing from pyproject's packages: {sorted(found - listed)}"
