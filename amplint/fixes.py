"""Building fixes: the text edits rules share.

Each helper returns :class:`amplint.rule.Edit` objects (or the text for one); the rule
wraps them in a :class:`amplint.rule.Fix` with its applicability and description.  They
write names the way the file already spells them (``analysis.calls.torch_alias``) and
return None / nothing when they cannot (no ``torch`` import, a multi-line expression).
"""
from __future__ import annotations

import ast
from typing import Optional

from .analysis.calls import amp_alias, keyword, torch_alias
from .rule import Edit, Fix


def add_keyword(call: ast.Call, text: str) -> Edit:
    """Insert ``text`` (``dtype=torch.float32``) as the call's last argument, or
    replace the value of the keyword already there (``dtype=None``)."""
    name, _, value = text.partition("=")
    existing = keyword(call, name)
    if existing is not None:
        return Edit.replace(existing.value, value)
    items = list(call.args) + list(call.keywords)
    if items:
        last = max(items, key=lambda n: (n.end_lineno, n.end_col_offset))
        return Edit.insert_after(last, ", " + text)
    return Edit.insert_at(call.end_lineno, call.end_col_offset - 1, text)


def _postfix_safe(node: ast.AST) -> bool:
    """Whether ``.method()`` can be appended to ``node`` without parentheses."""
    return isinstance(node, (ast.Name, ast.Attribute, ast.Call, ast.Subscript))


def upcast(operand: ast.AST) -> list[Edit]:
    """``x`` -> ``x.float()``; ``a - b`` -> ``(a - b).float()``."""
    if _postfix_safe(operand):
        return [Edit.insert_after(operand, ".float()")]
    return [Edit.insert_before(operand, "("), Edit.insert_after(operand, ").float()")]


def cast_back(ctx, node: ast.AST, source: ast.AST) -> list[Edit]:
    """Append ``.to(<source>.dtype)`` to ``node``, parenthesised unless postfix-safe."""
    text = f".to({ctx.segment(source)}.dtype)"
    if _postfix_safe(node):
        return [Edit.insert_after(node, text)]
    return [Edit.insert_before(node, "("), Edit.insert_after(node, ")" + text)]


def finfo_text(ctx, tensor: ast.AST, negative: bool, dtype_expr: bool = False) -> Optional[str]:
    """``torch.finfo(x.dtype).min`` (``.max`` unless ``negative``) for the tensor -- or,
    with ``dtype_expr``, the dtype expression -- given; None without a torch import or
    for a multi-line expression."""
    alias = torch_alias(ctx)
    if alias is None:
        return None
    inner = ctx.segment(tensor) if dtype_expr else f"{ctx.segment(tensor)}.dtype"
    if "\n" in inner or "\r" in inner:
        return None
    return f"{alias}.finfo({inner}).{'min' if negative else 'max'}"


def import_anchor(ctx) -> Optional[ast.stmt]:
    """The last top-level import statement (or try-block of only imports): where new
    top-level lines that need the imports go."""
    anchor = None
    for stmt in ctx.tree.body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            anchor = stmt
        elif isinstance(stmt, ast.Try) and stmt.body and all(
                isinstance(s, (ast.Import, ast.ImportFrom)) for s in stmt.body):
            anchor = stmt
    return anchor


def insert_lines_after(ctx, stmt: ast.stmt, text: str) -> Edit:
    """Insert whole lines (``text`` ends with a newline) after ``stmt``'s last line,
    after its trailing comment."""
    end = stmt.end_lineno
    if end >= len(ctx.lines):  # the last line of a file without a final newline
        return Edit.insert_at(end, len(ctx.line_text(end).encode("utf-8")), "\n" + text.rstrip("\n"))
    return Edit.insert_at(end + 1, 0, text)


def registration_fix(ctx, wanted: list) -> Optional[Fix]:
    """AMP401's one fix for a file's registrations (``analysis.uncovered.Registration``).
    Registrations belong before
    ``amp.initialize`` in the engine the project trains with: applied (safe) only in
    the file that calls ``amp.initialize``, with that engine's ``amp``; anywhere else
    -- a library model file, a project on ``torch.autocast`` or with no engine found
    -- the lines to add are shown, never inserted (a model file must not start
    depending on an engine its project does not use)."""
    from .analysis import uncovered
    from . import engine_detect

    anchor = import_anchor(ctx)
    if anchor is None:
        return None
    module = ctx.settings.amp_module
    sites = engine_detect.initialize_sites(ctx.project, ctx.path, ctx.tree)
    here = module is not None and bool(sites) and sites[0][0] == ctx.path
    seen, lines = set(), []
    need_sys = False
    amp_name, import_line = amp_alias(ctx) if here else ("amp", "")
    if here and import_line and module == "apex":
        import_line = import_line.replace("from amplint import", "from apex import").replace("amplint_amp", "apex_amp")
        amp_name = amp_name.replace("amplint_amp", "apex_amp")
    for reg in wanted:
        text, name, kind = reg.text, reg.name, reg.kind
        if (reg.module, name) in seen:
            continue
        seen.add((reg.module, name))
        if text == uncovered.SELF_MODULE and ctx.imports.get("sys") != "sys":
            need_sys = True
        lines.append(f"{amp_name}.register_{kind}_function({text}, \"{name}\")\n")
    if not lines:
        return None
    names = ", ".join(f"`{n}`" for _, n in sorted(seen, key=lambda k: k[1]))
    if not here:
        shown = "; ".join(line.strip() for line in
                          [f"from {module or 'amplint'} import amp"] + (["import sys"] if need_sys else []) + lines)
        if module is None:
            where = ("nothing to add under torch.autocast (it casts these ops itself); with an apex-style O1 engine, "
                     "before `amp.initialize` in the training script" if ctx.settings.engine == "torch"
                     else "before `amp.initialize` in the training script")
        elif sites:
            where = f"before `amp.initialize` in {sites[0][0]}:{sites[0][1]}"
        else:
            where = "before `amp.initialize` in the training script"
        return Fix((), "display", f"Register {names} {where}: `{shown}`")
    head = ("import sys\n" if need_sys else "") + import_line
    # after existing registrations that follow the imports
    anchor = uncovered.after_registrations(ctx, anchor)
    return Fix([insert_lines_after(ctx, anchor, head + "".join(lines))], "safe",
               f"Register {names} with {module}'s O1 engine after the imports (before `amp.initialize`)")
