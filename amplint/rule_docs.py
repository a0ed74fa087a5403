"""Each rule's documentation, as ``amplint explain`` prints it and as its page.

One page per bundled rule, ``docs/rules/<CODE>.md``, and an index,
``docs/rules/README.md``, are generated from the rule classes (code, name, summary,
severity, fix, ``options`` and ``docs``), so the pages cannot drift from what the rules
say: ``python -m amplint.rule_docs`` writes them and ``python -m amplint.rule_docs
--check`` exits 1 when a page is out of date (tests/test_docs.py runs it).

SARIF's ``helpUri`` and the language server's code link point at these pages
(:func:`help_uri`).
"""
from __future__ import annotations

import argparse
import os
import re
import sys
from typing import Optional, Sequence

#: where the repository is published: SARIF's ``informationUri`` and every rule's ``helpUri``
#: (``{REPOSITORY}/blob/main/docs/rules/<CODE>.md``) hang off it.  The one place to change
#: when the project's public home is settled (pyproject.toml names no URL until then)
REPOSITORY = "https://github.com/amplint/amplint"
#: where the pages live, relative to the repository root
PAGES = "docs/rules"

#: the ``[tool.amplint]`` keys a rule may list in ``options``: the command-line option
#: and what the key changes (the README's Configuration section has the full story)
OPTIONS = {
    "target": ("--target", "the low-precision dtype you will train in: `fp16` (default), `bf16`, `fp8` or `int8`; "
                           "the limits a value is checked against (fp16 65504, bf16 3.4e38, fp8 448) and the numbers "
                           "the messages quote"),
    "opt-level": ("--opt-level", "the apex-style opt level: `O1` (default: autocast-style casting, some ops upcast) "
                                 "or `O2`/`O3` (the model is half, nothing is upcast); `O0` is fp32"),
    "device": ("--device", "where autocast runs: `cuda` (default), `cpu` or `any`; CPU autocast keeps softmax and "
                           "sums in half where CUDA autocast upcasts them"),
    "engine": ("--engine", "whose op policy decides what is upcast or left out: `amplint` (the bundled engine's "
                           "O1 lists, default) or `torch` (`torch.autocast`'s)"),
    "alignment": ("--alignment", "the Tensor Core multiple layer sizes should have: default 8 (16 for fp8/int8); "
                                 "64 pads vocabularies as nanoGPT does (50257 -> 50304)"),
    "fix-style": ("--fix-style", "how softmax fixes are written: `functional` (`dtype=torch.float32`, default) or "
                                 "`module` (an `nn.Softmax` layer in `__init__`)"),
}

# a file of the repository cited in backquotes: `docs/fp16-facts.md`, `bench/bf16_facts.py`
_REPO_PATH = re.compile(r"`((?:docs|bench|rules|amplint|fixtures|tests)/[\w./-]+)`")


def source_file(rule) -> str:
    """The rule's file as the repository holds it (``rules/amp101_overflow_constant.py``)."""
    module = rule.__module__
    if module.startswith("amplint.rules."):
        return f"rules/{module.rsplit('.', 1)[1]}.py"
    return module.replace(".", "/") + ".py"


def is_bundled(rule) -> bool:
    return rule.__module__.startswith("amplint.rules.")


def help_uri(rule) -> Optional[str]:
    """The rule's documentation page: its own ``docs_url`` (a plugin's), the page under
    docs/rules/ for a bundled rule, else None (a local rule has no page)."""
    if rule.docs_url:
        return rule.docs_url
    if is_bundled(rule):
        return f"{REPOSITORY}/blob/main/{PAGES}/{rule.code}.md"
    return None


def fix_label(rule) -> str:
    """``safe``, ``unsafe``, ``safe/unsafe`` (some fixes of each), ``display`` or ``none``."""
    return "/".join(a.value for a in rule.fix_applicabilities) or "none"


def options_markdown(rule) -> str:
    if not rule.options:
        return ""
    lines = ["## Options", "", "Set in `[tool.amplint]` (or on the command line); they change what this rule reports "
             "or how it fixes:", ""]
    for key in rule.options:
        flag, meaning = OPTIONS[key]
        lines.append(f"- `{key}` (`{flag}`): {meaning}")
    return "\n".join(lines) + "\n"


