"""Per-file and cross-file facts that rules ask for by name: ``ctx.get(Analysis)``.

Every analysis here is a class taking the :class:`~amplint.context.FileContext`; the
context builds it on first use and keeps it for the file, so an analysis no rule asks
for costs nothing.  Cross-file facts are collectors (:data:`COLLECTORS`): each has the
fact's key, its writer (``collect(ctx)``, run in the summary pass) and its reader in one
module, the way a rule's ``collect`` works.

* :mod:`.sizes` -- every value a layer size takes (loops over width lists, all call
  sites, argparse defaults, config overrides at construction sites);
* :mod:`.weights` -- tensors that are normalised weights (softmax, ``x / x.sum()``,
  ``mask / lengths``), so that a sum of weights times values is a weighted average;
* :mod:`.facts` -- the cross-file collectors: argparse defaults, number sequences at
  module level, constructions of config classes, functions and classes whose
  parameters reach a layer size;
* :mod:`.constants` -- the collector of numeric module constants (``NEG_INF = -1e9``
  read by another file);
* :mod:`.library` -- which functions of a library file (no module, no script) run in
  their importers' models.
"""
