"""Building fixes: the text edits rules share.

Each helper returns :class:`amplint.rule.Edit` objects (or the text for one); the rule
wraps them in a :class:`amplint.rule.Fix` with its applicability and description.  They
write names the way the file already spells them (``analysis.calls.torch_alias``) and
return None / nothing when they cannot (no ``torch`` import, a multi-line expression).
"""
from __future__ import annotations

import ast
import itertools
import struct
from typing import Optional

from .analysis.calls import amp_alias, keyword, torch_alias
from .analysis.constants import literal_text
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


def registration_fix(ctx, wanted: list, self_module: str, after_registrations) -> Optional[Fix]:
    """AMP401's one fix for a file's registrations (``analysis.uncovered.Registration``;
    ``self_module`` is the text of a registration on the importing module itself,
    ``after_registrations(ctx, anchor)`` skips registrations already after the imports).
    Registrations belong before
    ``amp.initialize`` in the engine the project trains with: applied (safe) only in
    the file that calls ``amp.initialize``, with that engine's ``amp``; anywhere else
    -- a library model file, a project on ``torch.autocast`` or with no engine found
    -- the lines to add are shown, never inserted (a model file must not start
    depending on an engine its project does not use)."""
    from . import engine_detect

    anchor = import_anchor(ctx)
    if anchor is None:
        return None
    module = ctx.settings.amp_module
    sites = engine_detect.initialize_sites(ctx.project, ctx.path, ctx.settings.root, ctx.get(engine_detect.SetupNodes))
    # a name imported with `from torch import einsum` can only be registered on the module
    # that imported it: in a project on that engine, the file itself
    # a registration on this module itself (`from torch import einsum`) belongs there too:
    # the training script registers on the imported module (`amp.register_half_function(
    # model_module, "einsum")`), so a model file never gains an engine import
    here = module is not None and bool(sites) and sites[0][0] == ctx.path
    seen, lines = set(), []
    need_sys = False
    amp_name, import_line = amp_alias(ctx) if here else ("amp", "")
    if here and import_line and module == "apex" and not (sites and sites[0][0] == ctx.path):
        # a new import of apex's removed amp in a model file would be migrated to amplint
        # by AMP501: show the lines instead
        here, amp_name, import_line = False, "amp", ""
    if here and import_line and module == "apex":
        import_line = import_line.replace("from amplint import", "from apex import").replace("amplint_amp", "apex_amp")
        amp_name = amp_name.replace("amplint_amp", "apex_amp")
    from .imports import module_names

    own_name = min(module_names(ctx.path, ctx.settings.root) or {"this_module"}, key=lambda n: (n.count("."), n))
    for reg in wanted:
        text, name, kind = reg.text, reg.name, reg.kind
        if text == self_module and not here:
            text = own_name  # shown for the training script, which imports this module
        if (reg.module, name) in seen:
            continue
        seen.add((reg.module, name))
        if text == self_module and ctx.imports.get("sys") != "sys":
            need_sys = True
        lines.append(f"{amp_name}.register_{kind}_function({text}, \"{name}\")\n")
    if not lines:
        return None
    names = ", ".join(f"`{n}`" for _, n in sorted(seen, key=lambda k: k[1]))
    if not here:
        own_import = [f"import {own_name}"] if any(r.text == self_module for r in wanted) else []
        shown = "; ".join(line.strip() for line in [f"from {module or 'amplint'} import amp"] + own_import + lines)
        if module is None:
            where = ("nothing to add under torch.autocast (it casts these ops itself); with an apex-style O1 engine, "
                     "before `amp.initialize` in the training script" if ctx.settings.engine == "torch"
                     else "before `amp.initialize` in the training script")
        elif sites:
            where = f"before `amp.initialize` in {sites[0][0]}:{sites[0][1]}"
        else:
            where = "before `amp.initialize` in the training script"
        registrations = [(own_name if r.text == self_module or (r.module or "").startswith("@") else r.module or r.text,
                          r.name, r.kind) for r in wanted]
        return Fix((), "display", f"Register {names} {where}: `{shown}`", tuple(dict.fromkeys(registrations)))
    head = ("import sys\n" if need_sys else "") + import_line
    # after existing registrations that follow the imports
    anchor = after_registrations(ctx, anchor)
    return Fix([insert_lines_after(ctx, anchor, head + "".join(lines))], "safe",
               f"Register {names} with {module}'s O1 engine after the imports (before `amp.initialize`)")


def _own_returns(func: ast.AST) -> list[ast.Return]:
    """The ``return`` statements of ``func`` itself, not of functions nested in it."""
    out, todo = [], list(func.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Return):
            out.append(node)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        todo.extend(ast.iter_child_nodes(node))
    return out


