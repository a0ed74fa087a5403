"""amplint's bundled rules, one file per rule (shipped as the package ``amplint.rules``).

Each file defines one :class:`amplint.rule.Rule` subclass with its code, name,
documentation and embedded VALID / INVALID examples; the registry finds them by module.
"""
