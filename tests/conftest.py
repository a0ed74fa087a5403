import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run_amplint(*args, cwd=ROOT, env=None, input=None, timeout=600, traceback_ok=False, tty_stderr=False):
    """Run the installed ``amplint`` console script -- the one beside this interpreter,
    never another on ``PATH`` -- and return the finished process (text output).

    ``env``: variables set on top of ``os.environ`` (a value of None removes one).
    ``tty_stderr``: stderr is a pseudo-terminal (what a user at a terminal sees, such as a
    progress display); its bytes, decoded, are ``proc.stderr``.
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
    if tty_stderr:
        proc = _run_with_tty_stderr([script, *args], cwd, full_env, input, timeout)
    else:
        proc = subprocess.run([script, *args], cwd=cwd, capture_output=True, text=True, env=full_env,
                              input=input, timeout=timeout)
    if not traceback_ok:
        assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr + proc.stdout
    return proc


def _run_with_tty_stderr(cmd, cwd, env, input, timeout):
    import pty
    import threading

    master, slave = pty.openpty()
    import fcntl
    import struct
    import termios

    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))  # 40 rows, 160 columns
    chunks = []

    def read():
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed its end
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=read, daemon=True)
    with subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=slave) as child:
        os.close(slave)
        reader.start()
        try:
            stdout, _ = child.communicate(input.encode() if input else None, timeout=timeout)
        finally:
            reader.join(timeout=10)
            os.close(master)
    return subprocess.CompletedProcess(cmd, child.returncode, stdout.decode("utf-8", "replace"),
                                       b"".join(chunks).decode("utf-8", "replace"))


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
