"""apex's ``_amp_state`` and ``amp.init``, as a compatibility view over the engine's state.

Training scripts written for apex read (and sometimes write) apex internals; the common
uses, found in public training code, work unchanged:

* ``amp._amp_state.loss_scalers[i].loss_scale()`` and ``._loss_scale`` (log the scale; a
  write sets it, validated like ``initialize(loss_scale=...)``), ``._unskipped``,
  ``.dynamic``, ``._min_loss_scale``/``._max_loss_scale``;
* ``amp._amp_state.opt_properties.<option>`` and ``.options[...]`` (``master_weights``,
  ``patch_torch_functions``, ``cast_model_type`` ...), read-only;
* ``amp._amp_state.allow_incoming_model_not_fp32 = True`` (the next ``initialize`` accepts
  half parameters; the ``initialize`` keyword of the same name wins), ``.verbosity``;
* ``amp._amp_state.handle``: ``_clear_cache()``, ``_deactivate()`` (= ``amp.reset()``),
  ``is_active()``;
* ``amp.init(enabled=True, loss_scale="dynamic", enable_caching=True, verbose=False,
  allow_banned=False)``: apex's function-patching entry point, i.e. O1 casting without a
  model (``initialize`` at O1 on an empty module); returns the handle.

Nothing here holds state of its own: every read goes to the engine (``_frontend.ENGINE``),
so it is never stale. Any other attribute raises ``AttributeError`` naming what is supported.
``from amplint.amp._amp_state import _amp_state, master_params`` works as apex's did
(``_amp_state.py`` puts the view in its own place in ``sys.modules``).
"""
from __future__ import annotations

from torch import nn

from . import _frontend
from ._casting import CASTS


class LossScalerView:
    """apex's ``LossScaler`` as scripts read it: scaler ``loss_id`` of the live session."""

    def __init__(self, loss_id: int):
        self._loss_id = loss_id

    def _scaler(self):
        return _frontend._scaler(self._loss_id)

    def loss_scale(self) -> float:
        return self._scaler().scale

    @property
    def _loss_scale(self) -> float:
        return self._scaler().scale

    @_loss_scale.setter
    def _loss_scale(self, value):
        self._scaler().set_scale(value)

    @property
    def _unskipped(self) -> int:
        return self._scaler().unskipped

    @property
    def dynamic(self) -> bool:
        return self._scaler().dynamic

    @property
    def _min_loss_scale(self) -> float:
        return self._scaler().min_loss_scale

    @property
    def _max_loss_scale(self) -> float:
        return self._scaler().max_loss_scale

    def __repr__(self):
        return f"<amplint.amp loss scaler {self._loss_id}: scale {self.loss_scale()}>"


class PropertiesView:
    """apex's ``opt_properties``: the current session's options, read-only."""

    def _options(self) -> dict:
        props = _frontend.ENGINE.props
        return props.as_dict() if props is not None else {"enabled": False}

    @property
    def options(self) -> dict:
        return self._options()

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        options = self._options()
        if name in options:
            return options[name]
        raise AttributeError(f"amp._amp_state.opt_properties has no option {name!r}; options: "
                             f"{sorted(options)}")

    def __setattr__(self, name, value):
        raise AttributeError("amp._amp_state.opt_properties is a read-only view in amplint. "
                             f"Fix: pass {name}=... to amp.initialize.")


class HandleView:
    """apex's O1 handle."""

    def is_active(self) -> bool:
        return CASTS.active

    @property
    def _is_active(self) -> bool:
        return CASTS.active

    def _clear_cache(self):
        CASTS.clear_cache()

    def _deactivate(self):
        _frontend.reset()


class AmpStateView:
    """``amp._amp_state``: see the module docstring for what it supports."""

    _SUPPORTED = ("loss_scalers", "opt_properties", "allow_incoming_model_not_fp32", "verbosity",
                  "min_loss_scale", "max_loss_scale", "handle", "master_params", "_amp_state")

    @property
    def loss_scalers(self) -> list:
        return [LossScalerView(i) for i in range(len(_frontend.ENGINE.scalers))]

    @property
    def opt_properties(self) -> PropertiesView:
        return PropertiesView()

    @property
    def allow_incoming_model_not_fp32(self) -> bool:
        return _frontend.ENGINE.allow_incoming_model_not_fp32

    @allow_incoming_model_not_fp32.setter
    def allow_incoming_model_not_fp32(self, value):
        if not isinstance(value, bool):
            raise TypeError(f"_amp_state.allow_incoming_model_not_fp32 must be True or False, "
                            f"got {value!r}")
        _frontend.ENGINE.allow_incoming_model_not_fp32 = value

    @property
    def verbosity(self) -> int:
        return _frontend.ENGINE.verbosity

    @verbosity.setter
    def verbosity(self, value):
        _frontend.ENGINE.verbosity = value

    @property
    def min_loss_scale(self):
        return _frontend._scaler(0).min_loss_scale

    @property
    def max_loss_scale(self):
        return _frontend._scaler(0).max_loss_scale

    @property
    def handle(self) -> HandleView:
        return HandleView()

    @property
    def _amp_state(self):  # ``from amplint.amp._amp_state import _amp_state``
        return self

    master_params = staticmethod(_frontend.master_params)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(
            f"amp._amp_state.{name} is not part of amplint's apex compatibility view (supported: "
            f"{', '.join(self._SUPPORTED)}); the engine's own API is amp.loss_scale(i), "
            "amp.skipped_steps(i), amp.properties().")

    def __setattr__(self, name, value):
        if isinstance(getattr(type(self), name, None), property) and getattr(
                type(self), name).fset is not None:
            return object.__setattr__(self, name, value)
        raise AttributeError(f"amp._amp_state.{name} cannot be set in amplint (supported writes: "
                             "allow_incoming_model_not_fp32, verbosity, and loss_scalers[i]."
                             "_loss_scale).")


_amp_state = AmpStateView()


def init(enabled=True, loss_scale="dynamic", enable_caching=True, verbose=False,
         allow_banned=False):
    """apex's legacy ``amp.init``: O1 function casting for the whole process, no model or
    optimizer (``initialize`` at O1 on an empty module); returns ``_amp_state.handle``."""
    _frontend.initialize(nn.Module(), enabled=enabled, opt_level="O1", loss_scale=loss_scale,
                         verbosity=2 if verbose else 0, allow_banned=allow_banned)
    CASTS.caching = bool(enable_caching)
    return _amp_state.handle


master_params = _frontend.master_params
