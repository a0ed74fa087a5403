"""Value ranges: an upper bound on the magnitude of a tensor's elements, where the code
shows one (``ctx.magnitude_bound``).

Probabilities (``softmax``, ``sigmoid``), ``tanh`` / ``sin`` / ``cos`` and unit-normalised
vectors (``F.normalize``) are bounded by 1, whatever their input; ``abs`` / ``relu`` and
shape and layout changes keep their operand's bound; products, sums and constant powers
of bounded values are bounded.  Names follow their reaching assignment, a helper's
parameter every argument the file passes it (``ctx.dtype_flow.passed_arguments``), and
``a, b = map(lambda t: t.softmax(-1), (x, y))`` the lambda's body.  The reduction rule
asks it: a sum along one dimension of probabilities is at most that dimension's length,
and a product of values in [0, 1] stays in [0, 1].  Depends on :mod:`ast` and the
dtype flow's call-site index only.
"""
from __future__ import annotations

import ast
from typing import Optional

from .bindings import subtree
from .analysis.calls import argument
from .amp.policy import VECTOR_NORMS
from .dtypes import reaching_value

#: functions / methods whose result is bounded by 1 in magnitude, whatever the input
_UNIT = frozenset({"softmax", "sigmoid", "tanh", "sin", "cos", "normalize", "hardtanh", "softsign"})
#: functions / methods whose result is bounded by their first operand's bound
_SAME = frozenset({
    "abs", "relu", "neg", "view", "reshape", "transpose", "permute", "contiguous", "clone", "detach",
    "unsqueeze", "squeeze", "flatten", "expand", "expand_as", "repeat", "t", "flip", "roll",
    "rearrange", "repeat_interleave", "narrow", "select", "gather", "index_select", "float", "half",
    "to", "type", "type_as", "cat", "stack", "dropout", "amax", "amin", "tril", "triu",
})
_LIMIT = 1e300


