"""Limits of the low-precision formats amplint reasons about (measured: docs/fp16-facts.md).

Pure data: the linter reads these without importing torch.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Optional


@dataclasses.dataclass(frozen=True)
class Format:
    """One target's low-precision format, the record rules read (``ctx.format``) instead of
    comparing the ``target`` string."""

    name: str  # the torch dtype name: "float16"
    max: float  # largest finite value
    smallest_normal: float
    smallest_subnormal: float
    eps: float  # distance from 1.0 to the next value
    #: Tensor Core alignment (elements) that GEMM / conv dimensions want
    alignment: int
    #: the ``target`` setting that selects it: "fp16"
    key: str = ""
    #: the canonical torch dtype names a tensor of this target has (fp8: both flavours)
    dtypes: frozenset = frozenset()
    #: fp32's exponent range (bf16): overflow and underflow are fp32's, only precision is lost
    wide_exponent: bool = False
    #: tensor values have this dtype (int8 is quantisation: scales, not a value dtype)
    value_format: bool = True
    #: largest n such that every integer 0..n is exact (positions, counts; bench/bf16_facts.py)
    exact_integer_limit: int = 0
    #: the dtype activations have under this target (fp8 / int8 quantise GEMM inputs only:
    #: None, the activations are not modelled as that format)
    activations: Optional[str] = None

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


FP16 = Format("float16", 65504.0, 6.103515625e-05, 5.960464477539063e-08, 9.765625e-04, 8, key="fp16",
              dtypes=frozenset({"float16"}), exact_integer_limit=2048, activations="float16")
BF16 = Format("bfloat16", 3.3895313892515355e38, 1.1754943508222875e-38, 9.183549615799121e-41, 7.8125e-03, 8,
              key="bf16", dtypes=frozenset({"bfloat16"}), wide_exponent=True, exact_integer_limit=256,
              activations="bfloat16")
FP8 = Format("float8_e4m3fn", 448.0, 0.015625, 0.001953125, 0.125, 16, key="fp8",
             dtypes=frozenset({"float8_e4m3fn", "float8_e5m2"}), exact_integer_limit=16)
INT8 = Format("int8", 127.0, 1.0, 1.0, 1.0, 16, key="int8", dtypes=frozenset({"int8"}), value_format=False,
              exact_integer_limit=127)

FORMATS: dict[str, Format] = {f.key: f for f in (FP16, BF16, FP8, INT8)}
#: torch dtype name -> its format ("float16" -> FP16)
BY_DTYPE: dict[str, Format] = {f.name: f for f in FORMATS.values()}

TARGETS = tuple(FORMATS)


def fmt(value: float) -> str:
    """A short human form of a number for messages: 1e-08, -1e+09, 65504."""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer() and abs(value) < 1e6):
        return str(int(value))
    return f"{value:.3g}"
