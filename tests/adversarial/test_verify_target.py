"""The adversarial report of 2026-12-01, verify cases: the target is arbitrary code that may
hang (N65), end the process (N70), fork (N66) or change the folder (N69)."""
from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("torch")

HARNESS = """\
import os, time, torch
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(4, 4)
    def forward(self, x):
        return self.l(x)
def build():
    return M(), (torch.randn(2, 4),)
def osexit0():
    os._exit(0)
def killed():
    os.kill(os.getpid(), 9)
def sleeps():
    time.sleep(10**6)
def forks():
    os.fork()
    return build()
def moves():
    os.makedirs("elsewhere", exist_ok=True)
    os.chdir("elsewhere")
    return build()
def five():
    return 5
"""
FAST = ("--device", "cpu", "--opt-level", "O1", "--steps", "1", "--no-trace", "--threads", "1")


@pytest.fixture
def harness(tmp_path):
    (tmp_path / "h.py").write_text(HARNESS)
    return tmp_path


@pytest.mark.parametrize("factory, how", [("osexit0", "ended the process (exit code 0)"),
                                          ("killed", "was killed by signal SIGKILL")])
def test_n70_a_target_that_ends_the_process_is_a_target_error(harness, amplint, factory, how):
    proc = amplint("verify", *FAST, f"h.py::{factory}", cwd=harness, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"amplint: error: h.py::{factory}: the target {how} before verify could report; not verified"


def test_n65_timeout_stops_a_hung_target(harness, amplint):
    proc = amplint("verify", *FAST, "--timeout", "3", "h.py::sleeps", cwd=harness, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "amplint: error: h.py::sleeps: the import and the factory call ran past --timeout 3 s; stopped"


def test_n67_a_factory_returning_no_model_is_a_target_error(harness, amplint):
    proc = amplint("verify", *FAST, "h.py::five", cwd=harness, timeout=120)
    assert proc.returncode == 2  # a target error, as the README says (it was a CRASH row, exit 1)
    # the factory raised nothing: the line names what it returned, not a "raised TargetError"
    assert proc.stderr.strip().startswith("amplint: error: h.py::five: the factory must return")
    assert proc.stderr.strip().endswith("got int") and proc.stdout == ""


def test_n66_a_forking_factory_reports_once(harness, amplint):
    proc = amplint("verify", *FAST, "--format", "json", "h.py::forks", cwd=harness, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert len(json.loads(proc.stdout)["results"]) == 1


def test_n69_report_path_resolved_before_the_target_runs(harness, amplint):
    proc = amplint("verify", *FAST, "--report", "r.html", "h.py::moves", cwd=harness, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "HTML report: r.html" in proc.stdout
    assert (harness / "r.html").is_file() and not os.path.exists(harness / "elsewhere" / "r.html")


ONE_LINE = """\
import torch
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(8, 8)
    def forward(self, x):
        s = self.l(x)
        m = x > 0
        return torch.softmax(s.masked_fill(m, -1e9), -1)
def build():
    return M(), (torch.randn(2, 8),)
"""


def test_n71_evidence_is_matched_by_expression_not_by_line(tmp_path, amplint):
    (tmp_path / "h.py").write_text(ONE_LINE)
    proc = amplint("verify", "--device", "cpu", "--opt-level", "O1", "--steps", "1", "--threads", "1", "--format", "json",
                   "h.py::build", cwd=tmp_path, timeout=120)
    verdicts = {f["code"]: (f["status"], [e["kind"] for e in f["evidence"]]) for f in json.loads(proc.stdout)["results"][0]["findings"]}
    assert verdicts["AMP101"] == ("confirmed", ["crash"])  # masked_fill's crash is the -1e9's
    assert verdicts["AMP301"][0] != "confirmed" and "crash" not in verdicts["AMP301"][1]
