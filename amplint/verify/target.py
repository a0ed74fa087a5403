"""Loading the user's model: ``PATH::FACTORY`` targets, isolated imports, user source files,
and where each module instance was constructed.

``verify`` imports and runs the user's code by design.  Every import happens inside
:func:`isolated_import`, which puts ``sys.path`` and ``sys.modules`` back afterwards (so two
targets with a sibling ``model.py`` each, or a fixed copy of the same files, never see each
other's modules) and restores the AMP engine's process-wide function registrations (a
``register_half_function`` call made at import time by one target must not leak into the next).
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import importlib
import importlib.util
import inspect
import os
import sys
import sysconfig
import weakref
from typing import Any, Callable, Optional

import amplint

from .records import ClassSource



@functools.lru_cache(maxsize=None)
def canonical(path: str) -> str:
    """The one spelling of a file's path used everywhere in verify: absolute, ``..`` and
    symlinks resolved.  ``co_filename``, ``__file__`` and traceback paths keep whatever path
    the import used (``harness/../src/model.py``, a symlink), the linter gets another; only
    their real paths compare equal."""
    return os.path.realpath(path)


AMPLINT_DIR = os.path.dirname(canonical(amplint.__file__))
AMP_DIR = os.path.join(AMPLINT_DIR, "amp")
_STDLIB_DIRS = tuple({canonical(p) for p in (sysconfig.get_paths().get("stdlib"), sysconfig.get_paths().get("platstdlib"),
                                                    sysconfig.get_paths().get("purelib"), sysconfig.get_paths().get("platlib")) if p})


class TargetError(Exception):
    """A target that cannot be loaded: bad ``PATH::FACTORY``, missing file or callable, or a
    factory that does not return a model and inputs."""


@dataclasses.dataclass
class Target:
    """``path::factory`` (``factory`` may be empty: then ``example`` is tried)."""

    path: str
    factory: str = "example"

    @classmethod
    def parse(cls, spec: str, base: str = ".") -> "Target":
        path, sep, factory = spec.partition("::")
        if not path:
            raise TargetError(f"{spec!r}: expected PATH::FACTORY (e.g. model.py::example)")
        if sep and not factory.isidentifier():
            raise TargetError(f"{spec!r}: {factory!r} is not a Python name")
        full = os.path.abspath(os.path.join(base, path))
        if not os.path.isfile(full):
            # the path as typed, never this machine's absolute path; and the likely slip
            head, colon, tail = path.rpartition(":")
            if colon and not sep and tail.isidentifier() and os.path.isfile(os.path.join(base, head)):
                raise TargetError(f"{spec!r}: expected PATH::FACTORY (two colons): did you mean '{head}::{tail}'?")
            raise TargetError(f"{spec!r}: no such file: {path} (a target is PATH::FACTORY, e.g. model.py::example)")
        return cls(full, factory or "example")

    def __str__(self) -> str:
        return f"{os.path.relpath(self.path)}::{self.factory}"


def is_user_file(path: Optional[str]) -> bool:
    """A Python file that belongs to the user, not to the standard library, an installed
    package (torch, numpy...) or amplint itself."""
    if not path or not path.endswith(".py"):
        return False
    path = canonical(path)
    if path.startswith(AMPLINT_DIR + os.sep):
        return False
    if any(path.startswith(d + os.sep) for d in _STDLIB_DIRS):
        return False
    return "site-packages" not in path and "dist-packages" not in path


def _package_root(path: str) -> tuple[str, str]:
    """(sys.path entry, dotted module name) for a file, walking up through packages."""
    folder, name = os.path.split(path)
    parts = [name[:-3]]
    while os.path.isfile(os.path.join(folder, "__init__.py")):
        folder, pkg = os.path.split(folder)
        parts.insert(0, pkg)
    return folder, ".".join(parts)


def _amp_registry():
    try:
        from amplint.amp._casting import CASTS
    except Exception:  # pragma: no cover - engine missing
        return None
    return CASTS


@contextlib.contextmanager
def isolated_import(path_roots: tuple[str, ...] = ()):
    """Run the block with ``path_roots`` first on ``sys.path``; afterwards remove every module
    it imported from user files and put back what was there (and the engine registrations)."""
    before = dict(sys.modules)
    saved_path = list(sys.path)
    casts = _amp_registry()
    saved_registry = dict(casts.registry) if casts is not None else None
    sys.path[:0] = [r for r in path_roots]
    try:
        yield
    finally:
        for name, mod in list(sys.modules.items()):
            if before.get(name) is mod:
                continue
            if is_user_file(getattr(mod, "__file__", None)) or name.startswith("amplint_verify_target_"):
                del sys.modules[name]
        for name, mod in before.items():
            if name not in sys.modules:
                sys.modules[name] = mod
        sys.path[:] = saved_path
        if casts is not None:
            if casts.is_installed:
                casts.uninstall()
            casts.registry.clear()
            casts.registry.update(saved_registry)


_COUNTER = [0]


def import_file(path: str):
    """Import ``path`` as a module (its folder, or its package root, goes on sys.path)."""
    root, dotted = _package_root(path)
    if root not in sys.path:
        sys.path.insert(0, root)
    # a package member by its dotted name; a file whose name is no module name
    # (`model.v2.py`) only by its path: import_module("model.v2") would import `model`
    stem = os.path.basename(path)[:-len(".py")]
    if "." in dotted and stem.isidentifier() and all(part.isidentifier() for part in dotted.split(".")):
        stale = sys.modules.get(dotted)
        if stale is not None and canonical(getattr(stale, "__file__", "") or "") != canonical(path):
            for name in [n for n in sys.modules if n == dotted or n.startswith(dotted.split(".")[0] + ".") or n == dotted.split(".")[0]]:
                del sys.modules[name]
        return importlib.import_module(dotted)
    _COUNTER[0] += 1
    name = f"amplint_verify_target_{_COUNTER[0]}_" + "".join(c if c.isalnum() else "_" for c in dotted)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# --- construction sites ---------------------------------------------------------------------

class ConstructionSites:
    """While active, records for every ``nn.Module`` built the first user source line outside
    the module's own ``__init__`` chain: where ``nn.Linear(771, 30522)`` was written."""

    def __init__(self, user_file: Callable[[str], bool]):
        self.user_file = user_file
        self.sites: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()

    @contextlib.contextmanager
    def recording(self):
        import torch.nn as nn

        original = nn.Module.__init__
        sites, user_file = self.sites, self.user_file

        def init(module, *args, **kwargs):
            original(module, *args, **kwargs)
            try:
                frame = sys._getframe(1)
                while frame is not None:
                    if frame.f_locals.get("self") is not module and user_file(frame.f_code.co_filename):
                        sites[module] = (canonical(frame.f_code.co_filename), frame.f_lineno)
                        break
                    frame = frame.f_back
            except Exception:
                pass

        nn.Module.__init__ = init
        try:
            yield self
        finally:
            nn.Module.__init__ = original

    def get(self, module):
        return self.sites.get(module)


