"""Half-precision GEMMs on CPU, computed in fp32 and rounded once to the half dtype.

torch's CPU kernels for fp16/bf16 matrix products accumulate in fp32 and round the result
once -- as GPU Tensor Cores do -- but run 20-80x slower than the fp32 kernels (no half
GEMM units): a 50257-token LM head at O1 took seconds per step.  Computing the same product
in fp32 and casting the result to the half dtype is the same arithmetic (an fp32 sum of
exact products of half values, one rounding at the end); the two differ only in the order
of the fp32 additions, so at most in the last bit of a few elements.  Overflow to inf, NaN
propagation and underflow of the result behave the same.

Only products whose floating inputs all have the same half dtype are rewritten: mixed
dtypes go to torch's own kernel, so the "expected both tensors to have the same dtype"
errors that reveal an uncast op are raised as without the verifier.
"""
from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

_HALF = (torch.float16, torch.bfloat16)
_aten = torch.ops.aten
#: aten products that torch's CPU kernels compute with fp32 accumulation (forward and backward)
_PRODUCTS = frozenset(op for op in (
    _aten.mm, _aten.addmm, _aten.bmm, _aten.baddbmm, _aten.addbmm, _aten.mv, _aten.addmv, _aten.dot,
    _aten._addmm_activation, _aten.convolution, _aten.convolution_backward,
))


def _half_dtype(args, kwargs):
    """The one half dtype of every floating CPU tensor argument, else None."""
    dtype = None
    for value in list(args) + list(kwargs.values()):
        items = value if isinstance(value, (list, tuple)) else (value,)
        for t in items:
            if not isinstance(t, torch.Tensor) or not t.is_floating_point():
                continue
            if t.device.type != "cpu" or t.dtype not in _HALF or (dtype is not None and t.dtype != dtype):
                return None
            dtype = t.dtype
    return dtype


def _up(value):
    if isinstance(value, torch.Tensor) and value.dtype in _HALF:
        return value.float()
    if isinstance(value, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in value):
        return type(value)(_up(v) for v in value)
    return value


def _down(value, dtype):
    if isinstance(value, torch.Tensor) and value.dtype == torch.float32:
        return value.to(dtype)
    if isinstance(value, (list, tuple)):
        return type(value)(_down(v, dtype) for v in value)
    return value


class HalfGemmInFp32(TorchDispatchMode):
    """While active: CPU fp16/bf16 products (see the module docstring) run in fp32."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch wraps a mode's __torch_dispatch__ in torch._disable_dynamo, which imports
        # torch._dynamo (seconds) at the first op; the verifier never compiles
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.overloadpacket in _PRODUCTS and "out" not in kwargs:
            dtype = _half_dtype(args, kwargs)
            if dtype is not None:
                result = func(*_up(args), **{k: _up(v) for k, v in kwargs.items()})
                return _down(result, dtype)
        return func(*args, **kwargs)
