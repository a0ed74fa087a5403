"""AMP501 apex-amp-import: ``apex.amp`` was removed; amplint bundles a compatible engine."""
from __future__ import annotations

import ast

from amplint.rule import Edit, Fix, Invalid, Rule, Severity, Valid


class ApexAmpImport(Rule):
    code = "AMP501"
    name = "apex-amp-import"
    summary = "`apex.amp` was removed from apex in 2025; import the compatible `amplint.amp` instead"
    severity = Severity.ERROR
    fix_applicability = "safe"
    markers = ("apex",)
    markers_required = True
    docs = """
## What it does
Flags imports of NVIDIA apex's automatic mixed precision module: `from apex import amp`,
`import apex.amp as amp`, `from apex.amp import ...`, and uses of `apex.amp.<name>` through
`import apex`.

## Why is this bad?
NVIDIA removed `apex.amp` in May 2025 ([apex#1896](https://github.com/NVIDIA/apex/pull/1896)): with a current apex the import
fails with `ImportError`, and training scripts written for it (`amp.initialize(model,
optimizer, opt_level="O1")`, `amp.scale_loss(...)`) no longer run. Native `torch.amp` has
no equivalent of apex's O2 (half model with fp32 master weights), so porting by hand
changes what is trained.

`amplint.amp` is an engine with apex's API and opt levels O0-O3, so changing the import
line is enough: `initialize`, `scale_loss`, `state_dict` / `load_state_dict`,
`master_params`, the `register_*_function` calls and decorators keep their meaning.

## Example
```python
from apex import amp

model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
```

## Use instead
```python
from amplint import amp

model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
```

## Fix safety
The fix is `safe`: at O0 (fp32) the behaviour is identical, and the replaced import no
longer exists in apex, so there is no working behaviour to preserve.
It is offered only where the import can be rewritten alone: not for `from apex import amp,
optimizers` (apex's other modules stay) or a bare `import apex.amp` used as `apex.amp.x`.
"""

    VALID = [
        Valid("""
            from amplint import amp
            """),
        Valid("""
            from apex.normalization import FusedLayerNorm
            """),
        Valid("""
            import apex
            norm = apex.normalization.FusedLayerNorm(8)
            """),
        Valid("""
            import torch
            scaler = torch.amp.GradScaler('cuda')
            """),
    ]
    INVALID = [
        Invalid("""
            from apex import amp
            model, opt = amp.initialize(model, opt)
            """,
            line=1,
            message="apex.amp",
            expected_fix="""
                from amplint import amp
                model, opt = amp.initialize(model, opt)
                """,
        ),
        Invalid("""
            import apex.amp as amp  # legacy
            """,
            expected_fix="""
                from amplint import amp  # legacy
                """,
        ),
        Invalid("""
            import apex.amp as mp
            """,
            expected_fix="""
                import amplint.amp as mp
                """,
        ),
        Invalid("""
            from apex.amp import scale_loss, initialize as init
            """,
            expected_fix="""
                from amplint.amp import scale_loss, initialize as init
                """,
        ),
        Invalid("""
            from apex import amp, optimizers
            """,
            message="apex.amp",
            expected_fix=None,
        ),
        Invalid("""
            import apex
            model, opt = apex.amp.initialize(model, opt)
            """,
            line=2,
            expected_fix=None,
        ),
    ]

    def visit_ImportFrom(self, node: ast.ImportFrom, ctx) -> None:
        if node.level:
            return
        if node.module == "apex":
            amp = [a for a in node.names if a.name == "amp"]
            if not amp:
                return
            fix = None
            if len(node.names) == 1:
                alias = amp[0]
                text = "from amplint import amp" + (f" as {alias.asname}" if alias.asname else "")
                fix = Fix([Edit.replace(node, text)], "safe", "Import `amp` from `amplint`")
            ctx.report(self, node, "`apex.amp` was removed from apex (2025); use `from amplint import amp`", fix=fix)
        elif node.module and (node.module == "apex.amp" or node.module.startswith("apex.amp.")):
            names = ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in node.names)
            module = "amplint" + node.module[len("apex"):]
            fix = None
            if node.module == "apex.amp" and "(" not in ctx.segment(node) and "\\" not in ctx.segment(node):
                fix = Fix([Edit.replace(node, f"from {module} import {names}")], "safe", f"Import from `{module}`")
            ctx.report(self, node, f"`{node.module}` was removed from apex (2025); import from `{module}`", fix=fix)

    def visit_Import(self, node: ast.Import, ctx) -> None:
        for alias in node.names:
            if alias.name == "apex.amp" or alias.name.startswith("apex.amp."):
                fix = None
                # a bare `import apex.amp` is used as `apex.amp.x`: renaming the import alone would break those
                if len(node.names) == 1 and alias.name == "apex.amp" and alias.asname:
                    text = "from amplint import amp" if alias.asname == "amp" else f"import amplint.amp as {alias.asname}"
                    fix = Fix([Edit.replace(node, text)], "safe", "Import the engine from `amplint`")
                ctx.report(self, node, f"`{alias.name}` was removed from apex (2025); use `amplint.amp`", fix=fix)

    def visit_Attribute(self, node: ast.Attribute, ctx) -> None:
        if node.attr == "amp" and isinstance(node.value, ast.Name) and ctx.imports.get(node.value.id) == "apex":
            ctx.report(self, node, "`apex.amp` was removed from apex (2025); use `from amplint import amp` and `amp.<name>`")
