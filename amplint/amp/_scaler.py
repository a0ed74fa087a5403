"""Loss scaler with apex semantics.

State (all host-side Python numbers, so ``state_dict`` needs no device sync):

* ``scale``      current loss scale (float). Dynamic: starts at ``min(2**16, max_loss_scale)``.
* ``unskipped``  consecutive overflow-free ``scale_loss`` exits since the last change (apex
                 counts backward passes, not optimizer steps).
* ``skipped``    overflowing exits so far (each one skips the next ``optimizer.step()``).

Per ``scale_loss`` exit: :meth:`clear_overflow_state`, one :meth:`unscale_` per optimizer,
then :meth:`update_scale` which reads the found-inf flag once (one host sync), reduced with
MAX over the default process group when distributed so every rank takes the same decision.
A static scaler never checks and never skips.
"""
from __future__ import annotations

import torch

GROWTH_INTERVAL = 2000
INIT_SCALE = 2.0 ** 16


class LossScaler:
    def __init__(self, loss_scale, min_loss_scale=None, max_loss_scale=2.0 ** 24):
        self.dynamic = loss_scale == "dynamic"
        self.min_loss_scale = min_loss_scale
        self.max_loss_scale = max_loss_scale
        self.scale = min(max_loss_scale, INIT_SCALE) if self.dynamic else float(loss_scale)
        self.unskipped = 0
        self.skipped = 0
        self._found_inf: dict[torch.device, torch.Tensor] = {}
        self._inv_scale: dict[torch.device, tuple[float, torch.Tensor]] = {}

    def clear_overflow_state(self):
        for t in self._found_inf.values():
            t.zero_()

    def _inv(self, device):
        hit = self._inv_scale.get(device)
        if hit is None or hit[0] != self.scale:
            hit = (self.scale, torch.full((), 1.0 / self.scale, dtype=torch.float32, device=device))
            self._inv_scale[device] = hit
        return hit[1]

    def unscale_(self, grads):
        """Multiply ``grads`` in place by 1/scale; dynamic scalers also record inf/NaN."""
        if not grads:
            return
        groups: dict[tuple, list] = {}
        for g in grads:
            groups.setdefault((g.device, g.dtype), []).append(g)
        for (device, _), group in groups.items():
            if self.dynamic:
                found = self._found_inf.get(device)
                if found is None:
                    found = self._found_inf[device] = torch.zeros((), dtype=torch.float32, device=device)
                torch._amp_foreach_non_finite_check_and_unscale_(group, found, self._inv(device))
            elif self.scale != 1.0:
                torch._foreach_mul_(group, 1.0 / self.scale)

    def _overflow(self, reduce_device) -> bool:
        flags = list(self._found_inf.values())
        if flags:
            found = flags[0] if len(flags) == 1 else sum(f.to(flags[0].device) for f in flags)
        else:
            found = None
        if _distributed():
            import torch.distributed as dist
            device = reduce_device if reduce_device is not None else (
                found.device if found is not None else torch.device("cpu"))
            flag = torch.zeros((), dtype=torch.float32, device=device) if found is None else found.to(device)
            if flag is found:
                flag = flag.clone()
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            found = flag
        return bool(found.item()) if found is not None else False

    def update_scale(self, reduce_device=None) -> bool:
        """apex ``update_scale``: returns True when the next optimizer step must be skipped."""
        if not self.dynamic:
            self.unskipped += 1
            return False
        if self._overflow(reduce_device):
            self.scale = self.scale / 2.0
            if self.min_loss_scale:  # apex: a floor of 0/None means no floor
                self.scale = max(self.min_loss_scale, self.scale)
            self.unskipped = 0
            self.skipped += 1
            return True
        self.unskipped += 1
        if self.unskipped == GROWTH_INTERVAL:
            self.scale = min(self.max_loss_scale, self.scale * 2.0)
            self.unskipped = 0
        return False


def _distributed() -> bool:
    if not torch.distributed.is_available():
        return False
    import torch.distributed as dist
    return dist.is_initialized() and dist.get_world_size() > 1
