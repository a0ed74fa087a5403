"""Limits of the low-precision formats amplint reasons about (measured: docs/fp16-facts.md).

Pure data: the linter reads these without importing torch.
"""
from __future__ import annotations

import dataclasses
import math


@dataclasses.dataclass(frozen=True)
class Format:
    name: str
    max: float  # largest finite value
    smallest_normal: float
    smallest_subnormal: float
    eps: float  # distance from 1.0 to the next value
    #: Tensor Core alignment (elements) that GEMM / conv dimensions want
    alignment: int

    def overflows(self, value: float) -> bool:
        """True when ``value`` does not fit: it rounds to +-inf (or raises on a fill)."""
        if math.isnan(value) or math.isinf(value):
            return False
        # values round to max up to max + half an ulp; masked_fill raises beyond max itself
        return abs(value) > self.max

    def underflows_to_zero(self, value: float) -> bool:
        """True when a non-zero ``value`` rounds to 0 (below half the smallest subnormal)."""
        return value != 0 and abs(value) < self.smallest_subnormal / 2

    def is_subnormal(self, value: float) -> bool:
        return value != 0 and not self.underflows_to_zero(value) and abs(value) < self.smallest_normal


FORMATS: dict[str, Format] = {
    "fp16": Format("float16", 65504.0, 6.103515625e-05, 5.960464477539063e-08, 9.765625e-04, 8),
    "bf16": Format("bfloat16", 3.3895313892515355e38, 1.1754943508222875e-38, 9.183549615799121e-41, 7.8125e-03, 8),
    "fp8": Format("float8_e4m3fn", 448.0, 0.015625, 0.001953125, 0.125, 16),
    "int8": Format("int8", 127.0, 1.0, 1.0, 1.0, 16),
}

TARGETS = tuple(FORMATS)


def fmt(value: float) -> str:
    """A short human form of a number for messages: 1e-08, -1e+09, 65504."""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer() and abs(value) < 1e6):
        return str(int(value))
    return f"{value:.3g}"
