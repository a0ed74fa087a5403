"""AMP102's record of how ``x + eps`` is used (a typed fact, not message text)."""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Stabiliser:
    """How ``x + eps`` is used where it needs eps > 0: ``why`` is the message's clause;
    ``rooted``: under a root or a negative power (a norm's denominator: fixed by computing
    the norm in fp32); ``op``: a stabilising function or method (``log``, ``sqrt``), not
    an operator -- outside model code only such a call marks a tensor."""

    why: str
    rooted: bool = False
    op: bool = False

