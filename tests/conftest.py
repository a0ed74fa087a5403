import sys

import pytest


@pytest.fixture(autouse=True)
def _isolate_amp_registrations():
    """`amp.register_*_function` registrations live for the whole process (as in apex);
    give every test the registry it started with, so one test's registration of
    einsum cannot change what another test observes."""
    casting = sys.modules.get("amplint.amp._casting")
    saved = dict(casting.CASTS.registry) if casting is not None else None
    yield
    casting = sys.modules.get("amplint.amp._casting")
    if casting is not None:
        casting.CASTS.registry.clear()
        casting.CASTS.registry.update(saved or {})
