"""When an fp8 GEMM pays: the break-even M x K x N of torchao's recipes, measured on an
H200 (``bench/fp8_gemm.py``, results in ``bench/RESULTS.md``).

A ``Float8Linear`` runs three fp8 GEMMs per training step (output, grad input, grad
weight) but first computes an amax and casts its input, weight and output gradient
(tensorwise: one scale per tensor; rowwise: one per row).  Those casts read and write
every element: their cost grows with M*K + K*N + M*N, the GEMM's saving with M*K*N.  Below
the break-even the casts cost more than the faster matmul saves and the layer is slower
in fp8 than in bf16.

Pure data: the linter reads it without importing torch.
"""
from __future__ import annotations

import dataclasses

#: tokens per step assumed by the linter, which cannot see the batch: a micro-batch of
#: 8 sequences of 1024 (``fp8-plan`` and ``verify --target fp8`` take ``--tokens``)
DEFAULT_TOKENS = 8192
#: torch._scaled_mm (the fp8 GEMM) needs both sizes of the weight to be multiples of 16
ALIGNMENT = 16
RECIPES = ("tensorwise", "rowwise")


@dataclasses.dataclass(frozen=True)
class BreakEven:
    recipe: str
    #: M*K*N from which the measured fp8 forward + backward is faster than bf16
    mkn: int
    #: below this K or N no measured shape gained, whatever M
    min_side: int
    #: one measured point on each side, for messages: (M, K, N, bf16 ms, fp8 ms)
    slower: tuple
    faster: tuple

    def gains(self, m: int, k: int, n: int) -> bool:
        return m * k * n >= self.mkn and min(k, n) >= self.min_side


#: bench/fp8_gemm.py on an H200, torch 2.11.0+cu130, torchao 0.18.0, GPU kernel time of one
#: compiled forward + backward (bench/RESULTS.md; bench/fp8_results/fp8_gemm_h200.json).
#: ``fit_break_even`` of that run: tensorwise gains from M*K*N = 2**36 (6.9e10) with K and N
#: >= 1024, rowwise from 2**39 (5.5e11) with K and N >= 2048
BREAK_EVEN: dict[str, BreakEven] = {
    "tensorwise": BreakEven("tensorwise", 2**36, 1024, (4096, 1024, 8192, 0.287, 0.302), (4096, 2048, 8192, 0.565, 0.493)),
    "rowwise": BreakEven("rowwise", 2**39, 2048, (4096, 8192, 8192, 2.414, 2.489), (16384, 4096, 8192, 4.952, 3.828)),
}


def mkn_text(value: int) -> str:
    """2**36 -> '6.9e10'."""
    return f"{value:.2g}".replace("+", "")


def fit_break_even(rows: list[dict], recipe: str) -> BreakEven:
    """The break-even of ``bench/fp8_gemm.py``'s rows (each ``M, K, N, bf16_ms,
    <recipe>_ms``): the narrowest side that ever gained, and from there the M*K*N above
    which every measured shape gained (conservative: one slower shape above a point moves
    the break-even past it)."""
    points = [(r["M"], r["K"], r["N"], r["bf16_ms"], r[f"{recipe}_ms"]) for r in rows
              if f"{recipe}_ms" in r and "bf16_ms" in r]
    gaining = [p for p in points if p[4] < p[3]]
    if not gaining:
        return BreakEven(recipe, 2**62, 2**31, max(points, key=lambda p: p[0] * p[1] * p[2]) if points else (), ())
    min_side = min(min(p[1], p[2]) for p in gaining)
    wide = [p for p in points if min(p[1], p[2]) >= min_side]
    losing = [p for p in wide if p[4] >= p[3]]
    worst = max(losing, key=lambda p: p[0] * p[1] * p[2]) if losing else None
    above = sorted((p for p in wide if worst is None or p[0] * p[1] * p[2] > worst[0] * worst[1] * worst[2]),
                   key=lambda p: p[0] * p[1] * p[2])
    if not above:
        return BreakEven(recipe, 2**62, min_side, worst or (), ())
    first = above[0]
    return BreakEven(recipe, first[0] * first[1] * first[2], min_side, worst or (), first)


#: bf16 ms / fp8 ms of each measured shape (GPU kernel time, the same run): (M, K, N) ->
#: (tensorwise, rowwise); above 1 fp8 is faster
SPEEDUP: dict[tuple[int, int, int], tuple[float, float]] = {
    (4096, 512, 512): (0.59, 0.37), (4096, 512, 1024): (0.60, 0.37), (4096, 512, 2048): (0.66, 0.43),
    (4096, 512, 4096): (0.73, 0.49), (4096, 512, 8192): (0.75, 0.52), (4096, 1024, 512): (0.61, 0.35),
    (4096, 1024, 1024): (0.70, 0.41), (4096, 1024, 2048): (0.80, 0.51), (4096, 1024, 4096): (0.90, 0.61),
    (4096, 1024, 8192): (0.95, 0.67), (4096, 2048, 512): (0.68, 0.38), (4096, 2048, 1024): (0.81, 0.47),
    (4096, 2048, 2048): (0.94, 0.59), (4096, 2048, 4096): (1.08, 0.73), (4096, 2048, 8192): (1.14, 0.82),
    (4096, 4096, 512): (0.74, 0.41), (4096, 4096, 1024): (0.89, 0.51), (4096, 4096, 2048): (1.13, 0.70),
    (4096, 4096, 4096): (1.34, 0.90), (4096, 4096, 8192): (1.50, 1.07), (4096, 8192, 512): (0.78, 0.37),
    (4096, 8192, 1024): (0.97, 0.50), (4096, 8192, 2048): (1.23, 0.72), (4096, 8192, 4096): (1.42, 0.93),
    (4096, 8192, 8192): (1.36, 0.97), (16384, 512, 512): (0.58, 0.38), (16384, 512, 1024): (0.65, 0.44),
    (16384, 512, 2048): (0.74, 0.52), (16384, 512, 4096): (0.81, 0.60), (16384, 512, 8192): (0.78, 0.70),
    (16384, 1024, 512): (0.68, 0.40), (16384, 1024, 1024): (0.79, 0.51), (16384, 1024, 2048): (0.94, 0.65),
    (16384, 1024, 4096): (1.05, 0.80), (16384, 1024, 8192): (1.08, 0.96), (16384, 2048, 512): (0.76, 0.42),
    (16384, 2048, 1024): (0.96, 0.57), (16384, 2048, 2048): (1.17, 0.80), (16384, 2048, 4096): (1.36, 1.04),
    (16384, 2048, 8192): (1.25, 1.11), (16384, 4096, 512): (0.83, 0.43), (16384, 4096, 1024): (1.04, 0.62),
    (16384, 4096, 2048): (1.35, 0.87), (16384, 4096, 4096): (1.44, 1.09), (16384, 4096, 8192): (1.43, 1.29),
    (16384, 8192, 512): (0.85, 0.49), (16384, 8192, 1024): (1.10, 0.68), (16384, 8192, 2048): (1.32, 0.92),
    (16384, 8192, 4096): (1.51, 1.23), (16384, 8192, 8192): (1.54, 1.35),
}


def nearest_speedup(m: int, k: int, n: int, recipe: str) -> tuple[tuple[int, int, int], float]:
    """The measured shape nearest to (m, k, n) on a log scale, and its fp8 speedup."""
    import math

    def distance(shape):
        return sum(abs(math.log2(a) - math.log2(max(b, 1))) for a, b in zip(shape, (m, k, n)))

    shape = min(SPEEDUP, key=distance)
    return shape, SPEEDUP[shape][RECIPES.index(recipe)]