def compute_in_fp32(ctx, func: ast.AST) -> Optional[list[Edit]]:
    """A hand-written norm's ``forward(self, x)`` computed in fp32 and cast back, as
    Llama's RMSNorm does::

        input_dtype = x.dtype
        x = x.float()
        ...
        return (...).to(input_dtype)

    In fp32 ``x.float()`` returns ``x`` itself and ``.to(torch.float32)`` is a no-op, so
    fp32 output is bit-identical; in half the statistics (square, variance, ``+ eps``,
    root) are fp32, curing both the eps underflow and the square's overflow.  None when
    the method has no tensor argument, starts on its ``def`` line, or returns anything
    but one expression."""
    args = func.args.args
    if len(args) < 2 or not func.body:
        return None
    x = args[1].arg
    body = func.body
    first = body[1] if (len(body) > 1 and isinstance(body[0], ast.Expr)
                        and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)) else body[0]
    if first.lineno <= func.lineno or first.col_offset == 0:
        return None
    if any(isinstance(stmt, ast.Assign) and ast.unparse(stmt) == f"{x} = {x}.float()" for stmt in body[:3]):
        return None  # already computed in fp32 (this fix ran): what is left is not x's statistics
    returns = _own_returns(func)
    if not returns or any(r.value is None or isinstance(r.value, ast.Tuple) for r in returns):
        return None
    used = {n.id for n in ast.walk(func) if isinstance(n, ast.Name)} | {a.arg for a in args}
    candidates = itertools.chain(("input_dtype", f"{x}_dtype"), (f"input_dtype{i}" for i in itertools.count(2)))
    dtype = next(n for n in candidates if n not in used)
    indent = ctx.indentation(first)
    edits = [Edit.insert_before(first, f"{dtype} = {x}.dtype\n{indent}{x} = {x}.float()\n{indent}")]
    for ret in returns:
        value = ret.value
        if _postfix_safe(value):
            edits.append(Edit.insert_after(value, f".to({dtype})"))
        else:
            edits += [Edit.insert_before(value, "("), Edit.insert_after(value, f").to({dtype})")]
    return edits


#: methods whose result need not have the receiver's dtype
_DTYPE_CHANGING = frozenset(("half", "float", "double", "bfloat16", "to", "type", "type_as", "new_tensor", "new_zeros",
                             "new_ones", "new_full", "new_empty"))


def tensor_root(ctx, expr: ast.AST) -> Optional[str]:
    """The variable a tensor expression is computed from, when there is one obvious one:
    ``x`` for ``x``, ``x.norm(dim=-1)``, ``x.pow(2).mean(-1)``, ``1 - x``,
    ``F.softplus(x)`` (a module function: its first argument), ``self.scale``."""
    node = expr
    while True:
        if isinstance(node, ast.BinOp) and isinstance(node.left, ast.Constant) != isinstance(node.right, ast.Constant):
            node = node.right if isinstance(node.left, ast.Constant) else node.left  # 1 - p
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in _DTYPE_CHANGING or any(k.arg == "dtype" for k in node.keywords):
                return None  # x.half(): x's dtype is not the operand's
            head = node.func.value
            while isinstance(head, ast.Attribute):
                head = head.value
            if isinstance(head, ast.Name) and head.id in ctx.imports:  # torch.log(x), F.softplus(x)
                if not node.args:
                    return None
                node = node.args[0]
            else:
                node = node.func.value
        elif isinstance(node, ast.Subscript):
            node = node.value
        else:
            break
    if isinstance(node, ast.Name) and node.id not in ctx.imports:
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id not in ctx.imports:
        return f"{node.value.id}.{node.attr}"
    return None


def half_guarded(ctx, eps: ast.AST, tensor: str, safe_value: str) -> Optional[Edit]:
    """``eps`` -> ``(eps if x.dtype != torch.float16 else 1e-4)``: the half-safe value only
    where ``x`` is fp16, every other dtype keeps ``eps`` bit for bit."""
    alias = torch_alias(ctx)
    text = ctx.segment(eps)
    if alias is None or "\n" in text:
        return None
    return Edit.replace(eps, f"({text} if {tensor}.dtype != {alias}.float16 else {safe_value})")


def _fp32_change(old: float, new: float) -> str:
    """The change raising ``old`` to ``new`` makes to ``1 / (1 + eps)`` in float32 (a
    unit denominator): what a plain raise costs fp32 results."""
    def f32(v: float) -> float:
        return struct.unpack("f", struct.pack("f", v))[0]

    before, after = f32(1 / f32(1 + f32(old))), f32(1 / f32(1 + f32(new)))
    return f"changes fp32 results: 1 / (1 + eps) goes from {before:.8g} to {after:.8g}"


