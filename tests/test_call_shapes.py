"""No internal error on valid Python, whatever shape a call has (issue 24 #6).

Every call in the fixture corpus (``masked_fill``, ``softmax``, ``norm``, ``einsum``...) is
rewritten into other shapes a real file may use for the same name -- a bare helper
(``masked_fill(x, m, v)``, as torch's ONNX symbolics call theirs), a method on a name, on an
attribute, on a subscript or on a call result, a torch / ``F`` function, a call through a
lambda or a subscripted callable -- inside a module's ``forward``, and every rule runs on
it.  A rule may report or not; it must not raise.  Then one file of them goes through the
real command line: exit 0 or 1, no "internal error"."""
from __future__ import annotations

import ast
import os
import random
import re

from amplint.config import Settings
from amplint.engine import lint_text
from amplint.registry import all_rules

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "fixtures")

HEADER = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nfrom torch import einsum\n\n"
RECEIVERS = ("x", "self.w", "xs[0]", "x.float()", "self.layers[i].out", "(x + 1)", "torch")
ARGS = ("x", "m", "-1", "float('-inf')", "-1e9", "1e-8", "dim=-1", "keepdim=True", "dtype=torch.float32",
        "mask=m", "value=-1e4", "*rest", "**kw", "lambda t: t", "x[..., None]", "x @ y")


def _called_names() -> list[str]:
    names = set()
    for folder, _, files in os.walk(FIXTURES):
        for name in files:
            if not name.endswith(".py"):
                continue
            try:
                with open(os.path.join(folder, name), encoding="utf-8") as fh:
                    tree = ast.parse(fh.read())
            except (SyntaxError, UnicodeDecodeError):
                continue
            for node in ast.walk(tree):
                if isinstance(node, ast.Call):
                    func = node.func
                    if isinstance(func, ast.Attribute):
                        names.add(func.attr)
                    elif isinstance(func, ast.Name):
                        names.add(func.id)
    return sorted(n for n in names if n.isidentifier())


def _shapes(name: str, rng: random.Random) -> list[str]:
    def args() -> str:
        picked = rng.sample(ARGS, rng.randint(0, 4))
        keywords = [a for a in picked if re.match(r"\w+=", a)]
        stars = [a for a in picked if a.startswith("**")]
        positional = [a for a in picked if a not in keywords and a not in stars]
        return ", ".join(positional + keywords + stars)

    receiver = rng.choice(RECEIVERS)
    return [
        f"{name}({args()})",  # a bare helper of that name
        f"{receiver}.{name}({args()})",
        f"F.{name}({args()})",
        f"torch.{name}({args()})",
        f"(lambda *a, **k: {name})({args()})({args()})",
        f"ops[{name!r}]({args()})",
        f"getattr(x, {name!r})({args()})",
        f"{name}({args()}).{name}({args()})",
    ]


def _module(lines: list[str]) -> str:
    body = "".join(f"        y = {line}\n" for line in lines)
    return (HEADER + "class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            "        self.w = nn.Parameter(torch.ones(3))\n\n"
            "    def forward(self, x, m, xs, ops, rest, kw, i, y=None):\n" + body + "        return y\n"
            + "".join(f"\ny{n} = {line}\n" for n, line in enumerate(lines[:3])))


def test_every_rule_takes_every_call_shape():
    rng = random.Random(24)
    rules = all_rules(())
    names = _called_names()
    assert len(names) > 100, names  # the corpus calls many things: the test sees them
    settings_variants = [Settings(), Settings(opt_level="O2", engine="torch", device="cpu"), Settings(target="bf16")]
    failures = []
    for start in range(0, len(names), 12):
        lines = [shape for name in names[start:start + 12] for shape in _shapes(name, rng)]
        text = _module(lines)
        ast.parse(text)
        for settings in settings_variants:
            _, _, errors = lint_text("shapes.py", text, settings, rules)
            failures += [f"{e.message}\n{text}" for e in errors]
    assert not failures, failures[0]


def test_bare_helper_calls_through_the_cli(tmp_path, amplint):
    # torch's ONNX symbolics call their own masked_fill(g, ...): AMP103 raised AttributeError
    path = tmp_path / "symbolic.py"
    path.write_text("y = masked_fill(x, m, v)\nz = where(c, a)\nw = softmax(x, -1)\n", encoding="utf-8")
    proc = amplint("check", str(path), "--no-cache")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "internal error" not in proc.stdout + proc.stderr