class MagnitudeBounds:
    """Per-file, lazy, cached by node: ``of(expr)`` is an upper bound on ``|x|`` for every
    element ``x`` of ``expr``, or None when the file does not show one."""

    def __init__(self, ctx):
        self.ctx = ctx
        self._memo: dict[int, Optional[float]] = {}
        #: (helper, parameter -> argument) of the helper calls being followed, innermost last
        self._bindings: list[tuple[ast.AST, dict[str, ast.AST]]] = []
        #: id(function) -> its assignments in ast.walk order (one walk per function, not per name)
        self._assigns: dict[int, list[ast.Assign]] = {}
        self._maps: dict[int, list[ast.Assign]] = {}

    def _assignments(self, func: ast.AST) -> list[ast.Assign]:
        found = self._assigns.get(id(func))
        if found is None:
            found = self._assigns[id(func)] = [n for n in subtree(func) if n.__class__ is ast.Assign]
        return found

    def of(self, expr: Optional[ast.AST], depth: int = 0) -> Optional[float]:
        if expr is None or depth > 12:
            return None
        key = id(expr)
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = None  # a cycle (x = f(x) in a loop) has no bound
        found = self._bound(expr, depth)
        self._memo[key] = found if found is None or found < _LIMIT else None
        return self._memo[key]

    def _bound(self, expr: ast.AST, depth: int) -> Optional[float]:
        kind = expr.__class__
        if kind is ast.Constant:
            value = expr.value
            return abs(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
        if kind is ast.UnaryOp:
            return self.of(expr.operand, depth + 1) if isinstance(expr.op, (ast.USub, ast.UAdd)) else None
        if kind is ast.Subscript or kind is ast.Starred:
            return self.of(expr.value, depth + 1)
        if kind is ast.Attribute and expr.value.__class__ is ast.Name and expr.value.id == "self":
            return self._self_attribute(expr, depth)
        if kind is ast.BinOp:
            return self._binop(expr, depth)
        if kind is ast.Name:
            return self._name(expr, depth)
        if kind is ast.Call:
            return self._call(expr, depth)
        if kind in (ast.List, ast.Tuple):
            bounds = [self.of(e, depth + 1) for e in expr.elts]
            return max(bounds) if bounds and None not in bounds else None
        if kind is ast.ListComp:  # `[padded[:, i:i + t] for i in range(n)]`: slices of one tensor
            return self.of(expr.elt, depth + 1)
        return None

    def _binop(self, expr: ast.BinOp, depth: int) -> Optional[float]:
        op = expr.op.__class__
        if op is ast.Pow:
            base, exponent = self.of(expr.left, depth + 1), self.ctx.evaluate(expr.right)
            if base is None or exponent is None or not isinstance(exponent.value, (int, float)) or exponent.value < 0:
                return None
            return base ** exponent.value
        if op is ast.Div:
            return self._quotient(expr.left, expr.right, depth)
        left, right = self.of(expr.left, depth + 1), self.of(expr.right, depth + 1)
        if left is None or right is None:
            return None
        if op in (ast.Add, ast.Sub):
            return left + right
        if op is ast.Mult:
            return left * right
        return None

    def _quotient(self, numerator: ast.AST, denominator: ast.AST, depth: int) -> Optional[float]:
        """``x / (x.norm(dim=-1, keepdim=True) + eps)``, ``torch.div(x, norm(x, dim))``: a
        vector divided by its own L2 norm has elements of magnitude at most 1 (a hand-written
        ``F.normalize``); other quotients are unbounded."""
        normed = l2_norm_of(self.ctx, denominator)
        if normed is None or ast.dump(normed) != ast.dump(numerator):
            return None
        if isinstance(normed, ast.Name) and reaching_value(self.ctx, normed) is not reaching_value(self.ctx, numerator):
            return None  # `n = x.norm(); x = f(x); x / n`: another x
        return 1.0

    def _name(self, name: ast.Name, depth: int) -> Optional[float]:
        ctx = self.ctx
        func = ctx.enclosing_function(name)
        if func is None:
            return None
        value = reaching_value(ctx, name)
        if value is not None:
            if self._grows_in_loop(value, name.id, func):
                return None  # `x = x * 3` in a loop: bounded by nothing the file shows
            others = self._other_branch(value, name, func)
            if others is None:
                return self.of(value, depth + 1)
            if not others:
                return None  # `if shared_qk: k = F.normalize(k)`: k may keep its earlier value
            bounds = [self.of(v, depth + 1) for v in (value, *others)]
            return None if None in bounds else max(bounds)  # `if m: g = sigmoid(a) else: g = sigmoid(b)`
        element = self._mapped_element(name, func)
        if element is not None:  # bq, bk = map(lambda t: t.reshape(...), (q, k)): bk is k reshaped
            return self.of(element, depth + 1)
        unpacked = self._unpacked_from_map(name, func)
        if isinstance(unpacked, ast.Name) and unpacked.id in ctx.functions:  # map(l2norm, (q, k))
            return self._returned(ctx.functions[unpacked.id], depth)
        if unpacked is not None:
            return self.of(unpacked, depth + 1)
        picked = self._picked_values(name, func)
        if picked is not None:  # values, indices = x.topk(2): the values are some of x's
            return self.of(picked, depth + 1)
        for helper, binding in reversed(self._bindings):
            if helper is func and name.id in binding:
                return self.of(binding[name.id], depth + 1)
        params = func.args.posonlyargs + func.args.args + func.args.kwonlyargs
        if not any(p.arg == name.id for p in params) or func.name in ("forward", "__init__", "__call__"):
            return None
        passed = ctx.dtype_flow.passed_arguments(func, name.id)
        if not passed:
            return None
        bounds = [self.of(arg, depth + 1) for arg in passed]
        return None if None in bounds else max(bounds)

    def _self_attribute(self, attr: ast.Attribute, depth: int) -> Optional[float]:
        """``self.h`` where every tensor the class assigns it is bounded (``self.h =
        torch.tanh(...)`` in forward, ``self.h = None`` in reset)."""
        ctx = self.ctx
        cls = ctx.enclosing_class(attr)
        if cls is None:
            return None
        values = []
        for klass in (cls, *ctx.base_classes(cls)):
            for stmt in klass.body:
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    values += [a.value for a in ctx.self_assignments(stmt).get(attr.attr, ())]
        values = [v for v in values if not (isinstance(v, ast.Constant) and v.value is None)]
        if not values or any(v is None for v in values):
            return None
        bounds = [self.of(v, depth + 1) for v in values]
        return None if None in bounds else max(bounds)

    def _other_branch(self, value: ast.AST, use: ast.Name, func: ast.AST) -> Optional[list]:
        """None when the assignment of ``value`` is not in an ``if`` branch the use is
        outside of (or the name had no value before it); else the values the other branch
        assigns the name at its top level (empty: the earlier value may reach the use)."""
        ctx = self.ctx
        use_ancestors = {id(a) for a in ctx.ancestors(use)}
        branch, child = None, None
        for anc in ctx.ancestors(value):
            if anc is func:
                break
            if anc.__class__ is ast.If and id(anc) not in use_ancestors:
                branch = anc
                break
            child = anc
        if branch is None:
            return None
        other = branch.orelse if child in branch.body else branch.body
        others = [stmt.value for stmt in other if stmt.__class__ is ast.Assign and len(stmt.targets) == 1
                  and stmt.targets[0].__class__ is ast.Name and stmt.targets[0].id == use.id]
        if others:
            return others
        args = func.args
        if any(p.arg == use.id for p in args.posonlyargs + args.args + args.kwonlyargs):
            return []
        from .dtypes import Assignments

        earlier = any(e[0] < branch.lineno for e in ctx.get(Assignments).of(func).get(use.id, ()))
        return [] if earlier else None

    def _grows_in_loop(self, value: ast.AST, name: str, func: ast.AST) -> bool:
        if not any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(value)):
            return False
        for anc in self.ctx.ancestors(value):
            if anc is func:
                return False
            if isinstance(anc, (ast.For, ast.While, ast.AsyncFor)):
                return True
        return False

    def _unpacked_from_map(self, name: ast.Name, func: ast.AST) -> Optional[ast.AST]:
        """The lambda body of ``a, b, c = map(lambda t: body, (x, y, z))`` binding ``name``."""
        stmt = self.ctx.enclosing_statement(name)
        last = None  # the last tuple assignment binding the name before the use
        for node in self._assignments(func):
            if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Tuple)):
                continue
            if stmt is not None and node.lineno >= stmt.lineno:
                continue
            if not any(isinstance(t, ast.Name) and t.id == name.id for t in node.targets[0].elts):
                continue
            if last is None or node.lineno > last.lineno:
                last = node
        if last is not None and self._other_branch(last.value, name, func) == []:
            return None  # `if qk_norm: q, k = map(l2norm, (q, k))`: the earlier values may reach the use
        if last is not None:
            call = last.value
            if (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "map"
                    and call.args and isinstance(call.args[0], ast.Lambda)):
                return call.args[0].body
            if (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "map"
                    and call.args and isinstance(call.args[0], ast.Name)):
                return call.args[0]  # the mapped function, named
        return None

    def _map_assignments(self, func: ast.AST) -> list[ast.Assign]:
        """``a, b = map(...)`` assignments of ``func`` (one filter per function)."""
        found = self._maps.get(id(func))
        if found is None:
            found = self._maps[id(func)] = [
                n for n in self._assignments(func) if n.value.__class__ is ast.Call
                and n.value.func.__class__ is ast.Name and n.value.func.id == "map"]
        return found

    def _mapped_element(self, name: ast.Name, func: ast.AST) -> Optional[ast.AST]:
        """The element of ``(q, k, v)`` that ``bk`` of ``bq, bk, bv = map(fn, (q, k, v))``
        is, when ``fn`` only changes its argument's layout (``lambda t: t.reshape(...)``,
        a name bound to such a lambda)."""
        stmt = self.ctx.enclosing_statement(name)
        last = None
        for node in self._map_assignments(func):
            if (len(node.targets) == 1 and node.targets[0].__class__ is ast.Tuple and stmt is not None
                    and node.lineno < stmt.lineno
                    and any(t.__class__ is ast.Name and t.id == name.id for t in node.targets[0].elts)):
                if last is None or node.lineno > last.lineno:
                    last = node
        call = last.value if last is not None else None
        if not (call.__class__ is ast.Call and call.func.__class__ is ast.Name and call.func.id == "map"
                and len(call.args) == 2 and call.args[1].__class__ in (ast.Tuple, ast.List)):
            return None
        fn = call.args[0]
        if fn.__class__ is ast.Name:
            bound = [n.value for n in self._assignments(func) if len(n.targets) == 1
                     and n.targets[0].__class__ is ast.Name and n.targets[0].id == fn.id]
            fn = bound[-1] if len(bound) == 1 else None
        if fn.__class__ is not ast.Lambda or len(fn.args.args) != 1:
            return None
        body = fn.body
        while body.__class__ is ast.Call and body.func.__class__ is ast.Attribute and body.func.attr in _SAME:
            body = body.func.value
        if not (body.__class__ is ast.Name and body.id == fn.args.args[0].arg):
            return None
        index = [t.id if t.__class__ is ast.Name else None for t in last.targets[0].elts].index(name.id)
        elts = call.args[1].elts
        return elts[index] if index < len(elts) else None

    def _picked_values(self, name: ast.Name, func: ast.AST) -> Optional[ast.AST]:
        """The tensor ``name`` holds some elements of, when its last assignment before the
        use is the values of ``topk`` / ``sort`` / ``max`` / ``min`` / ``kthvalue``
        (``w, idx = torch.topk(w, 2)``): their bound is that tensor's."""
        stmt = self.ctx.enclosing_statement(name)
        last = None
        for node in self._assignments(func):
            if node.__class__ is not ast.Assign or stmt is None or node.lineno >= stmt.lineno:
                continue
            for target in node.targets:
                names = target.elts if target.__class__ is ast.Tuple else [target]
                if any(t.__class__ is ast.Name and t.id == name.id for t in names):
                    if last is None or node.lineno > last[0].lineno:
                        last = (node, target)
        if last is None:
            return None
        node, target = last
        call = node.value
        if (target.__class__ is not ast.Tuple or not target.elts or target.elts[0].__class__ is not ast.Name
                or target.elts[0].id != name.id or call.__class__ is not ast.Call):
            return None
        f = call.func
        attr = f.attr if f.__class__ is ast.Attribute else None
        if attr not in ("topk", "sort", "max", "min", "kthvalue", "median", "mode", "cummax", "cummin"):
            return None
        if self.ctx.qualname(f) == f"torch.{attr}":
            return call.args[0] if call.args else None
        return f.value

    def _returned_for(self, helper: ast.AST, call: ast.Call, depth: int) -> Optional[float]:
        """The bound of what ``helper`` returns for this call's arguments (its parameters
        bound to them, then to their defaults): ``look_one_back(F.normalize(k))`` is
        bounded by 1 even where another call passes it unbounded values.  Answers under
        a binding are kept apart from the file's memo."""
        args = helper.args
        params = args.posonlyargs + args.args
        binding = {p.arg: d for p, d in zip(params[len(params) - len(args.defaults):], args.defaults)}
        binding.update({p.arg: d for p, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None})
        binding.update({p.arg: a for p, a in zip(params, call.args) if a.__class__ is not ast.Starred})
        binding.update({k.arg: k.value for k in call.keywords if k.arg is not None})
        if any(a.__class__ is ast.Starred for a in call.args):
            return self._returned(helper, depth)
        memo, self._memo = self._memo, {}
        self._bindings.append((helper, binding))
        try:
            return self._returned(helper, depth)
        finally:
            self._bindings.pop()
            self._memo = memo

    def returned_for_any_call(self, func: ast.AST) -> Optional[float]:
        """The bound of what ``func`` returns whatever a caller in another file passes:
        parameters unknown, except those with a default (which callers seldom override)."""
        args = func.args
        params = args.posonlyargs + args.args
        binding: dict[str, ast.AST] = {p.arg: ast.Constant(None) for p in params + args.kwonlyargs}
        binding.update({p.arg: d for p, d in zip(params[len(params) - len(args.defaults):], args.defaults)})
        binding.update({p.arg: d for p, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None})
        memo, self._memo = self._memo, {}
        self._bindings.append((func, binding))
        try:
            return self._returned(func, 0)
        finally:
            self._bindings.pop()
            self._memo = memo

    def _returned(self, func: ast.AST, depth: int) -> Optional[float]:
        """The bound of every value a function of the file returns, whatever its arguments
        (``def l2norm(t): return F.normalize(t, dim=-1)``)."""
        returns = [n.value for n in ast.walk(func) if isinstance(n, ast.Return)]
        if not returns or any(r is None for r in returns):
            return None
        bounds = [self.of(r, depth + 1) for r in returns]
        return None if None in bounds else max(bounds)

    def _call(self, call: ast.Call, depth: int) -> Optional[float]:
        func = call.func
        imported = imported_bound(self.ctx, func)
        if imported is not None:  # `from .util import normalize`: what that file's helper returns
            return imported
        if isinstance(func, ast.Name):  # a helper of the file, or one defined in the calling function's body
            outer = self.ctx.enclosing_function(call)
            helper = next((s for s in getattr(outer, "body", ()) if s.__class__ in (ast.FunctionDef, ast.AsyncFunctionDef)
                           and s.name == func.id), None) or self.ctx.functions.get(func.id)
            if helper is not None:
                return self._returned_for(helper, call, depth)
        qualname = self.ctx.qualname(func) or ""
        name = qualname.rsplit(".", 1)[-1] if qualname else func.attr if isinstance(func, ast.Attribute) else None
        if name is None:
            return None
        is_method = isinstance(func, ast.Attribute) and not qualname
        if name in _UNIT and (is_method or qualname.startswith("torch.")):
            return 1.0
        if qualname == "torch.div" and len(call.args) == 2:
            return self._quotient(call.args[0], call.args[1], depth)
        if qualname == "torch.where" and len(call.args) == 3:  # either operand's elements
            bounds = [self.of(a, depth + 1) for a in call.args[1:]]
            return None if None in bounds else max(bounds)
        if qualname in ("torch.tensor", "torch.as_tensor") and call.args:
            return self.of(call.args[0], depth + 1)
        operand = func.value if is_method else (call.args[0] if call.args else None)
        if name in ("clamp", "clip") and is_method or qualname in ("torch.clamp", "torch.clip"):
            limits = [self.ctx.evaluate(k.value) for k in call.keywords if k.arg in ("min", "max")]
            if len(limits) == 2 and None not in limits:
                return max(abs(f.value) for f in limits)
            base = self.of(operand, depth + 1)
            if base is None or None in limits:
                return None
            return max([base] + [abs(f.value) for f in limits])
        if qualname == "torch.nn.functional.pad":  # the pad value joins the operand's elements
            fill = argument(call, "value", 3)
            base, filled = self.of(operand, depth + 1), self.of(fill, depth + 1) if fill is not None else 0.0
            return None if base is None or filled is None else max(base, filled)
        if name in ("masked_fill", "masked_fill_") and is_method:
            fill = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "value"), None)
            base, filled = self.of(operand, depth + 1), self.of(fill, depth + 1)
            return None if base is None or filled is None else max(base, filled)
        if name in _SAME and (is_method or qualname.startswith("torch.") or qualname.startswith("einops.")):
            return self.of(operand, depth + 1)
        return None


