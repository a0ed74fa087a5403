"""The adversarial report of 2026-12-01, process cases: a killed ``check -j 2`` leaves no
worker behind (N81)."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads the process table from /proc")


def _children(pid: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                out.append(int(name))
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_n81_killed_run_leaves_no_worker(tmp_path, sig):
    body = "".join(f"    def f{i}(self, s, m):\n        return torch.softmax(s.masked_fill(m, -1e9), -1)\n" for i in range(150))
    for n in range(120):
        (tmp_path / f"m{n}.py").write_text(f"import torch\nclass M{n}(torch.nn.Module):\n{body}")
    script = shutil.which("amplint", path=os.path.dirname(sys.executable))
    proc = subprocess.Popen([script, "check", "--no-cache", "-j", "2", "."], cwd=tmp_path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")})
    try:
        deadline = time.monotonic() + 60
        workers: list[int] = []
        while time.monotonic() < deadline and len(workers) < 2 and proc.poll() is None:
            workers = _children(proc.pid)
            time.sleep(0.05)
        assert len(workers) >= 2, "the run never started its workers"
        os.kill(proc.pid, sig)
        proc.wait(30)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(_alive(w) for w in workers):
            time.sleep(0.1)
        survivors = [w for w in workers if _alive(w)]
        for w in survivors:  # never leave them running, even when the test fails
            os.kill(w, signal.SIGKILL)
        assert not survivors, f"workers {survivors} outlived the killed run"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
