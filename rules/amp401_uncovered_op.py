"""AMP401 uncovered-op: ops the mixed-precision policy does not cover, and their registration."""
from __future__ import annotations

import ast
import os
from typing import Optional

from amplint.analysis import ops
from amplint.imports import registration_reaches
from amplint.rule import Edit, Fix, Invalid, Rule, Severity, Valid

_REGISTER = ops.REGISTER_FUNCTIONS
_DECORATORS = ops.DECORATORS
#: last names of calls worth a look (cheap string test before any resolution)
_OP_NAMES = frozenset((
    "einsum", "tensordot", "outer", "ger", "inner", "kron", "contract", "cdist", "pdist", "stft",
    "istft", "inverse", "det", "logdet", "slogdet", "svd", "svd_lowrank", "pca_lowrank", "cholesky",
    "cholesky_solve", "cholesky_inverse", "qr", "lu", "lu_solve", "lu_unpack", "pinverse",
    "triangular_solve", "geqrf", "orgqr", "ormqr", "lstsq", "eig", "symeig", "lobpcg",
    # torch.linalg
    "cholesky_ex", "cond", "eigh", "eigvals", "eigvalsh", "householder_product", "inv", "inv_ex",
    "ldl_factor", "ldl_factor_ex", "ldl_solve", "lu_factor", "lu_factor_ex", "matrix_rank", "pinv",
    "solve", "solve_ex", "solve_triangular", "svdvals", "tensorinv", "tensorsolve", "vander",
    # torch.fft
    "fft", "ifft", "fft2", "ifft2", "fftn", "ifftn", "rfft", "irfft", "rfft2", "irfft2", "rfftn",
    "irfftn", "hfft", "ihfft", "hfft2", "ihfft2", "hfftn", "ihfftn",
    # GEMMs autocast runs in half (einsum is the one the amplint policy leaves out)
    "matmul", "mm", "bmm", "addmm", "baddbmm", "addbmm", "chain_matmul", "multi_dot", "vecdot",
))
_METHOD_OPS = frozenset(("inverse", "det", "logdet", "slogdet", "cholesky", "pinverse",
                         "cholesky_inverse", "svd"))
#: module names of compiled extensions (``fused_layer_norm_cuda``, ``selective_scan_cuda``,
#: ``amp_C``, ``_C``, ``flash_attn_2_cuda``, ``my_ext``)
_EXT_SUFFIXES = ("_cuda", "_C", "_ext", "_cpp")
_CPP_LOADERS = ("torch.utils.cpp_extension.load", "torch.utils.cpp_extension.load_inline")
_AUTOGRAD_FUNCTION = ("torch.autograd.Function", "torch.autograd.function.Function")
_CUSTOM_FWD = ("torch.amp.custom_fwd", "torch.cuda.amp.custom_fwd", "torch.amp.autocast_mode.custom_fwd")
_CUSTOM_BWD = ("torch.amp.custom_bwd", "torch.cuda.amp.custom_bwd", "torch.amp.autocast_mode.custom_bwd")
_AUTOCAST = ("torch.autocast", "torch.amp.autocast", "torch.cuda.amp.autocast", "torch.cpu.amp.autocast",
             "torch.amp.autocast_mode.autocast")
_FLOAT_CASTS = ("float", "double")
_SELF_MODULE = "sys.modules[__name__]"
_INIT_PREFIXES = ("_init", "init_", "reset_parameters", "_reset_parameters")


def _last_name(func: ast.AST) -> Optional[str]:
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None


def _is_self_module(expr: ast.AST) -> bool:
    """``sys.modules[__name__]``"""
    return (
        isinstance(expr, ast.Subscript)
        and isinstance(expr.slice, ast.Name) and expr.slice.id == "__name__"
        and isinstance(expr.value, ast.Attribute) and expr.value.attr == "modules"
        and isinstance(expr.value.value, ast.Name) and expr.value.value.id == "sys"
    )


def _floated(ctx, expr: ast.AST) -> str:
    text = ctx.segment(expr)
    if isinstance(expr, (ast.Name, ast.Attribute, ast.Call, ast.Subscript)):
        return text + ".float()"
    return f"({text}).float()"


def _stem(path: str) -> str:
    return os.path.splitext(os.path.basename(path))[0]


def _registration(call: ast.Call, ctx) -> Optional[list]:
    """``[module, name, kind]`` for ``amp.register_half_function(torch, "einsum")``.
    ``module`` is the module's qualified name, ``@<path>`` for ``sys.modules[__name__]``."""
    kind = _REGISTER.get(_last_name(call.func) or "")
    if kind is None:
        return None
    args = list(call.args)
    keywords = {k.arg: k.value for k in call.keywords if k.arg}
    module = args[0] if args else keywords.get("module")
    name = args[1] if len(args) > 1 else keywords.get("name")
    if module is None or not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
        return None
    if _is_self_module(module):
        ref = "@" + ctx.path
    else:
        ref = ctx.qualname(module) or ctx.segment(module)
        if isinstance(module, ast.Name) and module.id in ctx.classes:  # (MyFunction, "apply")
            ref = f"@{ctx.path}:{module.id}"
    return [ref, name.value, kind]