# --- hand-written L2 norms, and the bounds of other files' helpers -------------------------


def _strip_eps(ctx, expr: ast.AST) -> ast.AST:
    """``n + eps`` / ``n.clamp(min=eps)`` / ``n.clamp_min(eps)`` -> ``n``: a positive floor
    only makes the quotient smaller."""
    for _ in range(3):
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
            expr = expr.left
        elif (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and not ctx.qualname(expr.func)
              and expr.func.attr in ("clamp", "clamp_min", "clip") and not any(k.arg == "max" for k in expr.keywords)):
            expr = expr.func.value
        else:
            break
    return expr


def _squared(ctx, expr: ast.AST) -> Optional[ast.AST]:
    """What ``x ** 2`` / ``x * x`` / ``torch.square(x)`` / ``x.pow(2)`` squares."""
    if isinstance(expr, ast.BinOp):
        if isinstance(expr.op, ast.Pow) and isinstance(expr.right, ast.Constant) and expr.right.value == 2:
            return expr.left
        if isinstance(expr.op, ast.Mult) and ast.dump(expr.left) == ast.dump(expr.right):
            return expr.left
    if isinstance(expr, ast.Call):
        qualname = ctx.qualname(expr.func) or ""
        if qualname == "torch.square" and expr.args:
            return expr.args[0]
        if (not qualname and isinstance(expr.func, ast.Attribute) and expr.func.attr == "pow"
                and expr.args and isinstance(expr.args[0], ast.Constant) and expr.args[0].value == 2):
            return expr.func.value
    return None


