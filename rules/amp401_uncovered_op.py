"""AMP401 uncovered-op: ops the mixed-precision policy does not cover, and their registration.

The detectors (ops, custom autograd Functions, extensions) are in
:mod:`amplint.analysis.uncovered`; this file holds the rule's docs, examples and wiring:
which registrations reach a file, and the one registration fix per file."""
from __future__ import annotations

import ast
import os
from typing import Optional

from amplint import fixes
from amplint.analysis import calls, ops, uncovered
from amplint.imports import registration_reaches
from amplint.rule import Fix, Invalid, Rule, Severity, Valid


class UncoveredOp(Rule):
    code = "AMP401"
    name = "uncovered-op"
    summary = "Op the mixed-precision policy does not cover: register it (einsum -> half, linalg/fft -> fp32)"
    severity = Severity.WARNING
    options = ("opt-level", "device", "engine")
    fix_applicability = ("safe", "unsafe")
    uses_engine = True
    markers = ("einsum", "linalg", "fft", "inverse", "det", "svd", "cholesky", "qr", "pinv", "tensordot",
               "outer", "ger", "inner", "kron", "contract", "stft", "Function", "ops.", "cdist", "pdist",
               "lstsq", "eig", "solve", "_cuda", "_C", "_ext", "_cpp", "cpp_extension")
    collect_markers = tuple(ops.REGISTER_FUNCTIONS)
    docs = """
## What it does
Flags calls in model code (an `nn.Module`'s methods and the functions they call in the file) to
precision-relevant ops that the selected mixed-precision policy (`[tool.amplint] engine`) does
not cover and that no linted file registers:

- GEMM-like ops the `amplint` engine's O1 does not run in half: `torch.einsum` (also `from torch
  import einsum`, and the tuple form `torch.einsum("...", (a, b))`), `torch.tensordot`,
  `opt_einsum.contract`, another package's einsum wrapper (`tl.einsum` from tensorly,
  `FC.einsum` from torch_complex), `torch.outer`/`ger`/`inner`/`kron` (an outer product of
  positions is a position table, left to AMP602); `info` when every operand comes from the
  module's parameters and fresh tensors only (Mega's EMA kernel: fp32 under O1, no mixing);
- ops with no fp16/bf16 kernel, under either policy where it leaves them uncovered:
  `torch.linalg.inv`/`solve`/`cholesky`/`eigh`/`svd`/`det`/`slogdet`/`qr`/`lstsq`/`pinv`...,
  `torch.inverse`/`det`/`logdet`/`svd`/`cholesky`/`pinverse` (also as tensor methods,
  `cov.inverse()`), `torch.cdist`/`pdist`, and `torch.fft.*` / `torch.stft` (also the pre-1.8
  `torch.rfft`/`irfft` and `torch.solve`);
- `.apply` of a custom `torch.autograd.Function` (defined in the file) whose `forward` has
  neither `@torch.amp.custom_fwd` nor an `@amp.*_function` decorator: reported once, at the
  `class` line (where the decorator is missing), with each `.apply` call as a related location;
  also when it is called through a module-level alias (`sparsemax = SparsemaxFunction.apply`) or
  exported by a public one or `__all__`; `.apply` of a Function imported from another package
  (`CausalDotProduct.apply(q, k, v)`) is flagged at the call. A Function whose forward and
  backward only return inputs through dtype-keeping ops (DeBERTa's `XDropout`: `masked_fill`
  and a scalar multiply) is `info`, with no fix: it computes in any dtype;
- calls through `torch.ops.<namespace>.<op>` and into compiled extension modules the file imports
  (`import fused_layer_norm_cuda`, `torch.utils.cpp_extension.load(...)`): no policy sees them.

Registered means `amp.register_half_function(mod, "name")`, `register_float_function` or
`register_promote_function` in the same file or in another linted file whose registrations reach
it: one in the model's folder or above (the package `__init__`, a training script at the root), or
one that imports the model's module or package (`scripts/train.py` doing `from mypkg.models import
XLNet`). Module names come from the project's import roots (the folder above the top-level package,
the config root and its `src/`), never from the folder names above the project. Also covered: calls in a function decorated with `@amp.half_function` /
`float_function` / `promote_function`, and a Function whose `forward` has `@torch.amp.custom_fwd`
or an `@amp.*_function` decorator. Code that only runs from `__init__` (tables built once, before
`amp.initialize`) is not flagged. A library file (no `nn.Module`, no script: `torch_dct`,
`kornia.geometry`) runs inside the models that import it, so its public functions (and the file's
functions they call, also through an alias chosen at import) are checked, at `info`: the callers
decide whether the input is half.

Opt levels (`opt-level`): nothing at O0 (fp32). At O2/O3 the model itself is half and no
function is patched, so GEMM-like ops are not flagged (they already run in half) and
registrations would do nothing: fp32-only ops are flagged with the fp32 call to write.
A name imported with `from torch import einsum` is bound before `amp.initialize` patches
`torch.einsum`, so only a registration on the importing module itself
(`sys.modules[__name__]`) reaches it. Calls inside `with torch.autocast(..., enabled=False):`,
`amp.disable_casts()`, or with every tensor argument cast by `.float()`/`.double()` are covered
for the fp32-only ops.

## Why is this bad?
apex-style O1 (the bundled `amplint.amp` engine) casts only the functions on its lists; an op on
no list runs in whatever dtype reaches it:

- `einsum` with an fp16 activation (from an O1 `linear`) and an fp32 weight raises `RuntimeError:
  expected scalar type Half but found Float` ([apex#895](https://github.com/NVIDIA/apex/issues/895)), and with only fp32 inputs it runs in
  fp32: no Tensor Cores. XLNet-style relative attention is einsums end to end; registering
  einsum as half gave ~20-25% higher XLNet fine-tuning throughput ([transformers#1513](https://github.com/huggingface/transformers/pull/1513)).
  Measured on an H200 (torch 2.11, TF32 off): XLNet-style projections `einsum("ibh,hnd->ibnd")`
  at 512x8 tokens, d=1024: 0.175 ms in fp32, 0.028 ms in fp16 (6.2x); a training step of three
  such einsums (32768 tokens) under `amplint.amp` O1: 11.1 ms unregistered (fp32), 2.2-2.7 ms
  after the fix (fp16), 2.2 ms under `torch.autocast`. Whole-model scale: GPT-2-small step
  158.5 ms fp32 vs 25.7 ms fp16 autocast (`docs/fp16-facts.md`).
- Linear algebra has no half kernels: `torch.linalg.inv` on an fp16 matmul output raises
  `linalg.inv: Low precision dtypes not supported. Got Half` (CUDA autocast, measured), `det`
  raises `"lu_cpu" not implemented for 'Half'`; `torch.fft.rfft` of length 100 in fp16 raises
  `cuFFT only supports dimensions whose sizes are powers of two when computing in half precision`
  (CUDA) and `Unsupported dtype Half` (CPU). `torch.autocast` on CUDA lists none of these (the
  CPU lists run them in fp32), so `engine = "torch"` with `device = "cuda"` flags them too.
- A custom autograd Function's forward (often a hand-written CUDA kernel typed for fp32) gets
  fp16 under autocast and O1, and its backward runs outside autocast in other dtypes.
  `torch.amp.custom_fwd` only acts when `torch.autocast` is on; `amplint.amp`'s O1 patches
  functions instead, so under the `amplint` policy the fix adds `@amp.float_function` too.

## Example
```python
import torch
from torch import nn


class RelAttention(nn.Module):
    def forward(self, q, k, cov):
        scores = torch.einsum("ibnd,jbnd->bnij", q, k)
        return scores, torch.linalg.inv(cov)
```

## Use instead
```python
import torch
from torch import nn
from amplint import amp
amp.register_half_function(torch, "einsum")
amp.register_float_function(torch.linalg, "inv")


class RelAttention(nn.Module):
    def forward(self, q, k, cov):
        scores = torch.einsum("ibnd,jbnd->bnij", q, k)
        return scores, torch.linalg.inv(cov)
```
With `engine = "torch"` (autocast), einsum is already fp16; wrap the fp32-only op instead:
```python
with torch.autocast("cuda", enabled=False):
    inv = torch.linalg.inv(cov.float())
```

## Fix safety
The fix follows the engine the project trains with (`engine`, default `auto`: read from the
linted files, see the README). Registrations must run before `amp.initialize`, so they are
written -- after the imports, with the project's own `amp` (`from apex import amp` in an apex
project, `from amplint import amp` in one on amplint) -- only into the file that calls
`amp.initialize`; that fix is `safe` (fp32 runs are unchanged). Anywhere else (a library model
file, a project on `torch.autocast` or with no engine found) the finding carries the lines to
add as a `display` fix naming the training script: no fix ever makes a model file import an
engine its project does not use. The custom-Function fix is `unsafe` (it changes the dtypes
the forward computes in); it adds `@amp.float_function` only in a project on that `amp`.
"""

    VALID = [
        # registered in the same file
        Valid("""
            import torch
            from torch import nn
            from amplint import amp
            amp.register_half_function(torch, 'einsum')
            class M(nn.Module):
                def forward(self, a, b):
                    return torch.einsum('ij,jk->ik', a, b)
            """),
        # not model code: a script's helper (a library file's public functions are, at info)
        Valid("""
            import torch
            def helper(a, b):
                return torch.einsum('ij,jk->ik', a, b)
            if __name__ == "__main__":
                print(helper(torch.eye(2), torch.eye(2)))
            """),
        # torch.autocast runs einsum in half
        Valid("""
            import torch
            from torch import nn
            class M(nn.Module):
                def forward(self, a, b):
                    return torch.einsum('ij,jk->ik', a, b)
            """,
              settings={"engine": "torch"}),
        # CPU autocast runs linalg.inv in fp32
        Valid("""
            import torch
            from torch import nn
            class M(nn.Module):
                def forward(self, c):
                    return torch.linalg.inv(c)
            """,
              settings={"engine": "torch", "device": "cpu"}),
        # explicitly fp32 argument
        Valid("""
            import torch
            from torch import nn
            class M(nn.Module):
                def forward(self, c):
                    return torch.linalg.inv(c.float())
            """),
        # autocast disabled around it
        Valid("""
            import torch
            from torch import nn
            class M(nn.Module):
                def forward(self, c):
                    with torch.autocast('cuda', enabled=False):
                        return torch.linalg.inv(c)
            """,
              settings={"engine": "torch"}),
        # covered by the policy (linalg.norm is fp32, linalg.matmul half)
        Valid("""
            import torch
            from torch import nn
            class M(nn.Module):
                def forward(self, c):
                    return torch.linalg.norm(torch.linalg.matmul(c, c))
            """),
        # a decorated helper casts its inputs
        Valid("""
            import torch
            from torch import nn
            from amplint import amp
            @amp.half_function
            def mix(a, b):
                return torch.einsum('ij,jk->ik', a, b)
            class M(nn.Module):
                def forward(self, a, b):
                    return mix(a, b)
            """),
        # custom Function with custom_fwd, torch policy
        Valid("""
            import torch
            from torch import nn
            class F(torch.autograd.Function):
                @staticmethod
                @torch.amp.custom_fwd(device_type='cuda', cast_inputs=torch.float32)
                def forward(ctx, x):
                    return x * 2
                @staticmethod
                @torch.amp.custom_bwd(device_type='cuda')
                def backward(ctx, g):
                    return g * 2
            class M(nn.Module):
                def forward(self, x):
                    return F.apply(x)
            """,
              settings={"engine": "torch"}),
        # built once in __init__ (before amp.initialize), in fp32
        Valid("""
            import torch
            from torch import nn
            class Pos(nn.Module):
                def __init__(self, n=8):
                    super().__init__()
                    self.register_buffer('table', self.build(n))
                def build(self, n):
                    t = torch.arange(n, dtype=torch.float32)
                    return torch.outer(t, t)
                def forward(self, x):
                    return x + self.table
            """),
        # autocast sees aten ops however they are called; relu is on no amplint list either
        Valid("""
            import torch
            class M(torch.nn.Module):
                def forward(self, a, b):
                    return torch.ops.aten.bmm.default(a, b)
            """, settings={"engine": "torch"}),
        Valid("""
            import torch
            class M(torch.nn.Module):
                def forward(self, a):
                    return torch.ops.aten.relu(a)
            """),
    ]
    INVALID = [
        Invalid("""
            import torch
            from torch import nn


            class M(nn.Module):
                def forward(self, a, b):
                    return torch.einsum('ibnd,jbnd->bnij', (a, b))
            """,
            line=7, count=1, message="einsum", severity="warning", expected_fix=None,
        ),
        # two ops, two calls each: one registration per op, in order of first use
        Invalid("""
            import torch
            import torch.nn as nn  # model
            from amplint import amp
            class M(nn.Module):
                def forward(self, a, b, c):
                    x = torch.linalg.inv(c) @ torch.linalg.inv(c.T)
                    return torch.einsum('ij,jk->ik', a, b) + torch.einsum('ij,jk->ik', b, a) + x
            model = amp.initialize(M(), opt_level="O1")
            """,
            line=6, count=4, message="no fp16", severity="error",
            expected_fix="""
                import torch
                import torch.nn as nn  # model
                from amplint import amp
                amp.register_float_function(torch.linalg, "inv")
                amp.register_half_function(torch, "einsum")
                class M(nn.Module):
                    def forward(self, a, b, c):
                        x = torch.linalg.inv(c) @ torch.linalg.inv(c.T)
                        return torch.einsum('ij,jk->ik', a, b) + torch.einsum('ij,jk->ik', b, a) + x
                model = amp.initialize(M(), opt_level="O1")
                """,
        ),
        # from torch import einsum: register on this module; a project on apex: apex's amp
        Invalid("""
            from torch import nn, einsum
            from apex import amp
            class M(nn.Module):
                def forward(self, a, b):
                    return einsum('ij,jk->ik', a, b)
            def main(model, optimizer):
                return amp.initialize(model, optimizer, opt_level="O1")
            """,
            line=5, message="sys.modules[__name__]", settings={"select": ("AMP401",)},
            expected_fix="""
                from torch import nn, einsum
                from apex import amp
                import sys
                amp.register_half_function(sys.modules[__name__], "einsum")
                class M(nn.Module):
                    def forward(self, a, b):
                        return einsum('ij,jk->ik', a, b)
                def main(model, optimizer):
                    return amp.initialize(model, optimizer, opt_level="O1")
                """,
        ),
        # `amp` is torch.amp here: the training script imports the engine under another name
        Invalid("""
            import torch
            from torch import amp, nn
            class M(nn.Module):
                def forward(self, c):
                    return c.inverse()
            amplint_amp = __import__("amplint.amp").amp
            model = amplint_amp.initialize(M(), opt_level="O1")
            """,
            message="inverse", settings={"engine": "amplint"},
            expected_fix="""
                import torch
                from torch import amp, nn
                from amplint import amp as amplint_amp
                amplint_amp.register_float_function(torch.Tensor, "inverse")
                class M(nn.Module):
                    def forward(self, c):
                        return c.inverse()
                amplint_amp = __import__("amplint.amp").amp
                model = amplint_amp.initialize(M(), opt_level="O1")
                """,
        ),
        # a model file of a project that names no engine: the lines are shown, not inserted
        Invalid("""
            import torch
            from torch import nn
            class M(nn.Module):
                def forward(self, c):
                    return torch.linalg.inv(c)
            """,
            message="[engine amplint (auto: no mixed-precision setup found", expected_fix=None,
        ),
        # torch policy on CUDA: linalg has no fix, the message shows the wrap
        Invalid("""
            import torch
            from torch import nn
            class M(nn.Module):
                def forward(self, x):
                    return torch.fft.rfft(x, dim=-1)
            """,
            line=5, message="torch.autocast(\"cuda\", enabled=False)", severity="warning",
            expected_fix=None, settings={"engine": "torch"},
        ),
        # registered as tensordot elsewhere does not cover einsum; tensordot is promote in amplint's O1
        Invalid("""
            import torch
            from torch import nn
            from amplint import amp
            amp.register_half_function(torch, 'einsum')
            class M(nn.Module):
                def forward(self, a, b):
                    return torch.tensordot(a, b, dims=1)
            amp.initialize(M())
            """,
            line=7, count=1,
            expected_fix="""
                import torch
                from torch import nn
                from amplint import amp
                amp.register_half_function(torch, 'einsum')
                amp.register_half_function(torch, "tensordot")
                class M(nn.Module):
                    def forward(self, a, b):
                        return torch.tensordot(a, b, dims=1)
                amp.initialize(M())
                """,
        ),
    ]

    INVALID = INVALID + [
        # O2: registrations do nothing (no patching); the message shows the fp32 call
        Invalid("""
            import torch
            class M(torch.nn.Module):
                def forward(self, a, c):
                    return torch.einsum('ij,jk->ik', a, a), torch.linalg.solve(a @ c, c, left=True)
            """,
            line=4, count=1, message="torch.linalg.solve((a @ c).float(), c, left=True)", expected_fix=None,
            settings={"opt_level": "O2"},
        ),
        # an extension built at import with cpp_extension.load, and an aten overload that
        # bypasses the engine's patched torch.bmm
        Invalid("""
            import torch
            from torch.utils.cpp_extension import load
            ext = load(name='fused', sources=['fused.cpp'])
            class M(torch.nn.Module):
                def forward(self, a, b):
                    return ext.fused_mm(a, torch.ops.aten.bmm.default(a, b))
            """,
            line=6, count=2, expected_fix=None,
        ),
    ]

    # --- project facts ---------------------------------------------------------------

    @classmethod
    def collect(cls, ctx):
        """Registrations in this file, and the modules it imports (which files its
        registrations reach): ``{"registrations": [[module, name, kind], ...],
        "imports": [dotted names]}``; None when the file registers nothing."""
        found = []
        for node in ctx.calls:
            if uncovered.last_name(node.func) in uncovered.REGISTER:
                reg = uncovered.registration(node, ctx)
                if reg is not None:
                    found.append(reg)
        if not found:
            return None
        imported = set()
        for node in ctx.import_nodes():
            if isinstance(node, ast.Import):
                imported.update(a.name for a in node.names)
            elif node.level == 0 and node.module:
                imported.add(node.module)
                imported.update(f"{node.module}.{a.name}" for a in node.names)
        return {"registrations": found, "imports": sorted(imported)}

    # --- per file --------------------------------------------------------------------

    def begin_file(self, ctx) -> uncovered.CallSurvey:
        return uncovered.CallSurvey()

    def visit_Call(self, node, ctx) -> None:
        ctx.state(self).add_call(node, ctx)

    def end_file(self, ctx) -> None:
        survey = ctx.state(self)
        survey.add_exports(ctx)
        if not survey.uses:
            return
        pending = uncovered.check_uses(ctx, survey, self._registered(ctx, survey))
        if not pending:
            return
        registration_fix = self._registration_fix(ctx, [p.registration for p in pending if p.registration is not None])
        uses_of: dict = {}  # a custom Function's class -> its `.apply` calls: one finding per class
        for p in pending:
            if p.at is not None:
                uses_of.setdefault(p.at, []).append(p)
                continue
            fix = registration_fix if p.registration is not None else p.fix
            ctx.report(self, p.node, p.message, fix=fix, severity=p.severity)
        for cls, uses in uses_of.items():
            name = ast.Name(id=cls.name, ctx=ast.Load(), lineno=cls.lineno, end_lineno=cls.lineno)
            name.col_offset = ctx.line_text(cls.lineno).index(cls.name, cls.col_offset)
            name.end_col_offset = name.col_offset + len(cls.name)
            ctx.report(self, name, uses[0].message, fix=uses[0].fix, severity=uses[0].severity,
                       related=[ctx.related(u.node, f"`{cls.name}` exported here" if isinstance(u.node, ast.Constant)
                                            else f"`{cls.name}.apply` called here") for u in uses])

    # --- what counts as covered ------------------------------------------------------

    def _registered(self, ctx, survey: uncovered.CallSurvey) -> set:
        regs = {(m, n) for m, n, _ in survey.registrations}
        if ctx.project is not None:
            for path, data in ctx.project.facts(self.code):
                if path == ctx.path or not registration_reaches(path, data.get("imports", ()), ctx.path, ctx.settings.root):
                    continue
                for m, n, _ in data["registrations"]:
                    if m.startswith("@"):
                        continue  # sys.modules[__name__] / a class there registers that file
                    regs.add((m, n))
        return regs

    # --- the registration fix --------------------------------------------------------

    def _registration_fix(self, ctx, wanted: list[uncovered.Registration]) -> Optional[Fix]:
        return fixes.registration_fix(ctx, wanted, uncovered.SELF_MODULE, uncovered.after_registrations)