class UncoveredOp(Rule):
    code = "AMP401"
    name = "uncovered-op"
    summary = "Op the mixed-precision policy does not cover: register it (einsum -> half, linalg/fft -> fp32)"
    severity = Severity.WARNING
    fix_applicability = "safe"
    markers = ("einsum", "linalg", "fft", "inverse", "det", "svd", "cholesky", "qr", "pinv", "tensordot",
               "outer", "ger", "inner", "kron", "contract", "stft", "Function", "ops.", "cdist", "pdist",
               "lstsq", "eig", "solve", "_cuda", "_C", "_ext", "_cpp", "cpp_extension")
    collect_markers = tuple(_REGISTER)
    docs = """
## What it does
Flags calls in model code (an `nn.Module`'s methods and the functions they call in the file) to
precision-relevant ops that the selected mixed-precision policy (`[tool.amplint] engine`) does
not cover and that no linted file registers:

- GEMM-like ops the `amplint` engine's O1 does not run in half: `torch.einsum` (also `from torch
  import einsum`, and the tuple form `torch.einsum("...", (a, b))`), `torch.tensordot`,
  `opt_einsum.contract`, `torch.outer`/`ger`/`inner`/`kron`;
- ops with no fp16/bf16 kernel, under either policy where it leaves them uncovered:
  `torch.linalg.inv`/`solve`/`cholesky`/`eigh`/`svd`/`det`/`slogdet`/`qr`/`lstsq`/`pinv`...,
  `torch.inverse`/`det`/`logdet`/`svd`/`cholesky`/`pinverse` (also as tensor methods,
  `cov.inverse()`), `torch.cdist`/`pdist`, and `torch.fft.*` / `torch.stft`;
- `.apply` of a custom `torch.autograd.Function` (defined in the file) whose `forward` has
  neither `@torch.amp.custom_fwd` nor an `@amp.*_function` decorator;
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
`amp.initialize`) is not flagged.

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
  expected scalar type Half but found Float` (apex #895), and with only fp32 inputs it runs in
  fp32: no Tensor Cores. XLNet-style relative attention is einsums end to end; registering
  einsum as half gave ~20-25% higher XLNet fine-tuning throughput (transformers PR #1513).
  Measured on an H200 (torch 2.11, TF32 off): XLNet-style projections `einsum("ibh,hnd->ibnd")`
  at 512x8 tokens, d=1024: 0.175 ms in fp32, 0.028 ms in fp16 (6.2x); a training step of three
  such einsums (32768 tokens) under `amplint.amp` O1: 11.1 ms unregistered (fp32), 2.2-2.7 ms
  after the fix (fp16), 2.2 ms under `torch.autocast`. Whole-model scale: GPT-2-small step
  158.5 ms fp32 vs 25.7 ms fp16 autocast (`fp16-facts.md`).
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

The registration fix is `safe`: it only changes what happens under the engine's O1 (fp32 runs are
unchanged). Registrations must run before `amp.initialize`; the fix puts them right after the
file's imports, which run when the model is imported. The custom-Function fix is `unsafe`: it
changes the dtypes the forward computes in.

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
"""

    VALID = [
        # registered in the same file
        Valid("import torch\nfrom torch import nn\nfrom amplint import amp\n"
              "amp.register_half_function(torch, 'einsum')\n"
              "class M(nn.Module):\n    def forward(self, a, b):\n        return torch.einsum('ij,jk->ik', a, b)\n"),
        # not model code
        Valid("import torch\ndef helper(a, b):\n    return torch.einsum('ij,jk->ik', a, b)\n"),
        # torch.autocast runs einsum in half
        Valid("import torch\nfrom torch import nn\n"
              "class M(nn.Module):\n    def forward(self, a, b):\n        return torch.einsum('ij,jk->ik', a, b)\n",
              settings={"engine": "torch"}),
        # CPU autocast runs linalg.inv in fp32
        Valid("import torch\nfrom torch import nn\n"
              "class M(nn.Module):\n    def forward(self, c):\n        return torch.linalg.inv(c)\n",
              settings={"engine": "torch", "device": "cpu"}),
        # explicitly fp32 argument
        Valid("import torch\nfrom torch import nn\n"
              "class M(nn.Module):\n    def forward(self, c):\n        return torch.linalg.inv(c.float())\n"),
        # autocast disabled around it
        Valid("import torch\nfrom torch import nn\n"
              "class M(nn.Module):\n    def forward(self, c):\n"
              "        with torch.autocast('cuda', enabled=False):\n            return torch.linalg.inv(c)\n",
              settings={"engine": "torch"}),
        # covered by the policy (linalg.norm is fp32, linalg.matmul half)
        Valid("import torch\nfrom torch import nn\n"
              "class M(nn.Module):\n    def forward(self, c):\n        return torch.linalg.norm(torch.linalg.matmul(c, c))\n"),
        # a decorated helper casts its inputs
        Valid("import torch\nfrom torch import nn\nfrom amplint import amp\n"
              "@amp.half_function\ndef mix(a, b):\n    return torch.einsum('ij,jk->ik', a, b)\n"
              "class M(nn.Module):\n    def forward(self, a, b):\n        return mix(a, b)\n"),
        # custom Function with custom_fwd, torch policy
        Valid("import torch\nfrom torch import nn\n"
              "class F(torch.autograd.Function):\n    @staticmethod\n"
              "    @torch.amp.custom_fwd(device_type='cuda', cast_inputs=torch.float32)\n"
              "    def forward(ctx, x):\n        return x * 2\n"
              "    @staticmethod\n    @torch.amp.custom_bwd(device_type='cuda')\n"
              "    def backward(ctx, g):\n        return g * 2\n"
              "class M(nn.Module):\n    def forward(self, x):\n        return F.apply(x)\n",
              settings={"engine": "torch"}),
        # built once in __init__ (before amp.initialize), in fp32
        Valid("import torch\nfrom torch import nn\n"
              "class Pos(nn.Module):\n    def __init__(self, n=8):\n        super().__init__()\n"
              "        self.register_buffer('table', self.build(n))\n"
              "    def build(self, n):\n        t = torch.arange(n, dtype=torch.float32)\n"
              "        return torch.outer(t, t)\n"
              "    def forward(self, x):\n        return x + self.table\n"),
        # autocast sees aten ops however they are called; relu is on no amplint list either
        Valid("import torch\nclass M(torch.nn.Module):\n    def forward(self, a, b):\n"
              "        return torch.ops.aten.bmm.default(a, b)\n", settings={"engine": "torch"}),
        Valid("import torch\nclass M(torch.nn.Module):\n    def forward(self, a):\n"
              "        return torch.ops.aten.relu(a)\n"),
        # O0 is fp32; at O2/O3 the model is half, so einsum already runs in half
        Valid("import torch\nclass M(torch.nn.Module):\n    def forward(self, a, c):\n"
              "        return torch.einsum('ij,jk->ik', a, a), torch.linalg.inv(c)\n", settings={"opt_level": "O0"}),
        Valid("import torch\nclass M(torch.nn.Module):\n    def forward(self, a):\n"
              "        return torch.einsum('ij,jk->ik', a, a)\n", settings={"opt_level": "O2"}),
        # a local variable named like an op is not an op
        Valid("import torch\nfrom torch import nn\n"
              "class M(nn.Module):\n    def forward(self, x, einsum):\n        return einsum(x)\n"),
    ]
    INVALID = [
        Invalid(
            "import torch\nfrom torch import nn\n\n\nclass M(nn.Module):\n"
            "    def forward(self, a, b):\n        return torch.einsum('ibnd,jbnd->bnij', (a, b))\n",
            line=7, count=1, message="einsum", severity="warning",
            expected_fix="import torch\nfrom torch import nn\nfrom amplint import amp\n"
                         "amp.register_half_function(torch, \"einsum\")\n\n\nclass M(nn.Module):\n"
                         "    def forward(self, a, b):\n        return torch.einsum('ibnd,jbnd->bnij', (a, b))\n",
        ),
        # two ops, two calls each: one registration per op, in order of first use
        Invalid(
            "import torch\nimport torch.nn as nn  # model\nclass M(nn.Module):\n    def forward(self, a, b, c):\n"
            "        x = torch.linalg.inv(c) @ torch.linalg.inv(c.T)\n"
            "        return torch.einsum('ij,jk->ik', a, b) + torch.einsum('ij,jk->ik', b, a) + x\n",
            line=5, count=4, message="no fp16", severity="error",
            expected_fix="import torch\nimport torch.nn as nn  # model\nfrom amplint import amp\n"
                         "amp.register_float_function(torch.linalg, \"inv\")\n"
                         "amp.register_half_function(torch, \"einsum\")\n"
                         "class M(nn.Module):\n    def forward(self, a, b, c):\n"
                         "        x = torch.linalg.inv(c) @ torch.linalg.inv(c.T)\n"
                         "        return torch.einsum('ij,jk->ik', a, b) + torch.einsum('ij,jk->ik', b, a) + x\n",
        ),
        # from torch import einsum: register on this module
        Invalid(
            "from torch import nn, einsum\nclass M(nn.Module):\n    def forward(self, a, b):\n"
            "        return einsum('ij,jk->ik', a, b)\n",
            line=4, message="sys.modules[__name__]",
            expected_fix="from torch import nn, einsum\nimport sys\nfrom amplint import amp\n"
                         "amp.register_half_function(sys.modules[__name__], \"einsum\")\n"
                         "class M(nn.Module):\n    def forward(self, a, b):\n"
                         "        return einsum('ij,jk->ik', a, b)\n",
        ),
        # `amp` is torch.amp here: import the engine under another name
        Invalid(
            "import torch\nfrom torch import amp, nn\nclass M(nn.Module):\n    def forward(self, c):\n"
            "        return c.inverse()\n",
            message="inverse",
            expected_fix="import torch\nfrom torch import amp, nn\nfrom amplint import amp as amplint_amp\n"
                         "amplint_amp.register_float_function(torch.Tensor, \"inverse\")\n"
                         "class M(nn.Module):\n    def forward(self, c):\n        return c.inverse()\n",
        ),
        # torch policy on CUDA: linalg has no fix, the message shows the wrap
        Invalid(
            "import torch\nfrom torch import nn\nclass M(nn.Module):\n    def forward(self, x):\n"
            "        return torch.fft.rfft(x, dim=-1)\n",
            line=5, message="torch.autocast(\"cuda\", enabled=False)", severity="warning",
            expected_fix=None, settings={"engine": "torch"},
        ),
        # registered as tensordot elsewhere does not cover einsum; tensordot is promote in amplint's O1
        Invalid(
            "import torch\nfrom torch import nn\nfrom amplint import amp\namp.register_half_function(torch, 'einsum')\n"
            "class M(nn.Module):\n    def forward(self, a, b):\n        return torch.tensordot(a, b, dims=1)\n",
            line=7, count=1,
            expected_fix="import torch\nfrom torch import nn\nfrom amplint import amp\n"
                         "amp.register_half_function(torch, 'einsum')\n"
                         "amp.register_half_function(torch, \"tensordot\")\n"
                         "class M(nn.Module):\n    def forward(self, a, b):\n        return torch.tensordot(a, b, dims=1)\n",
        ),
        # custom autograd Function (torch policy): custom_fwd / custom_bwd, unsafe
        Invalid(
            "import torch\nfrom torch import nn\n\n\nclass Scale(torch.autograd.Function):\n"
            "    @staticmethod\n    def forward(ctx, x):\n        return x * 2\n\n"
            "    @staticmethod\n    def backward(ctx, g):\n        return g * 2\n\n\n"
            "class M(nn.Module):\n    def forward(self, x):\n        return Scale.apply(x)\n",
            line=17, message="custom_fwd", settings={"engine": "torch"},
            expected_fix="import torch\nfrom torch import nn\n\n\nclass Scale(torch.autograd.Function):\n"
                         "    @staticmethod\n"
                         "    @torch.amp.custom_fwd(device_type=\"cuda\", cast_inputs=torch.float32)\n"
                         "    def forward(ctx, x):\n        return x * 2\n\n"
                         "    @staticmethod\n    @torch.amp.custom_bwd(device_type=\"cuda\")\n"
                         "    def backward(ctx, g):\n        return g * 2\n\n\n"
                         "class M(nn.Module):\n    def forward(self, x):\n        return Scale.apply(x)\n",
        ),
        # custom autograd Function (amplint policy): also @amp.float_function (custom_fwd is autocast-only)
        Invalid(
            "import torch\nfrom torch import nn\nfrom torch.autograd import Function\n"
            "class Scale(Function):\n    @staticmethod\n    def forward(ctx, x):\n        return x * 2\n"
            "    @staticmethod\n    def backward(ctx, g):\n        return g * 2\n"
            "class M(nn.Module):\n    def forward(self, x):\n        return Scale.apply(x)\n",
            line=13, settings={"device": "cpu"},
            expected_fix="import torch\nfrom torch import nn\nfrom torch.autograd import Function\n"
                         "from amplint import amp\n"
                         "class Scale(Function):\n    @staticmethod\n"
                         "    @torch.amp.custom_fwd(device_type=\"cpu\", cast_inputs=torch.float32)\n"
                         "    @amp.float_function\n"
                         "    def forward(ctx, x):\n        return x * 2\n"
                         "    @staticmethod\n    @torch.amp.custom_bwd(device_type=\"cpu\")\n"
                         "    def backward(ctx, g):\n        return g * 2\n"
                         "class M(nn.Module):\n    def forward(self, x):\n        return Scale.apply(x)\n",
        ),
        # compiled extension and torch.ops custom op: reported, no fix
        Invalid(
            "import torch\nimport fused_dense_cuda\nclass M(torch.nn.Module):\n    def forward(self, x, w):\n"
            "        y = fused_dense_cuda.forward(x, w)\n        return torch.ops.mylib.gelu_fast(y)\n",
            line=5, count=2, message="compiled extension", expected_fix=None,
        ),
    ]

    INVALID = INVALID + [
        # O2: registrations do nothing (no patching); the message shows the fp32 call
        Invalid(
            "import torch\nclass M(torch.nn.Module):\n    def forward(self, a, c):\n"
            "        return torch.einsum('ij,jk->ik', a, a), torch.linalg.solve(a @ c, c, left=True)\n",
            line=4, count=1, message="torch.linalg.solve((a @ c).float(), c, left=True)", expected_fix=None,
            settings={"opt_level": "O2"},
        ),
        # an extension built at import with cpp_extension.load, and an aten overload that
        # bypasses the engine's patched torch.bmm
        Invalid(
            "import torch\nfrom torch.utils.cpp_extension import load\n"
            "ext = load(name='fused', sources=['fused.cpp'])\n"
            "class M(torch.nn.Module):\n    def forward(self, a, b):\n"
            "        return ext.fused_mm(a, torch.ops.aten.bmm.default(a, b))\n",
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
            if _last_name(node.func) in _REGISTER:
                reg = _registration(node, ctx)
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

    def begin_file(self, ctx) -> None:
        self._uses: list[tuple] = []  # (node, kind-of-use, qualname, family, module-ref, name)
        self._regs: list[list] = []
        self._functions: Optional[dict] = None
        self._ext: Optional[set] = None
        self._names: Optional[set] = None

    def visit_Call(self, node: ast.Call, ctx) -> None:
        func = node.func
        last = _last_name(func)
        if last is None:
            return
        if last in _REGISTER:
            reg = _registration(node, ctx)
            if reg is not None:
                self._regs.append(reg)
            return
        if last == "apply" and isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            if func.value.id in self._function_classes(ctx):
                self._uses.append((node, "function", func.value.id, None, None, None))
            return
        if isinstance(func, ast.Attribute) and isinstance(func.value, (ast.Name, ast.Attribute)):
            root = func.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in self._extensions(ctx):
                self._uses.append((node, "extension", root.id, None, None, None))
                return
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Attribute):
            # torch.ops.<ns>.<op>(...) and torch.ops.<ns>.<op>.<overload>(...)
            ns = func.value.value
            if isinstance(ns, ast.Attribute) and (ns.attr == "ops" or (
                    isinstance(ns.value, ast.Attribute) and ns.value.attr == "ops")):
                qualname = ctx.qualname(func)
                if qualname and qualname.startswith("torch.ops.") and qualname.count(".") >= 3:
                    self._uses.append((node, "torch.ops", qualname, None, None, None))
                return
        if last in _OP_NAMES:
            qualname = ctx.qualname(func)
            if qualname is not None:
                fam = ops.family(qualname)
                if fam is not None:
                    module = ctx.qualname(func.value) if isinstance(func, ast.Attribute) else None
                    self._uses.append((node, "op", qualname, fam, module, last))
            elif last in _METHOD_OPS and isinstance(func, ast.Attribute) and not node.args:
                if not (isinstance(func.value, ast.Name) and func.value.id in ("self", "cls", "super")):
                    self._uses.append((node, "op", "torch.Tensor." + last, ops.FP32_ONLY, "torch.Tensor", last))
            return

    def end_file(self, ctx) -> None:
        if not self._uses or ctx.settings.opt_level == "O0":
            return  # O0 is fp32 throughout
        engine = ctx.settings.engine
        registered = self._registered(ctx)
        pending = []  # (node, message, severity, registration or None, fix or None)
        for node, what, qualname, fam, module, name in self._uses:
            if not self._runs_in_training(ctx, node):
                continue
            if what == "op":
                item = self._check_op(ctx, node, qualname, fam, module, name, engine, registered)
            elif what == "function":
                item = self._check_function(ctx, node, qualname, engine, registered)
            else:
                item = self._check_opaque(ctx, node, what, qualname, engine)
            if item is not None:
                pending.append(item)
        if not pending:
            return
        registration_fix = self._registration_fix(ctx, [p[3] for p in pending if p[3] is not None])
        for node, message, severity, reg, fix in pending:
            if reg is not None:
                fix = registration_fix
            ctx.report(self, node, message, fix=fix, severity=severity)

    @staticmethod
    def _runs_in_training(ctx, node) -> bool:
        """Model code that runs after ``amp.initialize``: ``forward`` and what it calls, or
        another method of a module class -- not ``__init__`` / weight initialisation and
        the helpers only ``__init__`` calls (a sinusoid table built once in fp32)."""
        if ctx.in_forward(node):
            return True
        if not ctx.in_model_code(node):
            return False
        cls, method = ctx.enclosing_method(node)
        if method is None:
            return True
        if method.name == "__init__" or method.name.startswith(_INIT_PREFIXES):
            return False
        init = ctx.method(cls, "__init__")
        if init is not None:
            for sub in ast.walk(init):
                if (isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute)
                        and sub.func.attr == method.name and isinstance(sub.func.value, ast.Name)
                        and sub.func.value.id == "self"):
                    return False
        return True

    # --- what counts as covered ------------------------------------------------------

    def _registered(self, ctx) -> set:
        regs = {(m, n) for m, n, _ in self._regs}
        if ctx.project is not None:
            for path, data in ctx.project.facts(self.code):
                if path == ctx.path or not registration_reaches(path, data.get("imports", ()), ctx.path, ctx.settings.root):
                    continue
                for m, n, _ in data["registrations"]:
                    if m.startswith("@"):
                        continue  # sys.modules[__name__] / a class there registers that file
                    regs.add((m, n))
        return regs

    def _self_registered(self, ctx, name: str, registered: set) -> bool:
        """``name`` registered on this file's module (``sys.modules[__name__]`` here, or
        ``import pkg.model; amp.register_half_function(pkg.model, name)`` elsewhere)."""
        stem = _stem(ctx.path)
        for m, n in registered:
            if n != name:
                continue
            if m == "@" + ctx.path or (not m.startswith("@") and m.rsplit(".", 1)[-1] == stem):
                return True
        return False

    def _check_op(self, ctx, node, qualname, fam, module, name, engine, registered):
        if fam == ops.GEMM and ctx.settings.opt_level in ("O2", "O3"):
            return None  # the whole model is half: einsum already runs in half
        on = ops.uncovered_on(qualname, fam, engine, ctx.settings.device)
        if not on:
            return None
        func = node.func
        by_name = isinstance(func, ast.Name)
        if by_name:
            if self._self_registered(ctx, name, registered):
                return None
        elif (module, name) in registered:
            return None
        if self._in_cast_region(ctx, node, fam, engine):
            return None
        if fam != ops.GEMM and (self._args_fp32(node) or self._args_weights(ctx, node)):
            return None
        short = qualname[len("torch."):] if qualname.startswith("torch.") else qualname
        shown = ctx.segment(func)
        kind = ops.register_kind(fam)
        if fam == ops.GEMM:
            cast = ops.cast(qualname, engine, "cuda")
            how = ("runs in its inputs' dtype under O1" if cast is None else
                   f"is a {cast} op under O1 (fp32 when a weight is involved)")
            message = (f"`{shown}` {how}: fp32 without Tensor Cores, or `RuntimeError: expected scalar "
                       f"type ...` on mixed fp16/fp32 inputs (apex #895); register it to run in half")
            severity = Severity.WARNING if short not in ("outer", "ger", "inner", "kron") else Severity.INFO
        else:
            problem = ("has no fp16/bf16 kernel (raises on half input)" if fam == ops.FP32_ONLY else
                       "runs in half only for power-of-two sizes on CUDA, not at all on CPU")
            where = "amplint's O1" if engine == "amplint" else "torch.autocast on " + "/".join(on)
            message = f"`{shown}` {problem}, and {where} does not cast it to fp32"
            severity = Severity.ERROR if fam == ops.FP32_ONLY else Severity.WARNING
        parts = [_floated(ctx, a) for a in node.args[:1]] + [ctx.segment(a) for a in node.args[1:]]
        parts += [f"{k.arg}={ctx.segment(k.value)}" if k.arg else f"**{ctx.segment(k.value)}" for k in node.keywords]
        call = f"{shown}({', '.join(parts)})"
        if engine == "torch":
            wrap = f"with {self._torch_alias(ctx) or 'torch'}.autocast(\"{on[0]}\", enabled=False): {call}"
            message += f"; run it in fp32: `{wrap}`"
            return node, message, severity, None, Fix((), "display", f"Wrap in fp32: `{wrap}`")
        if ctx.settings.opt_level in ("O2", "O3"):
            # no function is patched at O2/O3: registrations do nothing, the model is half
            message = (f"`{shown}` {problem} and the model runs in half at {ctx.settings.opt_level} "
                       f"(no function is cast there); call it on fp32 input: `{call}`")
            return node, message, severity, None, Fix((), "display", f"Run it on fp32 input: `{call}`")
        if by_name:
            if name not in self._module_level_names(ctx):
                return node, message + " (not imported unconditionally at module level: no automatic fix)", severity, None, None
            message += (f"; `{name}` was imported by name, so a registration on `torch` does not reach it: "
                        f"register it on this module (`{_SELF_MODULE}`)")
            return node, message, severity, (_SELF_MODULE, "@" + ctx.path, name, kind), None
        if qualname.startswith("torch.Tensor."):  # a method: register on torch.Tensor
            torch_name = self._torch_alias(ctx)
            if torch_name is None:
                return node, message, severity, None, None
            return node, message, severity, (f"{torch_name}.Tensor", module, name, kind), None
        if not self._bound_at_module_level(ctx, func.value):
            return node, message, severity, None, None
        return node, message, severity, (ctx.segment(func.value), module, name, kind), None

    def _in_cast_region(self, ctx, node, fam, engine) -> bool:
        """Inside a function decorated with ``@amp.*_function``, a custom Function forward
        with ``custom_fwd(cast_inputs=...)``, or (fp32-only ops) autocast disabled."""
        for anc in ctx.ancestors(node):
            if isinstance(anc, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for dec in anc.decorator_list:
                    target = dec.func if isinstance(dec, ast.Call) else dec
                    qn = ctx.qualname(target) or ""
                    last = _last_name(target)
                    if last in _DECORATORS and (qn.startswith(ops.AMP_MODULES) or qn == ""):
                        return True
                    if qn in _CUSTOM_FWD and isinstance(dec, ast.Call) and any(k.arg == "cast_inputs" for k in dec.keywords):
                        if engine == "torch":
                            return True
            elif isinstance(anc, (ast.With, ast.AsyncWith)) and fam != ops.GEMM:
                for item in anc.items:
                    expr = item.context_expr
                    if not isinstance(expr, ast.Call):
                        continue
                    qn = ctx.qualname(expr.func) or ""
                    if qn in _AUTOCAST and any(
                        k.arg == "enabled" and isinstance(k.value, ast.Constant) and k.value.value is False
                        for k in expr.keywords
                    ):
                        return True
                    if _last_name(expr.func) == "disable_casts" and engine == "amplint":
                        return True
        return False

    @staticmethod
    def _args_fp32(call: ast.Call) -> bool:
        """Every positional argument is ``x.float()`` / ``x.double()`` / ``x.to(torch.float32)``."""
        if not call.args:
            return False
        tensors = call.args[:1] if len(call.args) == 1 else call.args
        for arg in tensors:
            if isinstance(arg, ast.Call) and isinstance(arg.func, ast.Attribute):
                if arg.func.attr in _FLOAT_CASTS and not arg.args:
                    continue
                if arg.func.attr == "to" and any(
                    isinstance(a, ast.Attribute) and a.attr in ("float32", "float64", "float", "double")
                    for a in list(arg.args) + [k.value for k in arg.keywords]
                ):
                    continue
            if isinstance(arg, (ast.Constant, ast.List, ast.Tuple)) and tensors is not call.args[:1]:
                continue
            return False
        return True

    @staticmethod
    def _args_weights(ctx, call: ast.Call) -> bool:
        """Every tensor argument is ``self.<attr>`` (a parameter or buffer): fp32 under O0/O1
        and autocast, whatever the policy (not under O2/O3, where the model is half)."""
        if ctx.settings.opt_level not in ("O0", "O1"):
            return False
        func = call.func
        args = list(call.args)
        if isinstance(func, ast.Attribute) and ctx.qualname(func) is None:
            args.insert(0, func.value)  # a method: the receiver is the tensor
        return bool(args) and all(
            isinstance(a, ast.Attribute) and isinstance(a.value, ast.Name) and a.value.id == "self"
            or isinstance(a, ast.Constant)
            for a in args
        )

    # --- custom autograd Functions, torch.ops, extensions ----------------------------

    def _function_classes(self, ctx) -> dict:
        if self._functions is None:
            found = {}
            for cls in ctx.classes.values():
                for base in cls.bases:
                    if (ctx.qualname(base) or "") in _AUTOGRAD_FUNCTION:
                        found[cls.name] = cls
            self._functions = found
        return self._functions

    def _check_function(self, ctx, node, cls_name, engine, registered):
        cls = self._functions[cls_name]
        forward = ctx.method(cls, "forward")
        backward = ctx.method(cls, "backward")
        if forward is None:
            return None
        decorators = {}
        for dec in forward.decorator_list:
            target = dec.func if isinstance(dec, ast.Call) else dec
            qn = ctx.qualname(target) or ""
            if qn in _CUSTOM_FWD:
                decorators["custom_fwd"] = dec
            elif _last_name(target) in _DECORATORS:
                decorators["amp"] = dec
        bwd_decorated = backward is not None and any(
            (ctx.qualname(d.func if isinstance(d, ast.Call) else d) or "") in _CUSTOM_BWD for d in backward.decorator_list)
        # custom_fwd counts under both policies (issue 6); amplint.amp does not honour it yet
        # (it is autocast-only), so the amplint fix also adds @amp.float_function
        if "custom_fwd" in decorators or "amp" in decorators:
            return None
        if (f"@{ctx.path}:{cls_name}", "apply") in registered:
            return None
        device = "cpu" if ctx.settings.device == "cpu" else "cuda"
        if engine == "amplint":
            message = (f"`{cls_name}.apply`: a custom autograd Function is on no O1 list: its forward gets "
                       f"fp16 or mixed inputs; decorate `forward` with `@amp.float_function` (and "
                       f"`@torch.amp.custom_fwd(device_type=\"{device}\", cast_inputs=torch.float32)` for autocast)")
        else:
            message = (f"`{cls_name}.apply`: the custom autograd Function's forward lacks "
                       f"`@torch.amp.custom_fwd(device_type=\"{device}\", cast_inputs=torch.float32)`: it gets fp16 "
                       f"inputs under autocast and its backward runs outside autocast")
        torch_name = self._torch_alias(ctx)
        edits = []
        forward_text = ""
        if torch_name is not None and "custom_fwd" not in decorators:
            forward_text += (f"@{torch_name}.amp.custom_fwd(device_type=\"{device}\", "
                             f"cast_inputs={torch_name}.float32)\n{ctx.indentation(forward)}")
        if engine == "amplint":
            amp_name, import_line = self._amp_alias(ctx)
            anchor = self._import_anchor(ctx)
            if anchor is not None or not import_line:
                # closest to `def`: under O1 it casts to fp32; under autocast custom_fwd already did
                forward_text += f"@{amp_name}.float_function\n{ctx.indentation(forward)}"
                if import_line:
                    edits.append(self._insert_after(ctx, anchor, import_line))
        if forward_text:
            edits.append(Edit.insert_at(forward.lineno, forward.col_offset, forward_text))
        if torch_name is not None and backward is not None and not bwd_decorated:
            text = f"@{torch_name}.amp.custom_bwd(device_type=\"{device}\")\n{ctx.indentation(backward)}"
            edits.append(Edit.insert_at(backward.lineno, backward.col_offset, text))
        if engine == "amplint" and ctx.settings.opt_level in ("O2", "O3"):
            edits = []  # the model is half and nothing is patched: cast inside forward by hand
            message = (f"`{cls_name}.apply`: the custom autograd Function gets half inputs at "
                       f"{ctx.settings.opt_level}; cast them to fp32 inside `forward` if its kernel needs fp32")
        fix = Fix(edits, "unsafe", "Run the Function's forward in fp32 (custom_fwd / custom_bwd)") if edits else None
        return node, message, Severity.WARNING, None, fix

    def _extensions(self, ctx) -> set:
        if self._ext is None:
            found = set()
            for local, target in ctx.imports.items():
                last = target.rsplit(".", 1)[-1]
                if last.endswith(_EXT_SUFFIXES) and not target.startswith("torch"):
                    found.add(local)
            for node in ctx.import_nodes():  # `from . import _C`, `from ._ext import fused`
                if isinstance(node, ast.ImportFrom) and node.level:
                    module_is_ext = (node.module or "").rsplit(".", 1)[-1].endswith(_EXT_SUFFIXES)
                    for alias in node.names:
                        if module_is_ext or alias.name.endswith(_EXT_SUFFIXES):
                            found.add(alias.asname or alias.name)
            for stmt in ctx.tree.body:
                if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call):
                    if (ctx.qualname(stmt.value.func) or "") in _CPP_LOADERS:
                        found.update(t.id for t in stmt.targets if isinstance(t, ast.Name))
            self._ext = found
        return self._ext

    def _check_opaque(self, ctx, node, what, qualname, engine):
        if ctx.enclosing_class(node) is not None and ctx.enclosing_class(node).name in self._function_classes(ctx):
            return None  # inside a custom Function: its `.apply` is what gets reported
        if what == "torch.ops":
            ns = qualname.split(".")[2]
            if ns in ("aten", "prims") and engine == "torch":
                return None  # autocast sees aten ops however they are called
            if ns == "torchvision" and engine == "torch":
                return None  # torchvision registers autocast kernels for its ops
            if ns in ("aten", "prims"):
                if ctx.settings.opt_level in ("O2", "O3"):
                    return None  # nothing is patched there: the Python name is no better
                python = "torch." + qualname.split(".")[3]
                if ops.cast(python, engine, "cuda") is None:
                    return None  # not cast through its Python name either
            message = (f"`{ctx.segment(node.func)}` calls a dispatcher op directly: "
                       + ("amplint's O1 patches Python functions and never sees it" if engine == "amplint" else
                          "autocast casts only ops that register an Autocast kernel")
                       + "; cast its inputs yourself (`.float()` or `.half()`)")
        else:
            message = (f"`{ctx.segment(node.func)}` calls into a compiled extension: no mixed-precision policy "
                       f"casts its inputs, and a kernel built for fp32 fails or misreads fp16; wrap it in a "
                       f"custom autograd Function with `@torch.amp.custom_fwd(..., cast_inputs=torch.float32)`")
        return node, message, Severity.WARNING, None, None

    # --- the registration fix --------------------------------------------------------

    def _registration_fix(self, ctx, wanted) -> Optional[Fix]:
        anchor = self._import_anchor(ctx)
        if anchor is None:
            return None
        seen, lines = set(), []
        need_sys = False
        amp_name, import_line = self._amp_alias(ctx)
        for text, module, name, kind in wanted:
            if (module, name) in seen:
                continue
            seen.add((module, name))
            if text == _SELF_MODULE and ctx.imports.get("sys") != "sys":
                need_sys = True
            lines.append(f"{amp_name}.register_{kind}_function({text}, \"{name}\")\n")
        if not lines:
            return None
        head = ("import sys\n" if need_sys else "") + import_line
        # after existing registrations that follow the imports
        anchor = self._after_registrations(ctx, anchor)
        names = ", ".join(f"`{n}`" for _, n in sorted(seen, key=lambda k: k[1]))
        return Fix([self._insert_after(ctx, anchor, head + "".join(lines))], "safe",
                   f"Register {names} with the O1 engine after the imports")

    @staticmethod
    def _insert_after(ctx, stmt, text) -> Edit:
        """Insert whole lines after ``stmt``'s last line (after its trailing comment)."""
        end = stmt.end_lineno
        if end >= len(ctx.lines):  # the last line of a file without a final newline
            return Edit.insert_at(end, len(ctx.line_text(end).encode("utf-8")), "\n" + text.rstrip("\n"))
        return Edit.insert_at(end + 1, 0, text)

    @staticmethod
    def _import_anchor(ctx):
        """The last top-level import statement (or try-block of imports)."""
        anchor = None
        for stmt in ctx.tree.body:
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                anchor = stmt
            elif isinstance(stmt, ast.Try) and stmt.body and all(
                    isinstance(s, (ast.Import, ast.ImportFrom)) for s in stmt.body):
                anchor = stmt
        return anchor

    def _after_registrations(self, ctx, anchor):
        """Skip the top-level registration calls right after ``anchor``."""
        body = ctx.tree.body
        i = body.index(anchor)
        while i + 1 < len(body):
            stmt = body[i + 1]
            if (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
                    and _last_name(stmt.value.func) in _REGISTER):
                i += 1
            elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
                i += 1
            else:
                break
        return body[i]

    def _amp_alias(self, ctx) -> tuple[str, str]:
        """(name to call the engine by, import line to add or "")."""
        names = self._module_level_names(ctx)
        for local, target in ctx.imports.items():
            if target in ("amplint.amp", "apex.amp") and local in names:
                return local, ""
        taken = set(ctx.imports) | set(ctx.classes) | set(ctx.functions)
        if "amp" not in taken and not ctx.module_assignments("amp"):
            return "amp", "from amplint import amp\n"
        return "amplint_amp", "from amplint import amp as amplint_amp\n"

    def _torch_alias(self, ctx) -> Optional[str]:
        names = self._module_level_names(ctx)
        for local, target in ctx.imports.items():
            if target == "torch" and local in names:
                return local
        return None

    def _module_level_names(self, ctx) -> set:
        """Names bound by unconditional top-level imports: what a registration inserted
        after the imports may refer to (not names from ``try:`` / ``if`` blocks, which
        may be ``None`` or missing, e.g. ``except ImportError: oe = None``)."""
        if self._names is None:
            names = set()
            for stmt in ctx.tree.body:
                if isinstance(stmt, ast.Import):
                    names.update(a.asname or a.name.split(".")[0] for a in stmt.names)
                elif isinstance(stmt, ast.ImportFrom):
                    names.update(a.asname or a.name for a in stmt.names)
            self._names = names
        return self._names

    def _bound_at_module_level(self, ctx, expr) -> bool:
        while isinstance(expr, ast.Attribute):
            expr = expr.value
        return isinstance(expr, ast.Name) and expr.id in self._module_level_names(ctx)
