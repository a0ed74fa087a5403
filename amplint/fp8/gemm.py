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
