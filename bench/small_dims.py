"""What an unaligned *small* layer size costs in fp16 (AMP201's small-size policy).

Each case times one forward + backward of a layer stack under ``torch.autocast(fp16)``
(CUDA events, median of 30 steps after 10 warm-up steps) at the unaligned width and at
the width padded to 8, as the benchmark's labels name them: MTCNN's 10/28-channel convs,
NASNet-mobile's 11/44-channel cells, an SE bottleneck of 4-28 channels on pooled
features, DimeNet's 6 radial features into a 128-wide Linear, a DIN MLP of 36, an
embedding width of 4 feeding an MLP.

    python bench/small_dims.py            # needs a CUDA GPU; prints a markdown table
"""
from __future__ import annotations

import statistics
import sys

import torch
from torch import nn


def time_ms(model: nn.Module, x: torch.Tensor, steps: int = 30, warmup: int = 10) -> float:
    model = model.cuda()
    x = x.cuda().requires_grad_(x.is_floating_point())
    times = []
    for i in range(warmup + steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        with torch.autocast("cuda", dtype=torch.float16):
            out = model(x)
        out.float().sum().backward()
        end.record()
        torch.cuda.synchronize()
        if i >= warmup:
            times.append(start.elapsed_time(end))
    return statistics.median(times)


def convs(widths, k=3, channels_last=False):
    layers = []
    for a, b in zip(widths[:-1], widths[1:]):
        layers += [nn.Conv2d(a, b, k, padding=k // 2), nn.ReLU()]
    m = nn.Sequential(*layers)
    return m.to(memory_format=torch.channels_last) if channels_last else m


def mlp(widths):
    layers = []
    for a, b in zip(widths[:-1], widths[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers)


class SE(nn.Module):
    def __init__(self, c, mid):
        super().__init__()
        self.reduce, self.expand = nn.Conv2d(c, mid, 1), nn.Conv2d(mid, c, 1)

    def forward(self, x):
        s = x.mean((2, 3), keepdim=True)
        return x * torch.sigmoid(self.expand(torch.relu(self.reduce(s))))


class EmbedMLP(nn.Module):
    def __init__(self, fields, dim):
        super().__init__()
        self.emb = nn.Embedding(100000, dim)
        self.mlp = mlp([fields * dim, 256, 128, 1])

    def forward(self, idx):
        return self.mlp(self.emb(idx).flatten(1))


def cases():
    img = lambda b, c, s: torch.randn(b, c, s, s)
    for cl in (False, True):
        tag = " (channels_last)" if cl else ""
        yield f"MTCNN PNet convs 3-10-16-32 vs 3-16-16-32, 256x48x48{tag}", \
            lambda: (convs([3, 10, 16, 32], channels_last=cl), img(256, 3, 48)), \
            lambda: (convs([3, 16, 16, 32], channels_last=cl), img(256, 3, 48))
        yield f"MTCNN RNet convs 3-28-48-64 vs 3-32-48-64, 256x24x24{tag}", \
            lambda: (convs([3, 28, 48, 64], channels_last=cl), img(256, 3, 24)), \
            lambda: (convs([3, 32, 48, 64], channels_last=cl), img(256, 3, 24))
        yield f"NASNet-mobile cell 1x1 convs 264-44-44 vs 264-48-48, 64x28x28{tag}", \
            lambda: (convs([264, 44, 44], k=1, channels_last=cl), img(64, 264, 28)), \
            lambda: (convs([264, 48, 48], k=1, channels_last=cl), img(64, 264, 28))
        yield f"NASNet stem 1x1 conv 96-42 vs 96-48, 64x56x56{tag}", \
            lambda: (convs([96, 42], k=1, channels_last=cl), img(64, 96, 56)), \
            lambda: (convs([96, 48], k=1, channels_last=cl), img(64, 96, 56))
    yield "SE bottleneck 96->4->96 vs 96->8->96 on 256x96x56x56", \
        lambda: (SE(96, 4), img(256, 96, 56)), lambda: (SE(96, 8), img(256, 96, 56))
    yield "SE bottleneck 480->20->480 vs 480->24->480 on 256x480x14x14", \
        lambda: (SE(480, 20), img(256, 480, 14)), lambda: (SE(480, 24), img(256, 480, 14))
    yield "DimeNet lin_rbf Linear(6, 128) vs Linear(8, 128), 1M edges", \
        lambda: (mlp([6, 128]), torch.randn(1 << 20, 6)), lambda: (mlp([8, 128]), torch.randn(1 << 20, 8))
    yield "DimeNet lin_sbf Linear(42, 8) vs Linear(48, 8), 4M triplets", \
        lambda: (mlp([42, 8]), torch.randn(1 << 22, 42)), lambda: (mlp([48, 8]), torch.randn(1 << 22, 48))
    yield "DIN attention MLP 144-36-1 vs 144-40-1, 1M rows", \
        lambda: (mlp([144, 36, 1]), torch.randn(1 << 20, 144)), lambda: (mlp([144, 40, 1]), torch.randn(1 << 20, 144))
    yield "DeepCTR 26 fields embedding_dim 4 vs 8 into an MLP, batch 65536", \
        lambda: (EmbedMLP(26, 4), torch.randint(0, 100000, (65536, 26))), \
        lambda: (EmbedMLP(26, 8), torch.randint(0, 100000, (65536, 26)))
    yield "Embedding rows 1025 vs 1032 (relative positions), 8x4096x4096 lookups dim 64", \
        lambda: (nn.Embedding(1025, 64), torch.randint(0, 1025, (8, 4096))), \
        lambda: (nn.Embedding(1032, 64), torch.randint(0, 1025, (8, 4096)))


def main() -> int:
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    torch.backends.cudnn.benchmark = True
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, fp16 autocast, fwd+bwd, median of 30\n")
    print("| case | unaligned ms | padded ms | unaligned / padded |")
    print("|---|---|---|---|")
    for name, bad, good in cases():
        torch.manual_seed(0)
        a = time_ms(*bad())
        b = time_ms(*good())
        print(f"| {name} | {a:.3f} | {b:.3f} | {a / b:.2f}x |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