def class_source(cls) -> Optional[ClassSource]:
    """File, class line and forward line of a module class (None for classes without source)."""
    try:
        path = inspect.getsourcefile(cls)
        _, line = inspect.getsourcelines(cls)
    except (TypeError, OSError):
        return None
    info = ClassSource(canonical(path) if path else None, line)
    try:
        lines, start = inspect.getsourcelines(cls)
        info.end_line = start + len(lines) - 1
    except (TypeError, OSError):
        pass
    forward = cls.__dict__.get("forward")
    if forward is not None:
        try:
            _, fline = inspect.getsourcelines(forward)
            info.forward_line = fline
        except (TypeError, OSError):
            pass
    return info


# --- factories ----------------------------------------------------------------------------

def normalize_example(result, where: str):
    """``(model, inputs)`` or a model with ``example_inputs`` -> (model, args tuple, kwargs dict)."""
    import torch.nn as nn

    if isinstance(result, nn.Module):
        model = result
        if not hasattr(model, "example_inputs"):
            raise TargetError(f"{where} returned a model without an `example_inputs` attribute; return (model, example_inputs)")
        inputs = model.example_inputs
        if callable(inputs) and not hasattr(inputs, "shape"):
            inputs = inputs()
    elif isinstance(result, (tuple, list)) and len(result) == 2 and isinstance(result[0], nn.Module):
        model, inputs = result
    else:
        got = type(result).__name__
        if isinstance(result, (tuple, list)):
            got = f"({', '.join(type(r).__name__ for r in result[:3])}{', ...' if len(result) > 3 else ''})"
        raise TargetError(f"{where} must return (model, example_inputs) or a model with `example_inputs`, where the "
                          f"model is a torch.nn.Module; got {got}")
    if isinstance(inputs, dict):
        return model, (), dict(inputs)
    if isinstance(inputs, (tuple, list)):
        return model, tuple(inputs), {}
    return model, (inputs,), {}


def factory_from_module(module, name: str, where: str) -> Callable[[], Any]:
    obj = getattr(module, name, None)
    if obj is None:
        known = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_") and getattr(v, "__module__", None) == module.__name__)
        raise TargetError(f"{where}: no callable named {name!r} (found: {', '.join(known) or 'none'})")
    if not callable(obj):
        raise TargetError(f"{where}: {name!r} is not callable")
    return obj


def model_factory(model, inputs) -> Callable[[], Any]:
    """A factory over an existing fp32 model: a deep copy per opt level."""
    import torch

    state = copy.deepcopy(model)

    def make():
        return copy.deepcopy(state), copy.deepcopy(inputs) if not isinstance(inputs, torch.Tensor) else inputs.clone()

    return make