def l2_norm_of(ctx, expr: ast.AST, depth: int = 0) -> Optional[ast.AST]:
    """The tensor ``expr`` is the L2 norm of (plus an ``eps``): ``x.norm(dim=-1)``,
    ``torch.linalg.norm(x)``, ``torch.sqrt((x ** 2).sum(-1))``, or a helper of the file
    returning one of its parameter (``norm(x, dim=-1)`` with ``def norm(t, dim): return
    torch.sqrt(torch.sum(torch.square(t), dim) + eps)``); else None."""
    if depth > 3:
        return None
    expr = _strip_eps(ctx, expr)
    if isinstance(expr, ast.Name):  # `norm_factor = torch.sqrt(...)`
        value = reaching_value(ctx, expr)
        return None if value is None else l2_norm_of(ctx, value, depth + 1)
    if not isinstance(expr, ast.Call):
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Pow) and isinstance(expr.right, ast.Constant) \
                and expr.right.value == 0.5:
            return _sum_of_squares(ctx, _strip_eps(ctx, expr.left))
        return None
    qualname = ctx.qualname(expr.func) or ""
    attr = expr.func.attr if isinstance(expr.func, ast.Attribute) else None
    if qualname in VECTOR_NORMS and expr.args:
        p = argument(expr, "p" if qualname == "torch.norm" else "ord", 1)
        return expr.args[0] if p is None or isinstance(p, ast.Constant) and p.value in (2, 2.0) else None
    if not qualname and attr == "norm":
        p = argument(expr, "p", 0)
        return expr.func.value if p is None or isinstance(p, ast.Constant) and p.value in (2, 2.0) else None
    if qualname == "torch.sqrt" and expr.args:
        return _sum_of_squares(ctx, _strip_eps(ctx, expr.args[0]))
    if not qualname and attr == "sqrt":
        return _sum_of_squares(ctx, _strip_eps(ctx, expr.func.value))
    if isinstance(expr.func, ast.Name) and expr.func.id in ctx.functions:
        helper = ctx.functions[expr.func.id]
        returns = [n.value for n in ast.walk(helper) if isinstance(n, ast.Return)]
        normed = l2_norm_of(ctx, returns[0], depth + 1) if len(returns) == 1 and returns[0] is not None else None
        params = [p.arg for p in helper.args.posonlyargs + helper.args.args]
        if isinstance(normed, ast.Name) and normed.id in params:
            index = params.index(normed.id)
            passed = next((k.value for k in expr.keywords if k.arg == normed.id), None)
            return passed if passed is not None else expr.args[index] if index < len(expr.args) else None
    return None


