"""Loss scaler with apex semantics, plus a floor and validated state.

State (all host-side Python numbers, so ``state_dict`` needs no device sync):

* ``scale``      current loss scale (float). Dynamic: starts at ``2**16`` clamped into
                 ``[min_loss_scale, max_loss_scale]``.
* ``unskipped``  consecutive overflow-free ``scale_loss`` exits since the last change (apex
                 counts backward passes, not optimizer steps).
* ``skipped``    overflowing exits so far (each one skips the next ``optimizer.step()``).
* ``hysteresis`` / ``hysteresis_left``  with ``hysteresis=N`` (apex's
                 ``update_scale_hysteresis``, TransformerEngine's ``hysteresis``) an overflow
                 always skips the step but cuts the scale only once N overflows came in a
                 row; every further overflow in that run cuts it again, and an overflow-free
                 exit refills the count. N=1 is apex's plain dynamic scaler.

Per ``scale_loss`` exit: :meth:`clear_overflow_state`, one :meth:`unscale_` per optimizer,
then :meth:`update_scale` which reads the found-inf flag once (one host sync), reduced with
MAX over the default process group when distributed so every rank takes the same decision.
A static scaler never checks and never skips.

Limits (apex has none, GradScaler halves without bound):

* Every scale — static, ``min_loss_scale``, ``max_loss_scale``, or loaded from a checkpoint —
  lies in ``[SMALLEST_SCALE, LARGEST_SCALE] = [2**-24, 2**126]``. Below 2**-24 (fp16's
  smallest subnormal) a gradient of magnitude 1 times the scale rounds to 0 in fp16, so
  nothing can train; above 2**126, ``1/scale`` is no longer a normal fp32 number and the
  unscaled gradients lose their low bits or become 0.
* A dynamic scale never falls below ``min_loss_scale``, by default ``DEFAULT_MIN_LOSS_SCALE =
  2**-14`` (fp16's smallest normal). At that scale a unit gradient is still a normal fp16
  number, gradients up to 65504 * 2**14 (about 1.1e9) still fit, and ``1/scale`` = 16384 is
  exact. Getting there takes 30 overflows in a row from 2**16, which backoff from an ordinary
  overflow burst never does: it means the loss is inf/NaN at any scale (a bad batch, a
  diverged run). Without a floor the scale kept halving (5e-26 after 100 inf losses, so the
  next finite steps' gradients all underflowed to 0) until ``1/scale`` overflowed fp32 and
  every ``scale_loss`` raised. When an overflow happens at the floor a warning is given once;
  the step is still skipped, and the scale grows back (x2 every ``GROWTH_INTERVAL``
  overflow-free exits) once the losses are finite.
"""
from __future__ import annotations

import collections.abc
import math
import numbers
import warnings

import torch

GROWTH_INTERVAL = 2000
INIT_SCALE = 2.0 ** 16
DEFAULT_MAX_LOSS_SCALE = 2.0 ** 24  # apex's default
DEFAULT_MIN_LOSS_SCALE = 2.0 ** -14
SMALLEST_SCALE = 2.0 ** -24
LARGEST_SCALE = 2.0 ** 126
SCALE_RANGE_TEXT = "a finite number in [2**-24, 2**126]"


def check_scale(name: str, value, allow_none=False) -> float | None:
    """``value`` as a float if it is a usable loss scale; else TypeError/ValueError naming
    ``name``, the value and what is allowed. Numeric strings are accepted, as apex did
    (scripts pass ``--loss-scale`` through argparse as a string)."""
    if value is None and allow_none:
        return None
    number = value
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            number = None
    if isinstance(value, bool) or not isinstance(number, numbers.Real):
        raise TypeError(f"amp.initialize: {name}={value!r} is not a number. Fix: pass "
                        f"{SCALE_RANGE_TEXT}" + (" or 'dynamic'." if name == "loss_scale" else "."))
    number = float(number)
    if not (math.isfinite(number) and SMALLEST_SCALE <= number <= LARGEST_SCALE):
        raise ValueError(
            f"amp.initialize: {name}={value!r} is out of range: a loss scale must be "
            f"{SCALE_RANGE_TEXT} (below 2**-24 a unit gradient rounds to 0 in fp16; above "
            "2**126, 1/scale is not a normal fp32 number; 0, inf and NaN break training). Fix: "
            + ("pass loss_scale='dynamic' or a number in that range." if name == "loss_scale"
               else "pass a number in that range."))
    return number