def rule_markdown(rule, page: bool = False) -> str:
    """The rule's documentation: heading, summary, severity / fix / default, its ``docs``
    (What it does, Why is this bad?, Example, Use instead, Fix safety) and its Options.
    ``page``: as docs/rules/<CODE>.md, where the repository files it cites are links."""
    header = (
        f"# {rule.code} {rule.name}\n\n{rule.summary}\n\n"
        f"Severity: {rule.severity.value} · Fix: {fix_label(rule)} · "
        f"{'On' if rule.enabled_by_default else 'Off'} by default\n\n"
    )
    body = rule.docs.strip() + "\n"
    options = options_markdown(rule)
    text = header + body + ("\n" + options if options else "")
    if not page:
        return text
    from_pages = "../" * PAGES.count("/") + "../"  # docs/rules/ -> the repository root
    text = _REPO_PATH.sub(lambda m: f"[`{m.group(1)}`]({from_pages}{m.group(1)})", text)
    return (f"<!-- Generated from {source_file(rule)} by `python -m amplint.rule_docs`: edit the rule, "
            f"not this page. -->\n{text}")


def index_markdown(rules) -> str:
    lines = [
        "<!-- Generated by `python -m amplint.rule_docs` from the rules: edit the rules, not this page. -->",
        "# Rules",
        "",
        "One page per rule: what it flags, why it is bad (with the measured fp16/bf16 numbers, "
        "[../fp16-facts.md](../fp16-facts.md)), an example, what to use instead, whether its fix is safe, "
        "and the options that change it. `amplint explain CODE` prints the same text; `amplint rules` lists them.",
        "",
        "Fix: `safe` fixes are applied by `amplint fix`, `unsafe` ones need `--unsafe-fixes`, `display` is a "
        "suggestion in the message, `none` means no fix. A rule off by default runs when selected by its full "
        "code (`--extend-select AMP604`) or `ALL`.",
        "",
        "| code | name | summary | fix | default |",
        "|---|---|---|---|---|",
    ]
    for rule in rules:
        summary = rule.summary.replace("|", "\\|")
        lines.append(f"| [{rule.code}]({rule.code}.md) | {rule.name} | {summary} | {fix_label(rule)} | "
                     f"{'on' if rule.enabled_by_default else 'off'} |")
    return "\n".join(lines) + "\n"


def expected_pages(rules) -> dict[str, str]:
    """Path relative to the repository root -> the text it must hold."""
    bundled = [r for r in rules if is_bundled(r)]
    pages = {f"{PAGES}/{r.code}.md": rule_markdown(r, page=True) for r in bundled}
    pages[f"{PAGES}/README.md"] = index_markdown(bundled)
    return pages


def stale_pages(root: str, rules) -> list[str]:
    """Pages missing or differing from what the rules say, and pages of no rule."""
    expected = expected_pages(rules)
    stale = []
    for rel, text in expected.items():
        try:
            with open(os.path.join(root, rel), encoding="utf-8", newline="") as fh:
                if fh.read() != text:
                    stale.append(rel)
        except FileNotFoundError:
            stale.append(rel)
    folder = os.path.join(root, PAGES)
    if os.path.isdir(folder):
        stale += sorted(f"{PAGES}/{name}" for name in os.listdir(folder)
                        if name.endswith(".md") and f"{PAGES}/{name}" not in expected)
    return stale


def write_pages(root: str, rules) -> list[str]:
    """Write every page that differs; delete pages of rules that are gone.  Returns the changed paths."""
    expected = expected_pages(rules)
    changed = stale_pages(root, rules)
    os.makedirs(os.path.join(root, PAGES), exist_ok=True)
    for rel in changed:
        path = os.path.join(root, rel)
        if rel in expected:
            with open(path, "w", encoding="utf-8", newline="\n") as fh:
                fh.write(expected[rel])
        else:
            os.remove(path)
    return changed


def main(argv: Optional[Sequence[str]] = None) -> int:
    from .registry import all_rules

    parser = argparse.ArgumentParser(prog="python -m amplint.rule_docs", description=(
        "Write docs/rules/<CODE>.md and docs/rules/README.md from the bundled rules."))
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a page is out of date")
    parser.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        help="the repository root (default: the one this amplint is imported from)")
    args = parser.parse_args(argv)
    rules = all_rules()
    if args.check:
        stale = stale_pages(args.root, rules)
        for rel in stale:
            print(f"{rel}: out of date; run `python -m amplint.rule_docs`", file=sys.stderr)
        return 1 if stale else 0
    for rel in write_pages(args.root, rules):
        print(f"wrote {rel}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
