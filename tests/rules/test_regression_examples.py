"""Regression examples of the rules whose files would pass 500 lines with every example
embedded: corner cases and real-code false positives, checked exactly like the embedded
examples (``amplint.testing.check_examples``).  A rule's own ``VALID`` / ``INVALID`` keep
the cases that show what it does; new regression cases for these rules go here."""
import dataclasses

import pytest

from amplint.rule import Invalid, Valid
from amplint.testing import check_examples
from amplint.rules.amp101_overflow_constant import OverflowConstant
from amplint.rules.amp102_underflow_epsilon import UnderflowEpsilon
from amplint.rules.amp201_unaligned_dimension import UnalignedDimension
from amplint.rules.amp301_softmax_in_half import SoftmaxInHalf
from amplint.rules.amp302_reduction_in_half import ReductionInHalf
from amplint.rules.amp401_uncovered_op import UncoveredOp

def _fixes_at_o2(invalid):
    """The softmax examples show the fix's shape. Under O1 the engine already runs softmax in
    fp32 and the rule offers no fix (a cast back would round its fp32 result to half, issue
    24), so an example that expects a fix runs at O2, where the softmax is half."""
    return [dataclasses.replace(v, settings={"opt_level": "O2", **v.settings})
            if v.expected_fix is not None else v for v in invalid]


