"""AMP201 unaligned-dimension: a Tensor Core layer size not a multiple of 8 (16 for
fp8/int8, or ``alignment``).  Sizes: :mod:`amplint.analysis.layer_sizes` (this file) and
:mod:`amplint.analysis.config_dims` (another file's); here: docs, examples, messages, fixes."""
from __future__ import annotations

import ast

from amplint.analysis.config_dims import layer_size_uses, lone_size_defaults, unaligned_definitions
from amplint.analysis.dims import CHECKPOINT_MARKERS, LAYER_MARKERS, next_multiple
from amplint.analysis.layer_sizes import LayerSurvey, UnalignedSize, sizes_text
from amplint.numerics import FORMATS
from amplint.rule import Edit, Fix, Invalid, Related, Rule, Severity, Valid


def _why(settings, alignment: int) -> str:
    if settings.alignment:
        reason = f"`alignment = {alignment}` in [tool.amplint]"
    else:
        reason = f"{settings.target} Tensor Cores want multiples of {alignment}"
    return (
        f"{reason}; H200 fp16: a 768x50257 GEMM is 5.3x slower than 768x50264, "
        f"a GPT-2-small step 1.54x slower with vocab 50257"
    )


class UnalignedDimension(Rule):
    code = "AMP201"
    name = "unaligned-dimension"
    summary = "Layer size not a multiple of 8 (16 for fp8/int8): Tensor Core GEMMs fall back to slow kernels"
    severity = Severity.WARNING
    options = ("target", "alignment")
    fix_applicability = "unsafe"
    #: "Module": a model built only from another file's layer helpers (``conv_bn(True, 473, 256)``)
    markers = LAYER_MARKERS + ("Config", "dataclass", "Module")
    #: a file can only use another file's config field through a config-like name
    collect_markers = ("config", "cfg", "hparams", "params.", "args.", "opt.", "hp.", "conf.")
    docs = """
## What it does
Flags sizes of Tensor Core layers that are not a multiple of the alignment: 8 for
`--target fp16`/`bf16`, 16 for `fp8`/`int8`, or `[tool.amplint] alignment` (e.g. 64, as
nanoGPT pads its vocabulary 50257 to 50304). It checks `in_features`/`out_features` of
`nn.Linear`, `nn.Bilinear`, in/out channels of `nn.Conv1d/2d/3d` and `ConvTranspose*`,
`nn.Embedding`/`EmbeddingBag` (`num_embeddings`, `embedding_dim`),
`nn.MultiheadAttention` (`embed_dim`, `kdim`, `vdim`), `nn.LSTM/GRU/RNN` and their cells
(`input_size`, `hidden_size`, `proj_size`), `nn.TransformerEncoderLayer`/`DecoderLayer`/
`Transformer` (`d_model`, `dim_feedforward`), and 2-D `nn.Parameter(torch.empty(out, in))`
weights used with `F.linear`/`matmul`/`@`.

Sizes are followed wherever they are written: literals, module constants, default
arguments, `self.attr` set in `__init__`, config-class defaults (`vocab_size=30522`,
`n_embd: int = 770`) and arithmetic on them (`4 * n_embd`), also across files when the
config file is linted together with the model. A size is every value it takes over the
call sites that reach the layer: keyword and positional arguments
(`LM(LMConfig(vocab_size=30522))`, `Net(input_dim=81 + 64)`, a factory's
`Net(cells=6, planes=44)`), attributes set on a config before use, `**kwargs` dicts,
defaults passed down several constructors, argparse defaults read as `args.hidden` in
another file, width tuples and lists indexed or iterated in loops (`STAGES = {"small":
(24, 116, 232)}`, HRNet's `[[18, 36], [18, 36, 72]]` passed down, `[[c] * n for ...]`),
`cls(...)` in a classmethod, Lightning's `self.hparams.x`, a config's named presets
(`dict(padded_vocab_size=32001)`), and helpers of another file whose parameters reach a
layer (`conv_bn(True, 473, 256)`, `d_model // n_head` through `self`). A config class linted
without its model is reported at its size-named defaults. A config default that every
site building the config overrides with an aligned value (`GPTConfig(vocab_size=50304)`)
is not reported. The finding points at the layer (or the helper call); its related
locations say where the number is written. Where a size takes several values, no edit is
offered.

A width no value of its unknown inputs can align is flagged too (residues through `+`,
`-`, `*`): egnn's `dim * 2 + edge_dim + 1` is odd for any `dim` (`dim + 1` is not flagged).

Small sizes -- below 32, or an output below 64 -- are flagged only when they are a
*hidden width* of their module: another layer of the same class (or function) reads the
size as its input, or writes it as its output, including this file's helpers that build a
layer (`BranchSeparables(44, 44)`), a module passing the size down to the layer (NASNet's
cells) or another file's helper writing and reading it (`d_model // n_head`). MTCNN's
`nn.Conv2d(3, 10)` then `nn.Conv2d(10, 16)` is flagged twice (10 is the design's choice); a
small size no other layer of the module has on the other side is the data's, not flagged:

- an input no layer writes: an image stem's `in_channels=3` or `1`, 28 pixel rows fed to
  an LSTM, a 6-feature or 17-feature input, a latent code of 20;
- an output no layer reads: a classifier, a regression or box head (2, 4, 10 outputs,
  MNIST's 10 digits);
- sizes of 1 and 2 (scalar gates, binary heads, token-type tables of 2), always.

H200 fp16, forward + backward (`bench/small_dims.py`): MTCNN's 3-10-16-32 convs 1.14x and
3-28-48-64 1.31x slower than padded to 16/32, NASNet's 44-channel 1x1 convs 1.57x; an SE
bottleneck of 4 on pooled features 1.03x, a 6-feature input 1.08x. Also not flagged:

- sizes through a name about classes or labels (`num_classes`, `num_labels`), a patch
  embedding's input (`patch_size * patch_size * 3`), and the top model's own `in_channels`
  / `out_channels` defaults when nothing in the file builds it (100 mel bins);
- an embedding's row count unless it is a vocabulary (a name with `vocab`, `token`,
  `word` or `char`, or a literal of 1000 or more): a table of positions or
  relative-position biases is a lookup, no GEMM, while a vocabulary is also the width
  of the (tied) output layer;
- depthwise and grouped convolutions, and sizes that cannot be computed.

In a file that loads a pretrained checkpoint (`from_pretrained`, `PreTrainedModel`),
sizes that come from the config are reported as `info` without a fix: the checkpoint's
tensors have those shapes.

## Why is this bad?
Tensor Core GEMM and convolution kernels work on tiles whose sides are multiples of
8 elements in fp16/bf16 (16 in fp8; TransformerEngine's FP8 path requires it). With an
unaligned size cuBLAS falls back to slower kernels. Measured on an H200 (fp16, M=8192):

| K x N | ms | TFLOP/s |
|---|---|---|
| 768 x 30522 (BERT vocab) | 1.806 | 213 |
| 768 x 30528 | 0.548 | 701 |
| 771 x 30528 (K not aligned) | 3.143 | 123 |
| 768 x 50257 (GPT-2 vocab) | 5.127 | 123 |
| 768 x 50264 | 0.960 | 659 |
| 768 x 50304 (multiple of 64) | 0.928 | 682 |

The GPT-2 vocabulary makes that GEMM 5.3x slower, an unaligned K of 771 5.7x slower,
and a whole GPT-2-small training step (autocast fp16) takes 39.5 ms with vocab 50257
against 25.7 ms with 50304: 1.54x slower for one number, most of what mixed precision
bought over TF32 (54.5 ms).

What the fix buys on this rule's fixture models (`fixtures/dims`, before and after
`amplint fix --unsafe-fixes`; one autocast fp16 + GradScaler + AdamW training step,
median of 20-30 steps, the GPT-2 rows over three runs; H200, torch 2.11):

| model | before | after | |
|---|---|---|---|
| GPT-2 small, 12 layers, 8x1024 tokens: vocab 50257 -> 50264 | 44.8-46.3 ms | 30.1-33.1 ms | 1.35-1.5x |
| same, 50257 -> 50304 (`alignment = 64`) | 46.1-46.3 ms | 32.1-33.2 ms | 1.4x: 64 gains nothing over 8 here |
| BERT-base MLM, 32x512: vocab 30522 -> 30528 | 54.8 ms | 49.3 ms | 1.11x |
| LSTM LM, 2x650 -> 2x656, 35x256 | 9.7 ms | 8.0 ms | 1.21x |
| char transformer, n_embd 770 -> 800 (4% more FLOPs) | 13.9 ms | 12.9 ms | 1.08x |

The single GEMMs: 8192x770x3080 takes 0.239 ms, the larger 8192x800x3200 0.076 ms;
8192x650x2600 0.194 ms against 8192x656x2624 0.058 ms.

## Example
```python
from dataclasses import dataclass

from torch import nn


@dataclass
class GPTConfig:
    vocab_size: int = 50257
    n_embd: int = 768


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
```

## Use instead
```python
from dataclasses import dataclass

from torch import nn


@dataclass
class GPTConfig:
    vocab_size: int = 50304  # 50257 padded to a multiple of 64
    n_embd: int = 768


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
```

## Fix safety
The fix pads the number where it is written (the literal, the constant, the default
or the config field), so that every layer using it -- a hidden width is one layer's
`out_features` and the next one's `in_features`, `4 * n_embd` of the MLP -- stays
consistent and the model still builds. Where the width is split into heads
(`n_embd % n_head`, `n_embd // n_head`, `nn.MultiheadAttention(embed_dim, num_heads)`),
the padded value is also a multiple of the head count. When the number is defined in
another file (a config module linted together with the model), the finding in that
file carries the fix; the use site only points to it.

No fix is offered when padding one definition cannot align the size (`n + 1`,
`heads * head_dim` of two names), when the number is bound to a checkpoint, or when a
width written as a bare literal in the layer call is also written elsewhere in the file
(`nn.LSTMCell(1, 51)` next to `torch.zeros(b, 51)`): padding only the layers would break
the model, so give the number one name first.

It is `unsafe` because it changes the architecture: saved checkpoints no longer load.

- A padded **vocabulary** (or class count) adds rows that no token id ever indexes: the
  embedding rows stay untrained and cost nothing; the output layer produces extra
  logits that the loss must ignore. With cross-entropy on true token ids the extra
  classes only receive a push towards low scores; for sampling or exact probabilities
  slice them off (`logits[..., :vocab_size]`) or mask them to `-inf`.
- A padded **hidden width** changes the model: it must be trained (or retrained) at the
  new size.

For a pretrained checkpoint (the size comes from a config default or field that a
checkpoint fixes -- including a size stored from a constructor parameter under a branch,
`elif isinstance(vocab_size_or_config_json_file, int): self.vocab_size = ...`), the
finding is `info` with no edit: pad after loading instead -- pad the embedding to a
multiple of 64 and ignore the extra logits, or with Hugging Face
`model.resize_token_embeddings(len(tokenizer), pad_to_multiple_of=64)` (a GPT-2-small step:
39.5 ms at 50257, 25.7 ms at 50304 on an H200).
"""

    VALID = [
        Valid("""
            import torch.nn as nn
            fc = nn.Linear(768, 3072)
            """),
        # data-bound: RGB stem, binary head, class count through a name
        Valid("""
            import torch.nn as nn
            stem = nn.Conv2d(3, 64, kernel_size=7)
            head = nn.Linear(512, 2)
            """),
        Valid("""
            import torch.nn as nn
            class Net(nn.Module):
                def __init__(self, num_classes=10):
                    super().__init__()
                    self.fc = nn.Linear(512, num_classes)
            """
        ),
        Valid("""
            import torch.nn as nn
            D = 768
            mlp = nn.Linear(D, 4 * D)
            """),
        # a relative-position bias table and a ViT patch embedding (3 colour channels)
        Valid("""
            import torch.nn as nn
            def make(window_size=7, heads=8, patch_size=14, dim=768, p=14, in_chans=3):
                bias = nn.Embedding((2 * window_size - 1) ** 2, heads)
                patches = nn.Linear(patch_size * patch_size * 3, dim)
                pixels = nn.Linear(p * p * in_chans, dim)
                return bias, patches, pixels
            """
        ),
        Valid("""
            import torch.nn as nn
            fc = nn.Linear(768, 50304)
            """, settings={"alignment": 64}),
        # bias (1-D) and 3-D parameters are not GEMM weights
        Valid("""
            import torch, torch.nn as nn
            class M(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.bias = nn.Parameter(torch.zeros(771))
                    self.pos = nn.Parameter(torch.zeros(1, 197, 768))
            """
        ),
    ]
    INVALID = [
        Invalid("""
            import torch.nn as nn
            lm_head = nn.Linear(768, 50257)
            """,
            line=2,
            message="out_features is 50257, not a multiple of 8: pad to 50264",
            expected_fix="""
                import torch.nn as nn
                lm_head = nn.Linear(768, 50264)
                """,
        ),
        Invalid("""
            import torch.nn as nn
            lm_head = nn.Linear(768, 50257)
            """,
            message="pad to 50304",
            settings={"alignment": 64},
            expected_fix="""
                import torch.nn as nn
                lm_head = nn.Linear(768, 50304)
                """,
        ),
        Invalid("""
            import torch.nn as nn
            fc = nn.Linear(in_features=771, out_features=1000)
            """,
            message="in_features is 771",
            expected_fix="""
                import torch.nn as nn
                fc = nn.Linear(in_features=776, out_features=1000)
                """,
        ),
        Invalid("""
            import torch.nn as nn
            fc = nn.Linear(1000, 1000)
            """,
            message="multiples of 16",
            settings={"target": "fp8"},
            expected_fix="""
                import torch.nn as nn
                fc = nn.Linear(1008, 1008)
                """,
        ),
        # a hidden width defined once, used as out of one layer and in of the next
        Invalid("""
            import torch.nn as nn
            HIDDEN = 650
            net = nn.Sequential(nn.Linear(512, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 512))
            """,
            line=3,
            count=2,
            expected_fix="""
                import torch.nn as nn
                HIDDEN = 656
                net = nn.Sequential(nn.Linear(512, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 512))
                """,
        ),
        # dataclass config default, `4 * n_embd`, and the head constraint n_embd % n_head
        Invalid("""
            from dataclasses import dataclass
            import torch.nn as nn
            @dataclass
            class Config:
                n_embd: int = 771
                n_head: int = 3
            class MLP(nn.Module):
                def __init__(self, config):
                    super().__init__()
                    assert config.n_embd % config.n_head == 0
                    self.fc = nn.Linear(config.n_embd, 4 * config.n_embd)
            """,
            line=11,
            message="in_features 771 (pad to 776), out_features 3084 (pad to 3088)",
            expected_fix="""
                from dataclasses import dataclass
                import torch.nn as nn
                @dataclass
                class Config:
                    n_embd: int = 792
                    n_head: int = 3
                class MLP(nn.Module):
                    def __init__(self, config):
                        super().__init__()
                        assert config.n_embd % config.n_head == 0
                        self.fc = nn.Linear(config.n_embd, 4 * config.n_embd)
                """,
        ),
        Invalid("""
            import torch.nn as nn
            class Attn(nn.Module):
                def __init__(self, d_model=770, heads=10):
                    super().__init__()
                    self.attn = nn.MultiheadAttention(d_model, heads)
            """,
            message="embed_dim is 770",
            expected_fix="""
                import torch.nn as nn
                class Attn(nn.Module):
                    def __init__(self, d_model=800, heads=10):
                        super().__init__()
                        self.attn = nn.MultiheadAttention(d_model, heads)
                """,
        ),
        Invalid("""
            import torch.nn as nn
            class LM(nn.Module):
                def __init__(self, ntoken=10000, nhid=650):
                    super().__init__()
                    self.nhid = nhid
                    self.rnn = nn.LSTM(self.nhid, self.nhid, 2)
            """,
            message="input_size 650 (pad to 656), hidden_size 650",
            expected_fix="""
                import torch.nn as nn
                class LM(nn.Module):
                    def __init__(self, ntoken=10000, nhid=656):
                        super().__init__()
                        self.nhid = nhid
                        self.rnn = nn.LSTM(self.nhid, self.nhid, 2)
                """,
        ),
    ]

    # --- per file --------------------------------------------------------------------

    def begin_file(self, ctx) -> LayerSurvey:
        return LayerSurvey(
            alignment=ctx.settings.effective_alignment(),
            floor=ctx.format.alignment,
            checkpoint=any(m in ctx.source for m in CHECKPOINT_MARKERS),
        )

    def visit_Call(self, node: ast.Call, ctx) -> None:
        ctx.state(self).add_call(node, ctx)

    def visit_BinOp(self, node: ast.BinOp, ctx) -> None:
        ctx.state(self).add_binop(node)  # only remembered: looked at in end_file

    # --- reporting ---------------------------------------------------------------------

    def end_file(self, ctx) -> None:
        survey = ctx.state(self)
        fixed_keys: set = set()
        for call, label, sizes in survey.finish(ctx):
            self._report_use(ctx, call, label, sizes, fixed_keys)
        if ctx.project is not None:
            self._report_config_definitions(ctx, fixed_keys)
        self._report_lone_config_defaults(ctx, fixed_keys)  # a config linted without its model

    def _split_note(self, st: LayerSurvey, divisors) -> str:
        divisors = sorted(d for d in divisors if st.alignment % d)
        if not divisors:
            return ""
        return f" (also a multiple of {', '.join(map(str, divisors))}: the width is split into heads)"

    def _report_use(self, ctx, call, label, sizes: list[UnalignedSize], fixed_keys: set) -> None:
        st = ctx.state(self)
        alignment = st.alignment
        related: list[Related] = []
        for s in sizes:
            for r in s.origin:
                if r not in related:
                    related.append(r)
        message = f"{label} {sizes_text(sizes, alignment)}"
        checkpoint = st.checkpoint and any(s.root is None or s.root.via_config for s in sizes)
        if checkpoint:
            message += (
                "; bound to a pretrained checkpoint (this file loads one), so no edit is offered: padding the "
                "definition breaks loading. To pad anyway, pad the embedding to a multiple of 64 after loading "
                "and ignore the extra logits (`logits[..., :vocab_size]`), or for transformers models call "
                "`model.resize_token_embeddings(len(tokenizer), pad_to_multiple_of=64)` (H200 fp16: a GPT-2-small "
                "step takes 39.5 ms with vocab 50257, 25.7 ms with 50304)"
            )
            ctx.report(self, call, message, related=related, severity=Severity.INFO)
            return
        edits, notes, elsewhere = {}, [], []
        for s in sizes:
            root = s.root
            if root is not None and root.kind == "literal" and not root.names and root.node.value in st.scattered:
                elsewhere.append(
                    f"{root.node.value} is also written elsewhere in this file: name it once and pad the name"
                )
            elif root is not None and root.kind == "literal":
                if root.key not in edits:
                    new = st.padded(root)
                    edits[root.key] = Edit.replace(root.node, str(new))
                    what = f"`{root.names[-1]}`" if root.names else "the literal"
                    notes.append(f"{what} {root.node.value} -> {new}" + self._split_note(st, st.divisors.get(root.key, ())))
            elif s.choice:  # followed through call sites, loops or options: no edit
                elsewhere.append(f"{s.label} takes several values here, {s.size} among them: pad each where it is written"
                                 if s.choice > 1 else f"{s.label} {s.size} is written where the notes point: pad it there")
            elif s.origin and s.origin[-1].path != ctx.path:
                where = s.origin[-1]
                elsewhere.append(
                    f"{s.label} is defined in {where.path}:{where.line} (the fix is offered there when that file is linted too)"
                )
        message += f" ({_why(ctx.settings, alignment)})"
        if elsewhere:
            message += "; " + "; ".join(dict.fromkeys(elsewhere))
        fix = None
        if edits:
            fixed_keys.update(edits)
            fix = Fix(list(edits.values()), "unsafe", "Pad " + ", ".join(dict.fromkeys(notes)) + " (changes the architecture)")
        ctx.report(self, call, message, fix=fix, related=related)

    # --- sizes defined here, used as layer sizes in another file -----------------------

    @classmethod
    def collect(cls, ctx):
        return layer_size_uses(ctx)

    def _report_config_definitions(self, ctx, fixed_keys: set) -> None:
        st = ctx.state(self)
        found = unaligned_definitions(ctx, self.code, st.alignment, st.floor, fixed_keys)
        if found:
            st.collect_splits(ctx)
        for d in found:
            new = st.padded(d.root, d.divisors)
            where = ", ".join(f"`{u['layer']}` {u['arg']} in {p}:{u['line']}" for p, u, _ in d.uses[:3])
            message = (
                f"`{d.cls}.{d.field}` = {d.base} is a layer size ({where}), not a multiple of {st.alignment}: "
                f"pad to {next_multiple(d.base, st.alignment)} ({_why(ctx.settings, st.alignment)})"
            )
            related = [Related(p, u["line"], u["column"], f"used as {u['arg']} of `{u['layer']}` here") for p, u, _ in d.uses]
            note = self._split_note(st, d.divisors | st.divisors.get(d.root.key, set()))
            fix = Fix([Edit.replace(d.root.node, str(new))], "unsafe",
                      f"Pad `{d.field}` {d.root.node.value} -> {new}{note} (changes the architecture)")
            ctx.report(self, d.default, message, fix=fix, related=related)

    def _report_lone_config_defaults(self, ctx, fixed_keys: set) -> None:
        st = ctx.state(self)
        for d in lone_size_defaults(ctx, self.code, st.alignment, st.floor, fixed_keys):
            new = st.padded(d.root)
            message = (f"`{d.cls}.{d.field}` = {d.base} is a layer size of the model this config builds, not a "
                       f"multiple of {st.alignment}: pad to {new} ({_why(ctx.settings, st.alignment)})")
            fix = Fix([Edit.replace(d.root.node, str(new))], "unsafe", f"Pad `{d.field}` {d.base} -> {new} (changes the architecture)")
            if st.checkpoint:  # no edit: the checkpoint's tensors have this shape
                ctx.report(self, d.default, message + "; bound to a pretrained checkpoint", severity=Severity.INFO)
            else:
                ctx.report(self, d.default, message, fix=fix)
