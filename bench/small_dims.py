"""What an unaligned *small* layer size costs in fp16 (AMP201's small-size policy).

Each case times one forward + backward of a layer stack under ``torch.autocast(fp16)``
(CUDA events, median of 30 steps after 10 warm-up steps) at the unaligned width and at
the width padded to 8, as the benchmark's labels name them: MTCNN's 10/28-channel convs,
NASNet-mobile's 11/44-channel cells, an SE bottleneck of 4-28 channels on pooled
features, DimeNet's 6 radial features into a 128-wide Linear, a DIN MLP of 36, and an
embedding's row count (a lookup, no GEMM).

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


def cases():
    img = lambda b, c, s: torch.randn(b, c, s, s)
    yield "MTCNN PNet convs 3-10-16-32 vs 3-16-16-32, 256x48x48", \
        (convs([3, 10, 16, 32]), img(256, 3, 48)), (convs([3, 16, 16, 32]), img(256, 3, 48))
    yield "MTCNN RNet convs 3-28-48-64 vs 3-32-48-64, 256x24x24", \
        (convs([3, 28, 48, 64]), img(256, 3, 24)), (convs([3, 32, 48, 64]), img(256, 3, 24))
    yield "NASNet-mobile 1x1 convs 264-44-44 vs 264-48-48, 64x28x28", \
        (convs([264, 44, 44], k=1), img(64, 264, 28)), (convs([264, 48, 48], k=1), img(64, 264, 28))
    yield "SE bottleneck 96->4->96 vs 96->8->96 on 256x96x56x56", \
        (SE(96, 4), img(256, 96, 56)), (SE(96, 8), img(256, 96, 56))
    yield "DimeNet lin_rbf Linear(6, 128) vs Linear(8, 128), 1M rows", \
        (mlp([6, 128]), torch.randn(1 << 20, 6)), (mlp([8, 128]), torch.randn(1 << 20, 8))
    yield "DIN attention MLP 144-36-1 vs 144-40-1, 1M rows", \
        (mlp([144, 36, 1]), torch.randn(1 << 20, 144)), (mlp([144, 40, 1]), torch.randn(1 << 20, 144))
    yield "Embedding rows 1025 vs 1032 (relative positions), dim 64, 8x4096 ids", \
        (nn.Embedding(1025, 64), torch.randint(0, 1025, (8, 4096))), \
        (nn.Embedding(1032, 64), torch.randint(0, 1025, (8, 4096)))


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
        a = time_ms(*bad)
        b = time_ms(*good)
        print(f"| {name} | {a:.3f} | {b:.3f} | {a / b:.2f}x |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