EXAMPLES = {
    OverflowConstant: (
        [
            Valid("""
                import torch
                import time
                class M(torch.nn.Module):
                    def forward(self, x):
                        t = time.time() * 1e9
                        return x / 1e9
                """),
            Valid("""
                import torch
                def f(x):
                    return x.clamp(min=-1e4, max=1e4)
                """),
            Valid("""
                import torch
                def f(n):
                    beam_scores = torch.zeros((n, 4), dtype=torch.float)
                    beam_scores[:, 1:] = -1e9
                    return beam_scores.softmax(-1)
                """),
            Valid("""
                import torch
                def f(x, m):
                    s = x.float()
                    return s.masked_fill(m, -1e9).softmax(-1)
                """),
            Valid("""
                import torch
                def f(x, m):
                    return x.float().masked_fill(m, -1e9).softmax(-1).type_as(x)
                """),
            Valid("""
                import torch
                class M(torch.nn.Module):
                    def forward(self, s, m):
                        return s + (1.0 - m.to(torch.float32)) * -1e9
                """),
            Valid("""
                import torch
                class M(torch.nn.Module):
                    def forward(self, m, s):
                        return s + torch.where(m > 0, 0.0, -1e10)
                """),
            # integer offsets are token / index arithmetic, not tensor values in half
            Valid("""
                import torch
                class M(torch.nn.Module):
                    def forward(self, codes):
                        return codes.flatten() + 128256
                """),
            # DETR's masks_to_boxes: the coordinates are fp32 (arange(dtype=torch.float)) whatever the masks are
            Valid("""
                import torch
                def masks_to_boxes(masks, h, w):
                    y = torch.arange(0, h, dtype=torch.float)
                    x = torch.arange(0, w, dtype=torch.float)
                    y, x = torch.meshgrid(y, x)
                    x_mask = masks * x.unsqueeze(0)
                    return x_mask.masked_fill(~(masks.bool()), 1e8).flatten(1).min(-1)[0]
                """
            ),
            Valid("""
                import torch
                def f(x, m):
                    v = -1e4 if x.dtype == torch.half else -1e9
                    return x
                """),
            Valid("""
                import torch
                def f(n):
                    return torch.full((n,), -1e9)
                """),
            Valid("""
                import torch
                def f(n):
                    return torch.full((n,), -1e9, dtype=torch.float32)
                """),
            Valid("""
                import torch
                best = 1e9
                def f():
                    return 4 * 1e9
                """),
            Valid("""
                import numpy as np
                import torch
                def f(m, x):
                    return np.where(m, x, -1e9)
                """),
        ],
        [
            # a config-class default used as config.attr
            Invalid("""
                import torch
                from dataclasses import dataclass
                @dataclass
                class ModelConfig:
                    mask_value: float = -1e9
                class Attn(torch.nn.Module):
                    def __init__(self, config: ModelConfig):
                        super().__init__()
                        self.config = config
                    def forward(self, s, m):
                        return s.masked_fill(m, self.config.mask_value).softmax(-1)
                """,
                line=11,
                message="self.config.mask_value",
                expected_fix=None,
            ),
            # not feeding a softmax: unsafe, still fixed with --unsafe-fixes
            Invalid("""
                import torch
                def f(x, m):
                    x.masked_fill_(m, -1e9)
                    return x.sum()
                """,
                expected_fix="""
                    import torch
                    def f(x, m):
                        x.masked_fill_(m, torch.finfo(x.dtype).min)
                        return x.sum()
                    """,
            ),
            Invalid("""
                import torch
                def f(x, m):
                    return torch.where(m, x, -1e9).softmax(-1)
                """,
                expected_fix="""
                    import torch
                    def f(x, m):
                        return torch.where(m, x, torch.finfo(x.dtype).min).softmax(-1)
                    """,
            ),
            Invalid("""
                import torch
                def f(x, m):
                    x[m] = -1e9
                    return torch.softmax(x, -1)
                """,
                expected_fix="""
                    import torch
                    def f(x, m):
                        x[m] = torch.finfo(x.dtype).min
                        return torch.softmax(x, -1)
                    """,
            ),
            Invalid("""
                import torch
                def f(x):
                    return torch.full(x.shape, -1e9, dtype=x.dtype)
                """,
                expected_fix="""
                    import torch
                    def f(x):
                        return torch.full(x.shape, torch.finfo(x.dtype).min, dtype=x.dtype)
                    """,
            ),
            Invalid("""
                import torch
                def f(x):
                    return torch.full_like(x, 1e5)
                """,
                message="65504",
                expected_fix="""
                    import torch
                    def f(x):
                        return torch.full_like(x, torch.finfo(x.dtype).max)
                    """,
            ),
            Invalid("""
                import torch
                def f(x):
                    return x.fill_(-1e9)
                """,
                    expected_fix="""
                        import torch
                        def f(x):
                            return x.fill_(torch.finfo(x.dtype).min)
                        """),
            Invalid("""
                import torch
                def f(x):
                    return x.clamp(max=1e10)
                """,
                    expected_fix="""
                        import torch
                        def f(x):
                            return x.clamp(max=torch.finfo(x.dtype).max)
                        """),
            Invalid("""
                import torch
                def f(x):
                    return torch.clamp(x, -1e10, 1e4)
                """,
                    expected_fix="""
                        import torch
                        def f(x):
                            return torch.clamp(x, torch.finfo(x.dtype).min, 1e4)
                        """),
            # additive masks: unsafe
            Invalid("""
                import torch
                class Enc(torch.nn.Module):
                    def forward(self, scores, mask):
                        mask = mask.to(dtype=scores.dtype)
                        ext = (1.0 - mask) * -1e9
                        return scores + ext
                """,
                line=5,
                expected_fix="""
                    import torch
                    class Enc(torch.nn.Module):
                        def forward(self, scores, mask):
                            mask = mask.to(dtype=scores.dtype)
                            ext = (1.0 - mask) * torch.finfo(mask.dtype).min
                            return scores + ext
                    """,
            ),
            # additive mask of an integer mask: the tensor cannot be named honestly -> no fix
            Invalid("""
                import torch
                class Enc(torch.nn.Module):
                    def forward(self, scores, mask):
                        return scores + (1 - mask) * -1e9
                """,
                expected_fix=None,
            ),
            Invalid("""
                import torch
                class M(torch.nn.Module):
                    def forward(self, x):
                        x -= 1e9
                        return x
                """,
                expected_fix="""
                    import torch
                    class M(torch.nn.Module):
                        def forward(self, x):
                            x -= torch.finfo(x.dtype).max
                            return x
                    """,
            ),
            # fp8 target: 448
            Invalid("""
                import torch
                def f(x, m):
                    return x.masked_fill(m, -1e4)
                """, settings={"target": "fp8"}, message="448",
                    expected_fix="""
                        import torch
                        def f(x, m):
                            return x.masked_fill(m, torch.finfo(x.dtype).min)
                        """),
            # a dtype check that keeps fp32-only code apart; the half branch still counts
            Invalid("""
                import torch
                def f(x, m):
                    if x.dtype != torch.float32:
                        x = x.masked_fill(m, -1e9)
                    return x
                """,
                line=4,
                expected_fix="""
                    import torch
                    def f(x, m):
                        if x.dtype != torch.float32:
                            x = x.masked_fill(m, torch.finfo(x.dtype).min)
                        return x
                    """,
            ),
            # no torch import: no fix
            Invalid("""
                from torch import where
                def f(x, m):
                    return where(m, x, -1e9)
                """, expected_fix=None),
        ],
    ),
    UnderflowEpsilon: (
        [
            # moved from the rule's own examples (rule files stay short)
            Valid("""
                import torch
                import torch.nn as nn
                ln = nn.LayerNorm(8, eps=1e-12)
                """),
            Valid("""
                import torch
                import torch.nn as nn
                class Block(nn.Module):
                    def __init__(self, d, eps=1e-4):
                        super().__init__()
                        self.norm = nn.LayerNorm(d, eps=eps)
                    def forward(self, x):
                        return self.norm(x)
                b = Block(8, eps=1e-12)
                """),
            Valid("""
                import torch
                import torch.nn.functional as F
                def f(x):
                    return F.normalize(x, eps=1e-12)
                """),
            Valid("""
                import torch
                def f(x):
                    return x / (x.norm() + 1e-4)
                """),
            Valid("""
                import torch
                def f(x):
                    return torch.log(x + 1e-8)
                """, settings={"target": "bf16"}),
            Valid("""
                import torch
                def f(x):
                    return torch.log(x.exp() + 1e-8)
                """, settings={"opt_level": "O0"}),
            # the shared dtype analysis: a Python number plus eps is Python arithmetic
            Valid("""
                import torch
                import torch.nn as nn
                class Loss(nn.Module):
                    def forward(self, t, mask):
                        n = mask.size(0)
                        return t.sum() / (n + 1e-16)
                """),
            # a module's __init__ runs before any cast to half: an fp64 schedule clamped there
            Valid("""
                import torch
                import torch.nn as nn
                class Diffusion(nn.Module):
                    def __init__(self, betas):
                        super().__init__()
                        alphas = torch.cumprod(1. - betas, dim=0)
                        self.register_buffer("log_var", torch.log(alphas.clamp(min=1e-20)))
                """),
            Valid("""
                import numpy as np
                import torch
                def f(p):
                    return np.log(p + 1e-10)
                """),
            Valid("""
                import torch
                def f(x):
                    x = x.float()
                    var = x.pow(2).mean(-1)
                    return x * torch.rsqrt(var + 1e-6)
                """),
            Valid("""
                import torch
                def f(h, eps=1e-6):
                    h = h.to(torch.float32)
                    v = h.pow(2).mean(-1)
                    return h * torch.rsqrt(v + eps)
                """),
            Valid("""
                import torch
                opt = torch.optim.Adam([], lr=1e-3, eps=1e-8)
                """),
            Valid("""
                import torch
                class Kron(torch.optim.Optimizer):
                    def step(self):
                        for p in self.params:
                            p.grad.div_(p.grad.square().mean().sqrt() + 1e-8)
                """),
            Valid("""
                import torch
                def f(x):
                    if x.dtype == torch.float32:
                        return torch.log(x + 1e-10)
                    return torch.log(x + 1e-4)
                """),
            Valid("""
                import torch
                def f(x):
                    return x + 1e-8
                """),
            Valid("""
                import torch
                def f(lr):
                    return lr / (1 + 1e-8)
                """),
            Valid("""
                import torch
                def warmup(step, total):
                    return step / (total + 1e-8)
                """),
        ],
        [
            # the softmax runs in fp32, but is cast back before the log
            Invalid("""
                import torch
                import torch.nn.functional as F
                def f(logits):
                    p = F.softmax(logits.float(), -1).type_as(logits)
                    return torch.log(p + 1e-8)
                """,
                line=5,
                expected_fix="""
                    import torch
                    import torch.nn.functional as F
                    def f(logits):
                        p = F.softmax(logits.float(), -1).type_as(logits)
                        return torch.log(p + (1e-8 if p.dtype != torch.float16 else 1e-4))
                    """,
            ),
            Invalid("""
                import torch
                EPS = 1e-12
                def f(v):
                    return (v + EPS).rsqrt()
                """,
                line=4,
                expected_fix="""
                    import torch
                    EPS = 1e-12
                    def f(v):
                        return (v + (EPS if v.dtype != torch.float16 else 1e-4)).rsqrt()
                    """,
            ),
            Invalid("""
                import torch
                class N(torch.nn.Module):
                    def forward(self, v):
                        return 1 / (v + 1e-9) ** 0.5
                """,
                expected_fix="""
                    import torch
                    class N(torch.nn.Module):
                        def forward(self, v):
                            return 1 / (v + (1e-9 if v.dtype != torch.float16 else 1e-4)) ** 0.5
                    """,
            ),
            Invalid("""
                import torch
                def f(p):
                    return torch.log(p.clamp(min=1e-12))
                """,
                expected_fix="""
                    import torch
                    def f(p):
                        return torch.log(p.clamp(min=(1e-12 if p.dtype != torch.float16 else 1e-4)))
                    """,
            ),
            Invalid("""
                import torch
                def f(p):
                    return torch.clamp(p, 1e-12, 1.0)
                """,
                expected_fix="""
                    import torch
                    def f(p):
                        return torch.clamp(p, (1e-12 if p.dtype != torch.float16 else 1e-4), 1.0)
                    """,
            ),
            Invalid("""
                import torch
                opt = torch.optim.AdamW([], lr=1e-3)
                """,
                settings={"opt_level": "O3"}, message="O3",
                expected_fix="""
                    import torch
                    opt = torch.optim.AdamW([], lr=1e-3, eps=1e-4)
                    """,
            ),
            Invalid("""
                import torch
                from torch.optim import Adam
                opt = Adam([], eps=1e-8)
                """,
                settings={"opt_level": "O3"},
                expected_fix="""
                    import torch
                    from torch.optim import Adam
                    opt = Adam([], eps=1e-4)
                    """,
            ),
            Invalid("""
                import torch
                def f(x):
                    return x / (x.abs().sum() + 1e-3)
                """,
                settings={"target": "fp8"}, message="float8",
                expected_fix="""
                    import torch
                    def f(x):
                        return x / (x.abs().sum() + 2e-2)
                    """,
            ),
            # an argument to a hand-written norm of this file
            Invalid("""
                import torch
                import torch.nn as nn
                class RMSNorm(nn.Module):
                    def __init__(self, d, eps=1e-4):
                        super().__init__()
                        self.eps = eps
                    def forward(self, x):
                        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
                norm = RMSNorm(64, eps=1e-12)
                """,
                line=9, severity="error",
                expected_fix="""
                    import torch
                    import torch.nn as nn
                    class RMSNorm(nn.Module):
                        def __init__(self, d, eps=1e-4):
                            super().__init__()
                            self.eps = eps
                        def forward(self, x):
                            input_dtype = x.dtype
                            x = x.float()
                            return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)).to(input_dtype)
                    norm = RMSNorm(64, eps=1e-12)
                    """,
            ),
            # a config default in this file: the finding names it; the fix guards the use by dtype
            Invalid("""
                import torch
                from dataclasses import dataclass
                @dataclass
                class NormConfig:
                    eps: float = 1e-12
                def f(x, config: NormConfig):
                    return x / (x.std(-1) + config.eps)
                """,
                line=7,
                expected_fix="""
                    import torch
                    from dataclasses import dataclass
                    @dataclass
                    class NormConfig:
                        eps: float = 1e-12
                    def f(x, config: NormConfig):
                        return x / (x.std(-1) + (config.eps if x.dtype != torch.float16 else 1e-4))
                    """,
            ),
            # under O2 nothing upcasts F.normalize: its default eps 1e-12 is added in half
            Invalid("""
                import torch.nn as nn
                import torch.nn.functional as F
                class Head(nn.Module):
                    def forward(self, x):
                        return F.normalize(x, dim=-1)
                """,
                line=5, severity="error", message="default eps=1e-12", settings={"opt_level": "O2"},
                expected_fix="""
                    import torch.nn as nn
                    import torch.nn.functional as F
                    class Head(nn.Module):
                        def forward(self, x):
                            return F.normalize(x, dim=-1, eps=1e-4)
                    """,
            ),
            # an epsilon by role: a hand-written LayerNorm whose eps is called `e`
            Invalid("""
                import torch
                import torch.nn as nn
                class LayerNorm(nn.Module):
                    def __init__(self, n, e=1e-5):
                        super().__init__()
                        self.e = e
                    def forward(self, x):
                        s = (x - x.mean(-1, keepdim=True)).abs().mean(-1, keepdim=True)
                        return x / torch.sqrt(s + self.e)
                """,
                line=9, message="subnormal",
                expected_fix="""
                    import torch
                    import torch.nn as nn
                    class LayerNorm(nn.Module):
                        def __init__(self, n, e=1e-5):
                            super().__init__()
                            self.e = e
                        def forward(self, x):
                            input_dtype = x.dtype
                            x = x.float()
                            s = (x - x.mean(-1, keepdim=True)).abs().mean(-1, keepdim=True)
                            return (x / torch.sqrt(s + self.e)).to(input_dtype)
                    """,
            ),
        ],
    ),
    UnalignedDimension: (
        [
            # not computable
            Valid("""
                import torch.nn as nn
                def make(n):
                    return nn.Linear(n, 100 * n)
                """),
            # not torch
            Valid("""
                from mylib import Linear
                fc = Linear(771, 30522)
                """),
            # depthwise convolution (groups != 1) is not a Tensor Core GEMM
            Valid("""
                import torch.nn as nn
                c = nn.Conv2d(100, 100, 3, groups=100)
                """),
        ],
        [
            # F.linear weight
            Invalid("""
                import torch, torch.nn as nn, torch.nn.functional as F
                class Proj(nn.Module):
                    def __init__(self):
                        super().__init__()
                        self.w = nn.Parameter(torch.empty(1000, 771))
                    def forward(self, x):
                        return F.linear(x, self.w)
                """,
                line=5,
                message="dim 1 is 771",
                expected_fix="""
                    import torch, torch.nn as nn, torch.nn.functional as F
                    class Proj(nn.Module):
                        def __init__(self):
                            super().__init__()
                            self.w = nn.Parameter(torch.empty(1000, 776))
                        def forward(self, x):
                            return F.linear(x, self.w)
                    """,
            ),
            # the hidden width is also written in forward: padding the layers alone would break the model
            Invalid("""
                import torch, torch.nn as nn
                class Seq(nn.Module):
                    def __init__(self):
                        super().__init__()
                        self.cell = nn.LSTMCell(1, 51)
                    def forward(self, x):
                        h = torch.zeros(x.size(0), 51)
                        return self.cell(x, (h, h))
                """,
                line=5,
                message="51 is also written elsewhere in this file",
                expected_fix=None,
            ),
            # an MLP's `4 * width` input and a fusion of three `hidden` vectors are design sizes
            Invalid("""
                import torch.nn as nn
                def mlp(width=769, hidden=100):
                    return nn.Linear(4 * width, width), nn.Linear(3 * hidden, 256)
                """,
                count=2,
                message="in_features 3076 (pad to 3080), out_features 769 (pad to 776)",
                expected_fix="""
                    import torch.nn as nn
                    def mlp(width=776, hidden=104):
                        return nn.Linear(4 * width, width), nn.Linear(3 * hidden, 256)
                    """,
            ),
            # arithmetic that padding one name cannot align: reported, no fix
            Invalid("""
                import torch.nn as nn
                N = 196
                proj = nn.Linear(N + 1, 768)
                """,
                message="197",
                expected_fix=None,
            ),
            # a checkpoint fixes the size: info, no fix
            Invalid("""
                import torch.nn as nn
                class GPT2Config:
                    def __init__(self, vocab_size=50257):
                        self.vocab_size = vocab_size
                class GPT2(nn.Module):
                    def __init__(self, config):
                        super().__init__()
                        self.wte = nn.Embedding(config.vocab_size, 768)
                    @classmethod
                    def from_pretrained(cls, path):
                        return cls(GPT2Config())
                """,
                line=8,
                severity="info",
                message="pretrained checkpoint",
                expected_fix=None,
            ),
            Invalid("""
                from torch.nn import ConvTranspose2d
                up = ConvTranspose2d(in_channels=250, out_channels=125, kernel_size=2)
                """,
                count=1,
                expected_fix="""
                    from torch.nn import ConvTranspose2d
                    up = ConvTranspose2d(in_channels=256, out_channels=128, kernel_size=2)
                    """,
            ),
        ],
    ),
    SoftmaxInHalf: (
        [
        ],
        _fixes_at_o2([
            # module style: name clash, a second call with the same dim reuses the layer,
            # `torch.nn` spelled out when `nn` is not imported
            Invalid("""
                import torch

                class M(torch.nn.Module):
                    def __init__(self):
                        torch.nn.Module.__init__(self)
                        self.softmax = torch.nn.Identity()

                    def forward(self, x, y):
                        return x.log_softmax(1) + torch.log_softmax(y, dim=1) + torch.softmax(y, 1)
                """,
                count=3,
                settings={"fix_style": "module"},
                expected_fix="""
                    import torch

                    class M(torch.nn.Module):
                        def __init__(self):
                            torch.nn.Module.__init__(self)
                            self.softmax_1 = torch.nn.Softmax(dim=1)
                            self.log_softmax = torch.nn.LogSoftmax(dim=1)
                            self.softmax = torch.nn.Identity()

                        def forward(self, x, y):
                            return self.log_softmax(x) + self.log_softmax(y) + self.softmax_1(y)
                    """,
            ),
            # module style: a one-line __init__ -> the functional fix
            Invalid("""
                import torch
                class M(torch.nn.Module):
                    def __init__(self): super().__init__()
                    def forward(self, x):
                        return x.softmax(1)
                """,
                settings={"fix_style": "module"},
                expected_fix="""
                    import torch
                    class M(torch.nn.Module):
                        def __init__(self): super().__init__()
                        def forward(self, x):
                            return x.softmax(1, dtype=torch.float32).to(x.dtype)
                    """,
            ),
            # module style: super().__init__() on the last line of the file
            Invalid(
                "import torch.nn as nn\nclass M(nn.Module):\n    def forward(self, x):\n        return x.softmax(1)\n"
                "    def __init__(self):\n        super(M, self).__init__()",
                settings={"fix_style": "module"},
                expected_fix="import torch.nn as nn\nclass M(nn.Module):\n    def forward(self, x):\n        return self.softmax(x)\n"
                "    def __init__(self):\n        super(M, self).__init__()\n        self.softmax = nn.Softmax(dim=1)",
            ),
            # module style: a dim that is not a literal -> no fix
            Invalid("""
                import torch.nn as nn
                import torch.nn.functional as F

                class M(nn.Module):
                    def __init__(self, dim):
                        super().__init__()
                        self.dim = dim

                    def forward(self, x):
                        return F.softmax(x, dim=self.dim)
                """,
                settings={"fix_style": "module"},
                expected_fix=None,
            ),
            # module style without a base initialiser call: the functional fix instead
            Invalid("""
                import torch
                import torch.nn.functional as F

                class M(torch.nn.Module):
                    def forward(self, x):
                        return F.softmax(x, dim=-1)
                """,
                settings={"fix_style": "module"},
                expected_fix="""
                    import torch
                    import torch.nn.functional as F

                    class M(torch.nn.Module):
                        def forward(self, x):
                            return F.softmax(x, dim=-1, dtype=torch.float32).to(x.dtype)
                    """,
            ),
            Invalid("""
                import torch.nn.functional as F
                from entmax import entmax15
                from torch import nn

                class Attention(nn.Module):
                    def forward(self, dots, sparse):
                        softmax = F.softmax if not sparse else entmax15
                        return softmax(dots, dim=-1)
                """,
                line=8,
                expected_fix="""
                    import torch.nn.functional as F
                    from entmax import entmax15
                    from torch import nn

                    class Attention(nn.Module):
                        def forward(self, dots, sparse):
                            softmax = F.softmax if not sparse else entmax15
                            return softmax(dots.float(), dim=-1).to(dots.dtype)
                    """,
            ),
        ]),
    ),
    UncoveredOp: (
        [
            # O0 is fp32; at O2/O3 the model is half, so einsum already runs in half
            Valid("""
                import torch
                class M(torch.nn.Module):
                    def forward(self, a, c):
                        return torch.einsum('ij,jk->ik', a, a), torch.linalg.inv(c)
                """, settings={"opt_level": "O0"}),
            Valid("""
                import torch
                class M(torch.nn.Module):
                    def forward(self, a):
                        return torch.einsum('ij,jk->ik', a, a)
                """, settings={"opt_level": "O2"}),
            # a local variable named like an op is not an op
            Valid("""
                import torch
                from torch import nn
                class M(nn.Module):
                    def forward(self, x, einsum):
                        return einsum(x)
                """),
        ],
        [
            # custom autograd Function (torch policy): custom_fwd / custom_bwd, unsafe (exp: not dtype-keeping, unlike a bare `x * 2`, which is info)
            Invalid("""
                import torch
                from torch import nn


                class Scale(torch.autograd.Function):
                    @staticmethod
                    def forward(ctx, x):
                        return x.exp() * 2

                    @staticmethod
                    def backward(ctx, g):
                        return g * 2


                class M(nn.Module):
                    def forward(self, x):
                        return Scale.apply(x)
                """,
                line=5, message="custom_fwd", settings={"engine": "torch"},
                expected_fix="""
                    import torch
                    from torch import nn


                    class Scale(torch.autograd.Function):
                        @staticmethod
                        @torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.float32)
                        def forward(ctx, x):
                            return x.exp() * 2

                        @staticmethod
                        @torch.amp.custom_bwd(device_type="cuda")
                        def backward(ctx, g):
                            return g * 2


                    class M(nn.Module):
                        def forward(self, x):
                            return Scale.apply(x)
                    """,
            ),
            # custom autograd Function (amplint policy): also @amp.float_function (custom_fwd is autocast-only)
            Invalid("""
                import torch
                from torch import nn
                from torch.autograd import Function
                class Scale(Function):
                    @staticmethod
                    def forward(ctx, x):
                        return x.exp() * 2
                    @staticmethod
                    def backward(ctx, g):
                        return g * 2
                class M(nn.Module):
                    def forward(self, x):
                        return Scale.apply(x)
                """,
                line=4, settings={"device": "cpu"},
                expected_fix="""
                    import torch
                    from torch import nn
                    from torch.autograd import Function
                    class Scale(Function):
                        @staticmethod
                        @torch.amp.custom_fwd(device_type="cpu", cast_inputs=torch.float32)
                        def forward(ctx, x):
                            return x.exp() * 2
                        @staticmethod
                        @torch.amp.custom_bwd(device_type="cpu")
                        def backward(ctx, g):
                            return g * 2
                    class M(nn.Module):
                        def forward(self, x):
                            return Scale.apply(x)
                    """,
            ),
            # compiled extension and torch.ops custom op: reported, no fix
            Invalid("""
                import torch
                import fused_dense_cuda
                class M(torch.nn.Module):
                    def forward(self, x, w):
                        y = fused_dense_cuda.forward(x, w)
                        return torch.ops.mylib.gelu_fast(y)
                """,
                line=5, count=2, message="compiled extension", expected_fix=None,
            ),
        ],
    ),
    ReductionInHalf: (
        [],
        [
            Invalid("""
                import torch
                class LayerNorm(torch.nn.Module):
                    def forward(self, x):
                        d = x - x.mean(-1, keepdim=True, dtype=torch.float32).to(x.dtype)
                        s = (d * d).mean(-1, keepdim=True, dtype=torch.float32)
                        return d / torch.sqrt(s + 1e-5)
                """,
                line=5, count=1, severity="warning", message="255.9",
                expected_fix="""
                    import torch
                    class LayerNorm(torch.nn.Module):
                        def forward(self, x):
                            d = x - x.mean(-1, keepdim=True, dtype=torch.float32).to(x.dtype)
                            s = (d.float() * d).mean(-1, keepdim=True, dtype=torch.float32)
                            return (d / torch.sqrt(s + 1e-5)).to(d.dtype)
                    """,
            ),
        ],
    ),
}


@pytest.mark.parametrize("rule", list(EXAMPLES), ids=[r.code for r in EXAMPLES])
def test_regression_examples(rule):
    valid, invalid = EXAMPLES[rule]
    failures = check_examples(rule, valid, invalid)
    assert not failures, "\n\n".join(failures)
