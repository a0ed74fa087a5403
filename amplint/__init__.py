"""amplint: find, fix and prove what breaks or slows PyTorch mixed-precision training.

``check`` and ``fix`` read source with :mod:`ast` and never import torch or the code
they read; ``from amplint import amp`` gives the apex-compatible AMP engine, loaded
(with torch) only when first used.
"""
__version__ = "0.1.0"


def __getattr__(name):
    # Lazy: `import amplint` must stay cheap for the linter (no torch import).
    if name in ("amp", "verify"):
        import importlib

        module = importlib.import_module(f"amplint.{name}")
        globals()[name] = module
        return module
    raise AttributeError(f"module 'amplint' has no attribute {name!r}")