def epsilon_fix(ctx, use, value, format_name: str, new: str, opt_default, operand, norm) -> Optional[Fix]:
    """In order of preference: a hand-written norm computed in fp32 and cast back;
    the half-safe eps for fp16 tensors only (``eps if x.dtype != torch.float16 else
    1e-4``, unsafe: it moves fp16 results); both keep every other dtype bit-identical.  AMP102's fix: ``use`` the
    eps expression reported, ``value`` its folded value, ``new`` the half-safe literal,
    ``operand`` the tensor eps is added to or clamps, ``norm`` a hand-written norm's
    ``forward``, ``opt_default`` the optimizer call's last argument (no ``eps=`` given).  Only where neither can
    be written: the plain raise of the constant (unsafe, its fp32 change stated)."""
    if norm is not None:
        edits = compute_in_fp32(ctx, norm)
        if edits:
            return Fix(edits, "safe", "Compute the norm in fp32 and cast the result back "
                                      "(`x = x.float()` ... `.to(input_dtype)`): fp32 output is unchanged, "
                                      "and neither eps nor the square can underflow or overflow")
    root = tensor_root(ctx, operand) if operand is not None else None
    if root is not None and format_name == "float16" and not root.startswith("self."):
        # unsafe: fp32 keeps the epsilon bit for bit, but fp16 results move by up to
        # new/x where x is small (the contrastive loss's log(p + eps) under O2: max error
        # 0.0012 -> 0.11), a trade of precision for no inf the user must accept
        described = (f"Use {new} for float16 `{root}` only (`... if {root}.dtype != torch.float16 else {new}`): "
                     f"other dtypes keep the epsilon bit for bit; fp16 results move by up to {new} / x")
        if use is not None:
            edit = half_guarded(ctx, use, root, new)
            if edit is not None:
                return Fix([edit], "unsafe", described)
        elif opt_default is not None and torch_alias(ctx) is not None:
            # F.normalize(x) with its default eps: pass that default for every dtype but fp16
            guarded = f"({literal_text(value.value)} if {root}.dtype != {torch_alias(ctx)}.float16 else {new})"
            return Fix([Edit.insert_after(opt_default, f", eps={guarded}")], "unsafe", described)
    old = value.value
    change = _fp32_change(old, float(new))
    lit = value.literal
    if opt_default is not None:
        return Fix([Edit.insert_after(opt_default, f", eps={new}")], "unsafe", f"Pass `eps={new}` ({change})")
    if isinstance(lit, ast.Constant) and lit.value == old and getattr(lit, "amplint_parent", None) is not None:
        return Fix([Edit.replace(lit, new)], "unsafe", f"Raise the epsilon to {new}, a normal {format_name} number ({change})")
    return None


def norm_forward(ctx, node, rooted: bool) -> Optional[ast.AST]:
    """AMP102: the ``forward`` of a hand-written norm module that takes this root (a norm:
    eps under ``sqrt``/``rsqrt``/a negative power -- ``rooted`` -- in a module's ``forward``,
    or any denominator of a ``*Norm*`` module's)."""
    cls, func = ctx.enclosing_method(node)
    if cls is None or func is None or func.name != "forward" or not ctx.is_module_class(cls):
        return None
    if ctx.enclosing_function(node) is not func:
        return None  # in a helper nested in forward: its arguments are not forward's
    if not (rooted or "norm" in cls.name.lower()):
        return None
    return func


def called_norm_forward(ctx, call: ast.Call, param: str) -> Optional[ast.AST]:
    """AMP102: for ``MyLayerNorm(d, eps=1e-12)``, the ``forward`` of ``MyLayerNorm`` (a
    module class of this file) when it adds ``param`` -- directly or stored as
    ``self.attr`` in ``__init__`` -- under a root, a division or a negative power: fixed
    there by computing the norm in fp32, which keeps the eps the caller chose."""
    from .analysis.flow import stabilising

    cls = ctx.classes.get(call.func.id) if isinstance(call.func, ast.Name) else None
    if cls is None or not ctx.is_module_class(cls):
        return None
    init, forward = ctx.method(cls, "__init__"), ctx.method(cls, "forward")
    if init is None or forward is None:
        return None
    stored = {attr for attr, stmts in ctx.self_assignments(init).items()
              if len(stmts) == 1 and isinstance(stmts[0].value, ast.Name) and stmts[0].value.id == param}
    for node in ast.walk(forward):
        if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) and stabilising(ctx, node)):
            continue
        for side in (node.left, node.right):
            if (isinstance(side, ast.Attribute) and isinstance(side.value, ast.Name) and side.value.id == "self"
                    and side.attr in stored):
                # under a root (or log, reciprocal, negative power) rather than a plain divisor
                rooted = not isinstance(ctx.parent(node), ast.BinOp) or isinstance(ctx.parent(node).op, ast.Pow)
                return norm_forward(ctx, node, rooted)
    return None
