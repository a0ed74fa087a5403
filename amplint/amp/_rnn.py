"""O1 for recurrent layers: ``nn.RNN/LSTM/GRU`` and their cells run in the half dtype.

The modules reach their kernels through ``torch._VF`` (``_VF.lstm``, ``_VF.gru_cell`` ...),
so these are the patched attributes (as apex patched ``_VF``), listed in
``policy.O1_HALF``. The cells take plain tensors and go through the ordinary half wrapper
(weights through the per-iteration cast cache). The full layers need two more things:

* ``nn.RNNBase.check_input`` refuses an input whose dtype is not the weights' (fp32 under
  O1) unless ``torch.autocast`` is on; under O1 it is given a dtype-matching meta stand-in,
  so its dimension and size checks still run and nothing is copied.
* On CUDA, cuDNN wants all weights of a layer stack in one buffer in its own layout, or it
  warns ("not part of single contiguous chunk of memory") and compacts them on every call.
  The half copies are therefore written into one buffer laid out as cuDNN lays out a
  half buffer (the offsets come from ``torch._cudnn_rnn_flatten_weight`` once per shape
  set) with one ``torch.cat``, so the gradient flows back to each fp32 weight through
  views. The buffer is cached like any weight cast: per iteration, while no weight's
  version changed. Elsewhere (CPU, no cuDNN) each weight is cast on its own.
"""
from __future__ import annotations

import torch

_F16, _BF16, _F32 = torch.float16, torch.bfloat16, torch.float32
_FLOATS = (_F16, _BF16, _F32)
_Tensor = torch.Tensor

#: ``_VF`` functions of the full layers, with cuDNN's mode number and gates per layer.
FULL_LAYERS = {"rnn_relu": (0, 1), "rnn_tanh": (1, 1), "lstm": (2, 4), "gru": (3, 3)}
_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)


def layer_wrapper(state, orig, fn_name: str):
    """The half wrapper of one full-layer ``_VF`` function (unpacked or packed overload)."""
    mode, gates = FULL_LAYERS[fn_name]

    def wrapper(*args, **kwargs):
        if not state.active or kwargs or len(args) < 8:
            return orig(*args, **kwargs)
        # (input, hx, weights, has_biases, num_layers, dropout, train, bidirectional, batch_first)
        # or, packed, (data, batch_sizes, hx, weights, has_biases, num_layers, dropout, train,
        # bidirectional)
        packed = isinstance(args[1], _Tensor) and not args[1].is_floating_point()
        w = 3 if packed else 2  # where the weight list is
        x = args[0]
        if not (isinstance(x, _Tensor) and x.dtype in _FLOATS):
            return orig(*args)
        args = list(args)
        half = state.half
        args[0] = x if x.dtype is half else x.to(half)
        args[w - 1] = state.to_half(args[w - 1])
        args[w] = half_weights(state, args[w], mode, gates, num_layers=args[w + 2],
                               bidirectional=args[w + 5],
                               batch_first=args[w + 6] if w == 2 else False)
        return orig(*args)

    return wrapper


def half_weights(state, weights, mode, gates, num_layers, bidirectional, batch_first):
    half = state.half
    if all(t.dtype is half for t in weights) or not weights:
        return weights
    first = weights[0]
    if not (first.is_cuda and torch.backends.cudnn.enabled and torch.backends.cudnn.is_available()):
        return [state.to_half(t) for t in weights]
    cacheable = not _compiling() and all(t.is_leaf and t.requires_grad for t in weights)
    key = tuple(map(id, weights))
    grad = torch.is_grad_enabled()
    if cacheable:
        hit = state.rnn_cache.get(key)
        if (hit is not None and all(a is b for a, b in zip(hit[0], weights))
                and hit[1] == tuple(t._version for t in weights)
                and (hit[2] or not grad)):
            return hit[3]
    layout = _layout(state, weights, half, mode, gates, num_layers, bidirectional, batch_first)
    if layout is None:
        return [state.to_half(t) for t in weights]
    total, offsets = layout
    order = sorted(range(len(weights)), key=offsets.__getitem__)
    pieces, pos = [], 0
    for i in order:
        t = weights[i]
        if offsets[i] > pos:
            pieces.append(t.new_zeros(offsets[i] - pos, dtype=half))
        pieces.append(t.reshape(-1).to(half))
        pos = offsets[i] + t.numel()
    if pos < total:
        pieces.append(first.new_zeros(total - pos, dtype=half))
    flat = torch.cat(pieces)
    views = [flat[o:o + t.numel()].view(t.shape) for o, t in zip(offsets, weights)]
    if cacheable:
        state.rnn_cache[key] = (tuple(weights), tuple(t._version for t in weights),
                                flat.requires_grad, views)
    return views


def _layout(state, weights, half, mode, gates, num_layers, bidirectional, batch_first):
    """``(total elements, offset of each weight)`` of cuDNN's flat half buffer, or None when
    cuDNN cannot lay these weights out (then each is cast on its own)."""
    shapes = tuple(tuple(t.shape) for t in weights)
    key = (shapes, half, mode, num_layers, bool(bidirectional), weights[0].device)
    if key in state.rnn_layouts:
        return state.rnn_layouts[key]
    layout = None
    try:
        directions = 2 if bidirectional else 1
        per_layer = len(weights) // (num_layers * directions)
        has_proj = per_layer in (3, 5)
        hidden_size = shapes[0][0] // gates
        proj_size = shapes[per_layer - 1][0] if has_proj else 0
        copies = [torch.empty(s, dtype=half, device=weights[0].device) for s in shapes]
        with torch.no_grad():
            flat = torch._cudnn_rnn_flatten_weight(
                copies, per_layer, shapes[0][1], mode, hidden_size, proj_size, num_layers,
                bool(batch_first), bool(bidirectional))
        base = flat.data_ptr()
        size = flat.element_size()
        offsets = []
        for c in copies:
            offset = (c.data_ptr() - base) // size
            if not (c.is_contiguous() and 0 <= offset and offset + c.numel() <= flat.numel()):
                raise ValueError("weights not laid out in one buffer")
            offsets.append(offset)
        ends = sorted((o, o + c.numel()) for o, c in zip(offsets, copies))
        if any(a[1] > b[0] for a, b in zip(ends, ends[1:])):
            raise ValueError("overlapping weights")
        layout = (flat.numel(), offsets)
    except (RuntimeError, ValueError, AttributeError):
        layout = None
    state.rnn_layouts[key] = layout
    return layout


def check_input_wrapper(state, orig):
    """``nn.RNNBase.check_input`` that lets a half/fp32 input meet fp32 (or half) weights
    under O1: the dtype test sees a meta stand-in, the shape tests the real shape."""

    def check_input(self, input, batch_sizes):
        if state.active and isinstance(input, _Tensor):
            weights = self._flat_weights
            w = weights[0] if weights else None
            if (isinstance(w, _Tensor) and input.dtype is not w.dtype
                    and input.dtype in _FLOATS and w.dtype in _FLOATS):
                input = torch.empty(input.shape, dtype=w.dtype, device="meta")
        return orig(self, input, batch_sizes)

    return check_input