def check_hysteresis(value) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"amp.initialize: hysteresis={value!r} must be an integer >= 1 (how "
                         "many overflows in a row cut the loss scale; 1 cuts at every one, as "
                         "apex's default scaler).")
    return int(value)


class LossScaler:
    def __init__(self, loss_scale, min_loss_scale=None, max_loss_scale=DEFAULT_MAX_LOSS_SCALE,
                 loss_id=0, hysteresis=1):
        """``loss_scale`` is ``"dynamic"`` or a float; the arguments are checked by
        ``initialize`` (:func:`check_scale`, :func:`check_hysteresis`)."""
        self.dynamic = loss_scale == "dynamic"
        self.hysteresis = hysteresis
        self.hysteresis_left = hysteresis
        self.loss_id = loss_id
        self.min_loss_scale = DEFAULT_MIN_LOSS_SCALE if min_loss_scale is None else min_loss_scale
        self.max_loss_scale = DEFAULT_MAX_LOSS_SCALE if max_loss_scale is None else max_loss_scale
        if self.dynamic:
            self.scale = max(self.min_loss_scale, min(self.max_loss_scale, INIT_SCALE))
        else:
            self.scale = float(loss_scale)
        self.unskipped = 0
        self.skipped = 0
        self._warned_floor = False
        self._found_inf: dict[torch.device, torch.Tensor] = {}
        self._inv_scale: dict[torch.device, tuple[float, torch.Tensor]] = {}

    # -- checkpoints -----------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """apex's entry plus ``dynamic``, so a restore can refuse the other kind of scaler."""
        state = {"loss_scale": float(self.scale), "unskipped": int(self.unskipped),
                 "dynamic": self.dynamic}
        if self.hysteresis > 1:
            state["hysteresis_left"] = int(self.hysteresis_left)
        return state

    def set_scale(self, value):
        """Set the current scale (apex scripts write ``loss_scalers[i]._loss_scale``),
        validated like ``loss_scale``: a dynamic scale must lie in [min, max]."""
        value = check_scale("loss_scale", value)
        if self.dynamic and not self.min_loss_scale <= value <= self.max_loss_scale:
            raise ValueError(
                f"amp: loss scaler {self.loss_id}: loss scale {value!r} is outside this run's "
                f"[min_loss_scale, max_loss_scale] = [{self.min_loss_scale!r}, "
                f"{self.max_loss_scale!r}]. Fix: initialize with min_loss_scale/max_loss_scale "
                "that include it.")
        self.scale = value

    def parse_state(self, key: str, entry, run: str) -> tuple[float, int, int]:
        """Validate a saved entry against this scaler; return ``(scale, unskipped,
        hysteresis_left)``.

        ``run`` describes this run for the messages (``"opt_level O3"``). Nothing is changed
        here, so a bad entry among several leaves every scaler as it was."""
        expected = "{'loss_scale': float, 'unskipped': int, 'dynamic': bool}"
        if not isinstance(entry, collections.abc.Mapping) or "loss_scale" not in entry or "unskipped" not in entry:
            raise RuntimeError(f"amp state entry {key!r} is malformed: {entry!r}; expected "
                               f"{expected} as saved by amp.state_dict().")
        extra = sorted(set(entry) - {"loss_scale", "unskipped", "dynamic", "hysteresis_left"},
                       key=str)
        if extra:
            raise RuntimeError(f"amp state entry {key!r} has unexpected field(s) {extra}; "
                               f"expected {expected}.")
        scale, unskipped = entry["loss_scale"], entry["unskipped"]
        if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
            raise RuntimeError(f"amp state entry {key!r}: loss_scale={scale!r} is not a number.")
        if isinstance(unskipped, bool) or not isinstance(unskipped, numbers.Integral):
            raise RuntimeError(f"amp state entry {key!r}: unskipped={unskipped!r} is not an "
                               "integer.")
        scale, unskipped = float(scale), int(unskipped)
        left = entry.get("hysteresis_left", self.hysteresis)
        if isinstance(left, bool) or not isinstance(left, numbers.Integral) or not (
                0 <= left <= self.hysteresis):
            raise RuntimeError(
                f"amp state entry {key!r}: hysteresis_left={left!r} is not an integer in "
                f"[0, {self.hysteresis}] (this run's hysteresis). Fix: initialize with the "
                "hysteresis the checkpoint was saved with.")
        saved_dynamic = entry.get("dynamic")
        if saved_dynamic is not None and not isinstance(saved_dynamic, bool):
            raise RuntimeError(f"amp state entry {key!r}: dynamic={saved_dynamic!r} is not "
                               "True or False.")
        fix = ("Fix: initialize with the opt_level and loss_scale the checkpoint was saved with "
               "(or, to start this run's scalers fresh on purpose, call "
               "amp.load_state_dict(amp.state_dict()) instead).")
        if saved_dynamic is not None and saved_dynamic != self.dynamic:
            saved_kind = ("a dynamic loss scaler (the O1/O2 fp16 default)" if saved_dynamic
                          else "a static loss scaler")
            this_kind = ("a dynamic loss scale" if self.dynamic
                         else f"a static loss scale of {self.scale}")
            raise RuntimeError(
                f"amp state entry {key!r} was saved by {saved_kind}, but this run ({run}) uses "
                f"{this_kind}. Loading it would " + (
                    "scale by a value that is never checked for overflow." if saved_dynamic else
                    "turn a fixed scale into one that changes.") + " " + fix)
        if not (math.isfinite(scale) and SMALLEST_SCALE <= scale <= LARGEST_SCALE):
            raise RuntimeError(f"amp state entry {key!r}: loss_scale={scale!r} is not "
                               f"{SCALE_RANGE_TEXT}.")
        if self.dynamic:
            if not self.min_loss_scale <= scale <= self.max_loss_scale:
                raise RuntimeError(
                    f"amp state entry {key!r}: loss_scale={scale!r} is outside this run's "
                    f"[min_loss_scale, max_loss_scale] = [{self.min_loss_scale!r}, "
                    f"{self.max_loss_scale!r}]. Fix: initialize with min_loss_scale/"
                    "max_loss_scale that include it.")
            if not 0 <= unskipped < GROWTH_INTERVAL:
                raise RuntimeError(
                    f"amp state entry {key!r}: unskipped={unskipped!r} is outside [0, "
                    f"{GROWTH_INTERVAL}) (the scale grows every {GROWTH_INTERVAL} "
                    "overflow-free steps, which resets the count).")
        else:
            if saved_dynamic is None and scale != self.scale:
                # apex's format carries no kind: a scale that differs from this run's fixed
                # one is a dynamic checkpoint (or a changed loss_scale), never safe to adopt.
                raise RuntimeError(
                    f"amp state entry {key!r} has loss_scale={scale!r}, but this run ({run}) "
                    f"uses a static loss scale of {self.scale}. " + fix)
            if unskipped < 0:
                raise RuntimeError(f"amp state entry {key!r}: unskipped={unskipped!r} is "
                                   "negative.")
        return scale, unskipped, int(left)

    def load_parsed(self, scale: float, unskipped: int, hysteresis_left: int | None = None):
        self.scale = scale
        self.unskipped = unskipped
        self.hysteresis_left = self.hysteresis if hysteresis_left is None else hysteresis_left

    # -- per backward ----------------------------------------------------------------------------
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
            if type(g).__name__ == "DTensor":  # FSDP2: unscale the local shard in place
                g = g.to_local()
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
            self.hysteresis_left = max(0, self.hysteresis_left - 1)
            if self.hysteresis_left == 0:
                if self.scale / 2.0 < self.min_loss_scale:
                    self._warn_floor()
                self.scale = max(self.min_loss_scale, self.scale / 2.0)
            self.unskipped = 0
            self.skipped += 1
            return True
        self.hysteresis_left = self.hysteresis
        self.unskipped += 1
        if self.unskipped >= GROWTH_INTERVAL:  # >=: a restored count can never freeze growth
            self.scale = min(self.max_loss_scale, self.scale * 2.0)
            self.unskipped = 0
        return False

    def _warn_floor(self):
        if self._warned_floor:
            return
        self._warned_floor = True
        warnings.warn(
            f"amplint.amp: loss scaler {self.loss_id} overflowed at its minimum loss scale "
            f"{self.min_loss_scale!r} (min_loss_scale): the loss or its gradients are inf/NaN "
            "even at this scale, so each such step is skipped without lowering the scale "
            "further. Check the data and the learning rate; the scale grows again (x2 every "
            f"{GROWTH_INTERVAL} overflow-free steps) once the losses are finite.",
            RuntimeWarning, stacklevel=5)  # the user's `with amp.scale_loss` line


def _distributed() -> bool:
    if not torch.distributed.is_available():
        return False
    import torch.distributed as dist
    return dist.is_initialized() and dist.get_world_size() > 1
