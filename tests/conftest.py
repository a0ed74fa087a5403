import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run_amplint(*args, cwd=ROOT, env=None, input=None, timeout=600, traceback_ok=False):
    """Run the installed ``amplint`` console script -- the one beside this interpreter,
    never another on ``PATH`` -- and return the finished process (text output).

    ``env``: variables set on top of ``os.environ`` (a value of None removes one).
    Unless ``traceback_ok``, a Python traceback in the output fails the test: bad input
    gets a one-line error, never a traceback."""
    script = shutil.which("amplint", path=os.path.dirname(sys.executable))
    assert script, f"no amplint console script beside {sys.executable}: install the package (pip install -e .)"
    full_env = dict(os.environ)
    for name, value in (env or {}).items():
        if value is None:
            full_env.pop(name, None)
        else:
            full_env[name] = value
    proc = subprocess.run([script, *args], cwd=cwd, capture_output=True, text=True, env=full_env,
                          input=input, timeout=timeout)
    if not traceback_ok:
        assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr + proc.stdout
    return proc


@pytest.fixture(scope="session")
def amplint():
    """The CLI runner (:func:`_run_amplint`), for every test folder.  A fixture rather
    than an import: each test folder has its own ``conftest`` module, so ``from conftest
    import ...`` would depend on which one Python finds first."""
    return _run_amplint


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
