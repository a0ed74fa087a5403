"""The project's documentation: one generated page per rule (docs/rules/), kept current by a
check that fails when a page differs from its rule; the links of every page resolve; every
citation `amplint explain` prints is a file of the repository or a URL; each rule's Options
are the settings that change it."""
from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys

import pytest

from amplint.registry import all_rules
from amplint.rule_docs import OPTIONS, PAGES, REPOSITORY, expected_pages, help_uri

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RULES = all_rules()
LINK = re.compile(r"\[([^\]]*)\]\(([^)\s]+)\)")


def without_code(markdown: str) -> str:
    """Markdown with fenced blocks and inline code removed (a `[note](1)` there is not a link)."""
    return re.sub(r"`[^`\n]*`", "", re.sub(r"^```.*?^```", "", markdown, flags=re.M | re.S))


def rule_docs(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "amplint.rule_docs", *args], cwd=cwd, capture_output=True, text=True)


def test_rule_pages_are_current():
    """Fails when a rule's docs, summary, fix or options changed and its page was not
    regenerated (`python -m amplint.rule_docs`)."""
    proc = rule_docs("--check")
    assert proc.returncode == 0, proc.stderr


def test_the_check_fails_on_a_stale_missing_or_orphan_page_and_the_writer_repairs_them(tmp_path):
    shutil.copytree(os.path.join(ROOT, PAGES), tmp_path / PAGES)
    page = tmp_path / PAGES / "AMP301.md"
    page.write_text(page.read_text().replace("dtype=torch.float32", "dtype=torch.float16", 1))
    (tmp_path / PAGES / "AMP102.md").unlink()
    (tmp_path / PAGES / "AMP999.md").write_text("# a rule that no longer exists\n")
    proc = rule_docs("--check", "--root", str(tmp_path))
    assert proc.returncode == 1
    assert sorted(proc.stderr.splitlines()) == [
        f"{PAGES}/{name}: out of date; run `python -m amplint.rule_docs`" for name in ("AMP102.md", "AMP301.md", "AMP999.md")]
    assert rule_docs("--root", str(tmp_path)).returncode == 0
    assert rule_docs("--check", "--root", str(tmp_path)).returncode == 0
    assert not (tmp_path / PAGES / "AMP999.md").exists()
    assert page.read_text() == open(os.path.join(ROOT, PAGES, "AMP301.md")).read()


@pytest.mark.parametrize("rule", RULES, ids=[r.code for r in RULES])
def test_each_rule_has_a_page_in_ruffs_shape(rule):
    text = open(os.path.join(ROOT, PAGES, f"{rule.code}.md"), encoding="utf-8").read()
    headings = re.findall(r"^## (.+)$", text, re.M)
    wanted = ["What it does", "Why is this bad?", "Example", "Use instead"]
    wanted += ["Fix safety"] if rule.fix_applicability is not None else []
    wanted += ["Options"] if rule.options else []
    assert headings == wanted
    assert text.splitlines()[1] == f"# {rule.code} {rule.name}"
    for key in rule.options:
        assert f"- `{key}` (`{OPTIONS[key][0]}`)" in text
    index = open(os.path.join(ROOT, PAGES, "README.md"), encoding="utf-8").read()
    assert f"| [{rule.code}]({rule.code}.md) | {rule.name} |" in index
    assert help_uri(rule) == f"{REPOSITORY}/blob/main/{PAGES}/{rule.code}.md"


def test_a_local_rule_has_no_page_link_unless_it_names_one():
    from amplint.rule import Rule

    class Local(Rule):
        code, name, summary, docs = "LOC001", "local", "a local rule", "## What it does\nx\n"

    class Documented(Local):
        code, docs_url = "LOC002", "https://example.org/LOC002"

    assert help_uri(Local) is None and help_uri(Documented) == "https://example.org/LOC002"
    assert f"{PAGES}/LOC001.md" not in expected_pages([*RULES, Local])


def _markdown_files():
    return [os.path.join(ROOT, "README.md"), *glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True)]


def test_every_relative_link_in_the_docs_resolves():
    broken = []
    for path in _markdown_files():
        text = without_code(open(path, encoding="utf-8").read())
        for _, target in LINK.findall(text):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            file = os.path.normpath(os.path.join(os.path.dirname(path), target.split("#")[0]))
            if not os.path.exists(file):
                broken.append(f"{os.path.relpath(path, ROOT)}: {target}")
    assert not broken, broken


def test_docs_index_and_adoption_guide_are_linked():
    index = open(os.path.join(ROOT, "docs", "README.md"), encoding="utf-8").read()
    for page in ("rules/README.md", "adoption.md", "fp16-facts.md", "writing-a-rule.md"):
        assert f"]({page})" in index, page
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    assert "](docs/adoption.md)" in readme and "](docs/rules/README.md)" in readme


@pytest.mark.parametrize("rule", RULES, ids=[r.code for r in RULES])
def test_every_citation_in_explain_is_a_repository_file_or_a_url(rule, amplint, tmp_path):
    """A source is cited as a file of the repository (`docs/fp16-facts.md`) or a link to a
    URL (`[transformers#17306](https://...)`); a bare `project#123` points nowhere."""
    text = amplint("explain", rule.code, cwd=tmp_path).stdout
    assert text.startswith(f"# {rule.code} ")
    for path in re.findall(r"`((?:docs|bench|rules|amplint|fixtures|tests)/[\w./-]+)`", text):
        assert os.path.exists(os.path.join(ROOT, path)), f"{rule.code} cites {path}, not in the repository"
    for label, target in LINK.findall(text):
        assert re.fullmatch(r"https://[\w.-]+/\S+", target), f"{rule.code}: [{label}]({target}) is not a URL"
    unlinked = re.findall(r"[\w.-]*\s?(?:PR |issue )?#\d+", LINK.sub("", text))
    assert not unlinked, f"{rule.code} cites {unlinked} without a link"


# every value each option can take besides its default
_VARIANTS = {"target": ("bf16", "fp8"), "opt-level": ("O0", "O2", "O3"), "device": ("cpu", "any"),
             "engine": ("torch",), "alignment": (64,), "fix-style": ("module",)}


@pytest.mark.parametrize("rule", RULES, ids=[r.code for r in RULES])
def test_options_list_every_setting_that_changes_the_rule(rule):
    """A setting that changes what the rule reports or fixes on its own examples or the
    bundled fixtures is among its documented Options."""
    from amplint.config import Settings
    from amplint.engine import lint_text
    from amplint.files import SourceError
    from amplint.project import ProjectIndex
    from amplint.testing import example_code

    assert set(_VARIANTS) == set(OPTIONS)
    assert set(rule.options) <= set(OPTIONS), f"{rule.code} declares unknown options"
    sources = [example_code(e.code) for e in [*rule.valid_examples(), *rule.invalid_examples()]]
    sources += [open(p, encoding="utf-8").read() for p in sorted(glob.glob(os.path.join(ROOT, "fixtures", "**", "*.py"), recursive=True))]

    def outcome(settings):
        out = []
        for source in sources:
            try:
                findings, _, _ = lint_text("model.py", source, settings, [rule], ProjectIndex())
            except SourceError:
                continue
            out.append([(f.line, f.message, f.severity, f.fix and f.fix.edits) for f in findings])
        return out

    default = outcome(Settings())
    changes = {key for key, values in _VARIANTS.items()
               if any(outcome(Settings(**{key.replace("-", "_"): v})) != default for v in values)}
    assert changes <= set(rule.options), f"{rule.code}: {sorted(changes - set(rule.options))} change it but are not in its options"
