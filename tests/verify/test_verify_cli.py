"""`amplint verify` through the real command line (subprocess), CPU."""
from __future__ import annotations

import json
import os
import re
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(autouse=True)
def _plain_single_threaded(monkeypatch):
    """Plain text output to compare against, and one OpenMP thread in the runs."""
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
V = os.path.join(ROOT, "fixtures", "verify")


def test_help_says_verify_runs_the_code(amplint):
    proc = amplint("verify", "--help")
    assert proc.returncode == 0
    assert "IMPORTS AND RUNS YOUR CODE" in proc.stdout
    for option in ("--opt-level", "--dtype", "--device", "--steps", "--loss", "--seed", "--tolerance", "--fix",
                   "--unsafe-fixes", "--format", "--report"):
        assert option in proc.stdout


def test_three_targets_text_crash_runtime_only_and_clean(amplint):
    # crash with its source line, a failure no rule predicts, and a clean model in one run;
    # `--opt-level O1 O2 PATH::FACTORY`: a target written after the levels is still a target
    proc = amplint("verify", "fixtures/verify/attention_mask.py::example", "fixtures/verify/overflow_gemm.py::example",
                   "--device", "cpu", "--steps", "1", "--opt-level", "O1", "O2", "fixtures/verify/clean/mlp.py::example")
    assert proc.returncode == 1, proc.stderr
    out = proc.stdout
    assert "Traceback" not in out + proc.stderr
    attention, gemm, clean = out.split("amplint verify ")[1:]
    assert "O1 O2 against O0" in attention
    assert "CRASH" in attention and "attention_mask.py:27" in attention
    assert "c10::Half without overflow" in attention
    assert "AMP101" in attention and "confirmed" in attention
    assert "Runtime problems" not in attention  # the crash is explained by AMP101
    assert "Runtime problems no rule predicted" in gemm and "overflow_gemm.py:17" in gemm
    assert "clean/mlp.py::example" in clean and "safe at the selected levels" in clean and "CRASH" not in clean


def test_fix_json_and_files_untouched(amplint):
    path = os.path.join(V, "attention_mask.py")
    before = open(path, "rb").read()
    proc = amplint("verify", "fixtures/verify/attention_mask.py::example", "--device", "cpu", "--opt-level", "O1,O2",
                   "--steps", "1", "--fix", "--format", "json")
    assert open(path, "rb").read() == before
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    data = json.loads(proc.stdout)
    [report] = data["results"]
    assert report["levels"] == ["O1", "O2"] and data["exit_status"] == 0
    assert {f["code"]: f["status"] for f in report["findings"]}["AMP101"] == "fixed"
    assert report["before"]["O2"]["crash"]["line"] == 27
    assert report["after"]["O2"]["crash"] is None


