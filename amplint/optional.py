"""What needs an optional dependency, and the one line that says how to install it.

``pip install amplint`` is the linter alone (``check``, ``fix``, ``rules``, ``explain``
read source with :mod:`ast` and never import torch). The AMP engine (``amplint.amp``) and
the runtime verifier (``amplint verify``, ``fix --verify``) run models, so they need torch,
which the ``verify`` extra (alias ``amp``) installs.
"""
from __future__ import annotations

TORCH_EXTRA = 'pip install "amplint[verify]"'


def missing_torch(feature: str) -> str:
    """``amplint verify needs torch: pip install "amplint[verify]"``."""
    return f"{feature} needs torch: {TORCH_EXTRA}"


def is_missing_torch(exc: BaseException) -> bool:
    # only torch itself: a broken torch install (torch._C missing) keeps its own error
    return isinstance(exc, ModuleNotFoundError) and exc.name == "torch"