def _sum_of_squares(ctx, expr: ast.AST) -> Optional[ast.AST]:
    """What ``(x ** 2).sum(dim)`` / ``torch.sum(torch.square(x), dim)`` sums the squares of."""
    if not isinstance(expr, ast.Call):
        return None
    qualname = ctx.qualname(expr.func) or ""
    if qualname == "torch.sum" and expr.args:
        return _squared(ctx, expr.args[0])
    if not qualname and isinstance(expr.func, ast.Attribute) and expr.func.attr == "sum":
        return _squared(ctx, expr.func.value)
    return None


class BoundedReturns:
    """The project fact: the module-level functions of a file whose every return is
    bounded (``def normalize(t, dim=-1): return t / t.norm(dim=dim, keepdim=True)``), name
    -> bound, for the files that import them."""

    KEY = "@bounded-returns"
    #: a file that may define one
    MARKERS = ("norm", "softmax", "sigmoid", "tanh")

    @classmethod
    def collect(cls, ctx) -> Optional[dict]:
        if not any(m in ctx.source for m in cls.MARKERS):
            return None
        bounds = ctx.get(MagnitudeBounds)
        out = {}
        for stmt in ctx.tree.body:
            if stmt.__class__ is ast.FunctionDef:
                found = bounds.returned_for_any_call(stmt)
                if found is not None:
                    out[stmt.name] = found
        return {"by_name": out} if out else None


def imported_bound(ctx, func: ast.AST) -> Optional[float]:
    """The collected bound of an imported function: ``normalize(x)`` after ``from .util
    import normalize``, ``util.normalize(x)`` after ``from . import util``."""
    project = getattr(ctx, "project", None)
    if project is None:
        return None
    if isinstance(func, ast.Name):
        origin = ctx.import_origin(func.id)
    elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        module = ctx.import_path(func.value.id)
        origin = None if module is None else (module, func.attr)
    else:
        return None
    if origin is None or origin[0].startswith("torch") or origin[0].startswith("numpy"):
        return None
    found = project.named(BoundedReturns.KEY, origin[1], origin[0], exclude_path=ctx.path)
    return found[0][1] if len(found) == 1 else None