@pytest.mark.parametrize("args, message", [
    (["fixtures/verify/nope.py::example"], "no such file"),
    (["fixtures/verify/clean/mlp.py::missing"], "no callable named 'missing'"),
    (["fixtures/verify/clean/mlp.py::example", "--opt-level", "O4"], "unknown opt level"),
    (["fixtures/verify/clean/mlp.py::example", "--steps", "0"], "at least 1"),
])
def test_usage_errors_exit_2(args, message, amplint):
    proc = amplint("verify", *args, "--device", "cpu")
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_config_targets_and_options(tmp_path, amplint):
    (tmp_path / "model.py").write_text(textwrap.dedent('''
        import torch
        from torch import nn

        def make():
            return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8)), (torch.randn(4, 8),)
    '''))
    (tmp_path / "pyproject.toml").write_text(textwrap.dedent('''
        [tool.amplint]
        target = "fp16"

        [tool.amplint.verify]
        steps = 2
        device = "cpu"
        opt-level = "O1"
        targets = ["model.py::make", { target = "model.py::make", opt-level = ["O2", "O3"], dtype = "bf16" }]
    '''))
    proc = amplint("verify", "--format", "json", cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    first, second = json.loads(proc.stdout)["results"]
    assert first["levels"] == ["O1"] and first["steps"] == 2 and first["dtype"] == "fp16"
    assert second["levels"] == ["O2", "O3"] and second["dtype"] == "bf16"
    assert len(second["before"]["O3"]["losses"]) == 2


def test_bad_config_exit_2(tmp_path, amplint):
    (tmp_path / "pyproject.toml").write_text('[tool.amplint.verify]\nstep = 2\ntargets = ["m.py::f"]\n')
    proc = amplint("verify", cwd=str(tmp_path))
    assert proc.returncode == 2
    assert "did you mean 'steps'" in proc.stderr


def test_no_targets_exit_2(tmp_path, amplint):
    proc = amplint("verify", cwd=str(tmp_path))
    assert proc.returncode == 2 and "no targets" in proc.stderr


def test_check_and_fix_never_import_verify_does(tmp_path, amplint):
    marker = tmp_path / "ran.txt"
    (tmp_path / "evil.py").write_text(textwrap.dedent(f'''
        import torch
        open({str(marker)!r}, "w").write("imported")
        raise SystemExit("this module must not be imported by check/fix")

        def example():
            return None
    '''))
    for cmd in (["check"], ["fix"], ["fix", "--unsafe-fixes"]):
        proc = amplint(*cmd, str(tmp_path / "evil.py"), "--no-cache")
        assert proc.returncode in (0, 1), proc.stderr
        assert not marker.exists(), f"amplint {' '.join(cmd)} ran the code"
    proc = amplint("verify", str(tmp_path / "evil.py") + "::example", "--device", "cpu")
    assert marker.exists(), "verify imports the target by design"
    assert proc.returncode == 2


_STYLE = re.compile(r"\x1b\[[0-9;]*m")
_CURSOR = re.compile(r"\x1b\[[0-9;?]*[A-Za-ln-z]|\r")  # line erases and moves: a new frame


def test_progress_shows_target_level_and_step_on_a_terminal(amplint):
    proc = amplint("verify", "fixtures/verify/clean/mlp.py::example", "--device", "cpu", "--opt-level", "O1", "O2",
                   "--steps", "2", tty_stderr=True, env={"NO_COLOR": None})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    shown = _STYLE.sub("", _CURSOR.sub("\n", proc.stderr))
    for level, index in (("O0", 1), ("O1", 2), ("O2", 3)):
        for step in (1, 2):
            assert f"{level} (level {index}/3)  step {step}/2" in shown, shown[-3000:]
    assert "fixtures/verify/clean/mlp.py::example" in shown and "/6 steps" in shown
    assert "safe at the selected levels" in proc.stdout and "step 1/2" not in proc.stdout


@pytest.mark.parametrize("extra", [("--format", "json"), ("-q",)])
def test_no_progress_with_json_or_quiet_even_on_a_terminal(extra, amplint):
    proc = amplint("verify", "fixtures/verify/clean/mlp.py::example", "--device", "cpu", "--opt-level", "O1",
                   "--steps", "1", *extra, tty_stderr=True, env={"NO_COLOR": None})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "step 1/1" not in proc.stderr and "level 1/2" not in proc.stderr and "\x1b[" not in proc.stderr
    if extra[0] == "--format":
        json.loads(proc.stdout)


def test_no_progress_when_stderr_is_not_a_terminal(amplint):
    proc = amplint("verify", "fixtures/verify/clean/mlp.py::example", "--device", "cpu", "--opt-level", "O1", "--steps", "1")
    assert proc.returncode == 0
    assert "step 1/1" not in proc.stderr + proc.stdout and "\x1b[" not in proc.stderr


def test_device_auto_is_the_default_and_picks_cuda_only_when_available(tmp_path, amplint):
    import torch

    expected = "cuda" if torch.cuda.is_available() else "cpu"
    for extra in ((), ("--device", "auto")):
        proc = amplint("verify", "fixtures/verify/clean/mlp.py::example", "--opt-level", "O1", "--steps", "1",
                       "--format", "json", *extra)
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["results"][0]["device"] == expected
    (tmp_path / "pyproject.toml").write_text('[tool.amplint.verify]\ndevice = "auto"\n'
                                             f'targets = ["{V}/clean/mlp.py::example"]\nsteps = 1\nopt-level = ["O1"]\n')
    proc = amplint("verify", "--format", "json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["results"][0]["device"] == expected
    proc = amplint("verify", "fixtures/verify/clean/mlp.py::example", "--device", "tpu")
    assert proc.returncode == 2 and "auto" in proc.stderr


def test_a_file_whose_name_has_dots_is_imported_by_its_path(tmp_path, amplint):
    """`verify model.v2.py::build` imported the sibling `model.py` (as `model`, then `.v2`)."""
    (tmp_path / "model.py").write_text('raise SystemExit("the sibling model.py was imported")\n')
    (tmp_path / "model.v2.py").write_text(textwrap.dedent('''
        import torch
        import torch.nn as nn


        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = nn.Linear(8, 8)

            def forward(self, x):
                return self.lin(x).softmax(-1)


        def build():
            return M(), (torch.randn(2, 8),)
    '''))
    proc = amplint("verify", "model.v2.py::build", "--device", "cpu", "--steps", "1", "--opt-level", "O1", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    assert "sibling" not in proc.stdout + proc.stderr and "model.v2.py::build" in proc.stdout
