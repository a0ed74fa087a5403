"""Verdicts `amplint verify` can be trusted with (issue 14), through the real command line, CPU.

Each model is written into a temporary folder by its test: where the first inf/NaN is made
(not where it propagates to), paths through ``..`` and symlinks, lines that never ran, the
loss a model returns, skipped steps, the model's own output, O3's optimizer, and line numbers
after ``--fix``."""
from __future__ import annotations

import dataclasses
import json
import os
import textwrap

import pytest

from amplint.verify import core
from amplint.verify.records import VerifyFinding

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_verify(amplint, *args, cwd=ROOT):
    """``amplint verify ARGS --device cpu`` through the console script (conftest's runner)."""
    return amplint("verify", *args, "--device", "cpu", cwd=cwd, env={"NO_COLOR": "1", "OMP_NUM_THREADS": "1"},
                   timeout=120)


def verify_json(amplint, *args, cwd=ROOT) -> tuple[int, dict]:
    proc = run_verify(amplint, *args, "--format", "json", cwd=cwd)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    data = json.loads(proc.stdout)  # nothing else on stdout
    return proc.returncode, data


def write(folder, name, text) -> str:
    path = os.path.join(str(folder), name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(textwrap.dedent(text).lstrip())
    return path


def by_code(report, code):
    found = [f for f in report["findings"] if f["code"] == code]
    assert found, [(f["code"], f["line"]) for f in report["findings"]]
    return found[0]


# the Perceiver case: eps=1e-8 is 0 in half, so a zero row is 0/0 = NaN in
# F.normalize; the softmax two lines later only propagates it
NORMALIZE_THEN_SOFTMAX = """
    import torch
    import torch.nn.functional as F
    from torch import nn


    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.q = nn.Linear(16, 16, bias=False)

        def forward(self, x):
            t = self.q(x)
            t = F.normalize(t, p=1, dim=-1, eps=1e-8)
            scores = t @ t.transpose(-1, -2)
            attn = torch.softmax(scores, dim=-1)
            return attn @ x


    def example():
        x = torch.randn(2, 8, 16)
        x[0, 0] = 0
        return Block(), (x,)
"""

# a -1e9 additive mask is -inf in half: the fully masked row's softmax and sum are NaN
MASK_THEN_SOFTMAX_SUM = """
    import torch
    from torch import nn


    class Attn(nn.Module):
        def __init__(self):
            super().__init__()
            self.q = nn.Linear(16, 16)

        def forward(self, x, mask):
            scores = self.q(x) @ x.transpose(-1, -2)
            bias = (1.0 - mask) * -1e9
            scores = scores + bias.to(scores.dtype)
            attn = torch.softmax(scores, dim=-1)
            total = attn.sum(dim=-1, keepdim=True)
            return attn / total


    def example():
        x = torch.randn(2, 8, 16)
        mask = torch.ones(2, 8, 8)
        mask[:, :, 4:] = 0
        mask[:, 0, :] = 0
        return Attn(), (x, mask)
"""


def test_origin_of_nan_confirms_only_the_finding_that_made_it(tmp_path, amplint):
    norm = write(tmp_path, "norm_model.py", NORMALIZE_THEN_SOFTMAX)
    mask = write(tmp_path, "mask_model.py", MASK_THEN_SOFTMAX_SUM)
    status, data = verify_json(amplint, norm + "::example", mask + "::example", "--opt-level", "O2", "--steps", "1")
    norm_report, mask_report = data["results"]

    # the softmax only propagated normalize's NaN: not confirmed; the origin is listed with its expression
    assert by_code(norm_report, "AMP301")["status"] == "not reproduced"
    origin = norm_report["before"]["O2"]["origin"]
    assert (origin["line"], origin["op"], origin["inputs_finite"]) == (13, "normalize", True)
    assert origin["expr"] == "F.normalize(t, p=1, dim=-1, eps=1e-8)"
    # AMP102 predicts F.normalize's eps in half at O2, so the origin confirms it (and only it)
    eps = by_code(norm_report, "AMP102")
    assert eps["status"] == "confirmed" and eps["line"] == 13
    assert "F.normalize(t, p=1, dim=-1, eps=1e-8)" in eps["evidence"][0]["detail"]
    assert not [p for p in norm_report["runtime_only"] if p["kind"] == "inf/NaN"]

    # the -1e9 made the -inf; the softmax and the sum after it are not confirmed by its NaN
    amp101 = by_code(mask_report, "AMP101")
    assert amp101["status"] == "confirmed" and amp101["line"] == 12
    assert "(1.0 - mask) * -1e9" in amp101["evidence"][0]["detail"]
    assert by_code(mask_report, "AMP301")["status"] == "not reproduced"
    # the row sum of softmax probabilities is bounded by 1 (ctx.magnitude_bound): not reported at all
    assert not [f for f in mask_report["findings"] if f["code"] == "AMP302"]
    assert not [p for p in mask_report["runtime_only"] if p["kind"] == "inf/NaN"]  # explained by AMP101
    assert status == 1


def test_model_imported_through_dotdot_and_symlink_is_matched(tmp_path, amplint):
    write(tmp_path, "src/mask_model.py", MASK_THEN_SOFTMAX_SUM)
    harness = write(tmp_path, "harness/make.py", """
        import os
        import sys

        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
        from mask_model import example as upstream


        def example():
            return upstream()
    """)
    os.symlink(str(tmp_path / "src" / "mask_model.py"), str(tmp_path / "linked.py"))
    _, data = verify_json(amplint, harness + "::example", str(tmp_path / "linked.py") + "::example", "--opt-level", "O2",
                          "--steps", "1")
    for report in data["results"]:
        # the per-expression trace saw the model's lines (not just its module classes)
        assert {s["line"] for s in report["before"]["O2"]["sites"]} >= {11, 12, 14, 15}, report["target"]
        amp101 = by_code(report, "AMP101")
        assert amp101["status"] == "confirmed", report["target"]
        assert "(1.0 - mask) * -1e9" in amp101["evidence"][0]["detail"]
        assert amp101["path"] == os.path.realpath(str(tmp_path / "src" / "mask_model.py"))


LOSS_MODELS = """
        import dataclasses

        import torch
        from torch import nn


        class Regressor(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(8, 8)

            def forward(self, x, y):
                logits = self.fc(x) * 300  # mean(logits**2) overflows fp16; the loss does not
                loss = (logits.float() / 300 - y).pow(2).mean()
                return logits, loss


        @dataclasses.dataclass
        class Output:
            logits: torch.Tensor
            extra: dict


        class Wrapped(Regressor):
            def forward(self, x, y):
                logits, loss = super().forward(x, y)
                return Output(logits, {"aux": [logits.sum() * 0], "loss": loss})


        class Exploding(nn.Module):
            def __init__(self, factor=1e12):
                super().__init__()
                self.fc = nn.Linear(8, 8)
                self.factor = factor

            def forward(self, x):
                return self.fc(x).float().pow(2).sum() * self.factor  # finite, but its gradients overflow


        def tuple_out():
            return Regressor(), (torch.randn(4, 8), torch.randn(4, 8))


        def dataclass_out():
            return Wrapped(), (torch.randn(4, 8), torch.randn(4, 8))


        def exploding():
            return Exploding(), (torch.randn(4, 8),)


        def warming_up():
            return Exploding(1e4), (torch.randn(4, 8),)
    """


def test_loss_is_the_first_scalar_in_a_tuple_or_dataclass(tmp_path, amplint):
    write(tmp_path, "model.py", LOSS_MODELS)
    status, data = verify_json(amplint, "model.py::tuple_out", "model.py::dataclass_out", "--opt-level", "O1", "--steps", "2",
                               cwd=str(tmp_path))
    for report in data["results"]:
        o0, o1 = report["before"]["O0"], report["before"]["O1"]
        assert o0["losses"][0] < 10, report["target"]  # the model's loss, not loss**2 + mean(logits**2)
        assert o1["skipped_steps"] == 0
    assert status == 0


def test_loss_selected_in_pyproject_and_on_the_command_line(tmp_path, amplint):
    write(tmp_path, "model.py", LOSS_MODELS)
    (tmp_path / "pyproject.toml").write_text('[tool.amplint.verify]\nloss = "out[1] * 2"\n')
    _, data = verify_json(amplint, "model.py::tuple_out", "--opt-level", "O1", "--steps", "1", cwd=str(tmp_path))
    _, plain = verify_json(amplint, "model.py::tuple_out", "--opt-level", "O1", "--steps", "1", "--loss", "auto", cwd=str(tmp_path))
    doubled, auto = data["results"][0]["before"]["O0"]["losses"][0], plain["results"][0]["before"]["O0"]["losses"][0]
    assert data["results"][0]["loss"] == "out[1] * 2"
    assert doubled == pytest.approx(2 * auto) and auto < 10


def test_most_steps_skipped_is_not_ok(tmp_path, amplint):
    # gradients that overflow half at every loss scale down to the 2**-14 floor: the run takes
    # its 30 warm-up steps and is still skipping
    write(tmp_path, "model.py", LOSS_MODELS)
    proc = run_verify(amplint, "model.py::exploding", "--opt-level", "O1", "--steps", "3", cwd=str(tmp_path))
    assert proc.returncode == 1, proc.stdout
    assert "skipped steps" in proc.stdout and "33 of 33 steps skipped, loss scale fell to 6.10352e-05" in proc.stdout


def test_skips_while_the_loss_scale_warms_up_are_not_a_failure(tmp_path, amplint):
    # gradients of ~2e4 fit once the scale has halved from 2**16 to 2: the run goes on past
    # --steps until a step is applied, and the level is ok
    write(tmp_path, "model.py", LOSS_MODELS)
    status, data = verify_json(amplint, "model.py::warming_up", "--opt-level", "O1", "--steps", "3", cwd=str(tmp_path))
    o1 = data["results"][0]["before"]["O1"]
    assert status == 0 and o1["skipped_steps"] >= 3 and not o1["last_step_skipped"]
    assert len(o1["loss_scales"]) == o1["skipped_steps"] + 1 and o1["loss_scales"][-1] < 2 ** 16


def test_model_output_is_captured_and_json_stays_parsable(tmp_path, amplint):
    write(tmp_path, "noisy.py", """
        import sys

        import torch
        from torch import nn

        print("importing the noisy model")


        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(8, 8)

            def forward(self, x):
                print("forward", tuple(x.shape))
                print("a warning of its own", file=sys.stderr)
                return self.fc(x)


        def example():
            print("building")
            return Net(), (torch.randn(2, 8),)
    """)
    _, data = verify_json(amplint, "noisy.py::example", "--opt-level", "O1", "--steps", "1", cwd=str(tmp_path))
    printed = data["results"][0]["model_output"]
    for text in ("importing the noisy model", "building", "forward (2, 8)", "a warning of its own"):
        assert text in printed
    proc = run_verify(amplint, "noisy.py::example", "--opt-level", "O1", "--steps", "1", cwd=str(tmp_path))
    assert proc.returncode == 0
    head, _, shown = proc.stdout.partition("Model output")
    assert "forward (2, 8)" not in head and "  | forward (2, 8)" in shown
    assert "a warning of its own" not in proc.stderr


def test_o3_with_adamw_passes_a_clean_model_and_names_the_optimizer_eps(amplint):
    proc = run_verify(amplint, "fixtures/verify/clean/mlp.py::example", "--opt-level", "O3", "--steps", "2")
    assert proc.returncode == 0, proc.stdout
    assert "optimizer eps below the fp16 range" in proc.stdout and "eps=6.1e-05" in proc.stdout
    assert "Runtime problems" not in proc.stdout


def test_lines_never_run_are_not_executed_and_judged_once_a_fix_reaches_them(tmp_path, amplint):
    path = write(tmp_path, "attention.py", """
        import torch
        from torch import nn


        class Attention(nn.Module):
            def __init__(self, flash=False):
                super().__init__()
                self.q = nn.Linear(16, 16)
                self.flash = flash

            def forward(self, x, mask):
                scores = self.q(x) @ x.transpose(-1, -2)
                if self.flash:
                    return torch.softmax(scores, dim=-1) @ x
                scores = scores.masked_fill(mask, -1e9).clamp(min=-30.0)
                total = scores.sum(dim=-1, keepdim=True)
                return scores / total


        def example():
            mask = torch.zeros(2, 8, 8, dtype=torch.bool)
            mask[:, :, 6:] = True
            return Attention(), (torch.randn(2, 8, 16), mask)
    """)
    _, data = verify_json(amplint, path + "::example", "--opt-level", "O2", "--steps", "1")
    [report] = data["results"]
    assert report["before"]["O2"]["crash"]["line"] == 15  # masked_fill(-1e9) on a half tensor
    branch = by_code(report, "AMP301")
    assert branch["status"] == "not executed" and "branch not taken" in branch["not_executed"]
    after_crash = by_code(report, "AMP302")
    assert after_crash["line"] == 16
    assert after_crash["status"] == "not executed" and "crashed at" in after_crash["not_executed"]

    _, data = verify_json(amplint, path + "::example", "--opt-level", "O2", "--steps", "1", "--unsafe-fixes")
    [report] = data["results"]
    assert by_code(report, "AMP101")["status"] == "fixed"
    # the crash's fix let line 16 run; AMP302 has a safe fix of its own there, so only its
    # fixed form ran: still not executed as written, and the report says how it went
    reached = by_code(report, "AMP302")
    assert reached["status"] == "not executed"
    assert "after the fixes it ran in its fixed form without failures" in reached["not_executed"]
    assert by_code(report, "AMP301")["status"] == "not executed"


def test_after_fix_locations_are_lines_of_the_original_file(tmp_path, amplint):
    # the einsum fix inserts two lines after the imports (this file is its project's training
    # script: it calls amp.initialize); the gram matrix overflows (no rule predicts it) and must
    # be shown at its line in the original file, before and after
    path = write(tmp_path, "mixer.py", """
        import torch
        from torch import nn


        class Mixer(nn.Module):
            def __init__(self):
                super().__init__()
                self.w = nn.Parameter(torch.randn(16, 16) / 4)

            def forward(self, x):
                h = torch.einsum("btd,dh->bth", x, self.w)
                big = h * 60
                return big @ big.transpose(1, 2)


        def example():
            return Mixer(), (torch.randn(2, 8, 16) * 4,)


        def train():
            from amplint import amp

            return amp.initialize(Mixer(), torch.optim.SGD(Mixer().parameters(), lr=0.1), opt_level="O1")
    """)
    _, data = verify_json(amplint, path + "::example", "--opt-level", "O1", "--steps", "1", "--fix")
    [report] = data["results"]
    assert "register_half_function" in "".join(report["fixed_files"].values())
    before, after = report["before"]["O1"], report["after"]["O1"]
    assert before["first_nonfinite_site"]["line"] == 13
    assert after["first_nonfinite_site"]["line"] == 13 and after["origin"]["line"] == 13
    assert after["origin"]["expr"] == "big @ big.transpose(1, 2)"


def test_origin_is_found_on_the_step_where_inf_first_appears(tmp_path, amplint):
    # step 0 is clean (|h| * 3000 fits in half); the sharpness grows every training forward,
    # so h * 3e5 overflows in step 1: the origin is traced there, not only in step 0
    path = write(tmp_path, "tempered.py", """
        import torch
        from torch import nn


        class Tempered(nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = nn.Linear(16, 16)
                self.sharpness = 30.0

            def forward(self, x):
                h = self.proj(x)
                if self.training:
                    self.sharpness *= 100.0
                logits = h * self.sharpness
                return torch.log_softmax(logits.float(), dim=-1)


        def example():
            return Tempered(), (torch.randn(4, 16),)
    """)
    _, data = verify_json(amplint, path + "::example", "--opt-level", "O1", "--steps", "3")
    [report] = data["results"]
    origin = report["before"]["O1"]["origin"]
    assert (origin["line"], origin["op"], origin["expr"], origin["step"]) == (15, "mul", "h * self.sharpness", 1)
    assert origin["inputs_finite"] is True
    assert report["before"]["O0"]["origin"] is None
    [problem] = report["runtime_only"]
    assert problem["line"] == 15 and "`h * self.sharpness` (mul) at line 15 (step 1; step 0 was clean)" in problem["detail"]
    text = run_verify(amplint, path + "::example", "--opt-level", "O1", "--steps", "3").stdout
    assert "`h * self.sharpness` (mul, step 1)" in " ".join(text.split())  # the levels table, folded


def test_a_finding_first_reached_after_a_crash_fix_is_judged_on_that_run(tmp_path, amplint):
    # the -1e9 mask crashes O2 at line 14 (AMP101, safe fix); F.normalize's eps=1e-8 on line 16
    # (AMP102, unsafe fix: not applied by --fix) never ran before; once the crash is fixed it
    # runs, as written, and its zero row is 0/0 = NaN: confirmed on the fixed run
    path = write(tmp_path, "masked_norm.py", """
        import torch
        import torch.nn.functional as F
        from torch import nn


        class MaskedNorm(nn.Module):
            def __init__(self):
                super().__init__()
                self.q = nn.Linear(16, 16, bias=False)

            def forward(self, x, mask):
                t = self.q(x)
                scores = t @ t.transpose(-1, -2)
                scores = scores.masked_fill(mask, -1e9)
                attn = torch.softmax(scores, dim=-1, dtype=torch.float32)
                t = F.normalize(t, p=1, dim=-1, eps=1e-8)
                return attn @ t.float()


        def example():
            x = torch.randn(2, 8, 16)
            x[0, 0] = 0
            mask = torch.zeros(2, 8, 8, dtype=torch.bool)
            mask[:, :, 6:] = True
            return MaskedNorm(), (x, mask)
    """)
    _, data = verify_json(amplint, path + "::example", "--opt-level", "O2", "--steps", "1")
    [report] = data["results"]
    assert report["before"]["O2"]["crash"]["line"] == 14
    eps = by_code(report, "AMP102")
    assert eps["line"] == 16 and eps["status"] == "not executed" and "crashed at" in eps["not_executed"]

    _, data = verify_json(amplint, path + "::example", "--opt-level", "O2", "--steps", "1", "--fix")
    [report] = data["results"]
    assert by_code(report, "AMP101")["status"] == "fixed"
    # the eps's float16-only value is an unsafe fix (issue 24: it moves fp16 results), so the
    # eps ran as written after the crash fix: judged on that run, never "not reproduced"
    eps = by_code(report, "AMP102")
    assert eps["status"] == "confirmed" and eps["reached_after_fix"] is True, eps
    _, data = verify_json(amplint, path + "::example", "--opt-level", "O2", "--steps", "1", "--unsafe-fixes")
    eps = by_code(data["results"][0], "AMP102")
    assert eps["status"] == "not executed" and "after the fixes it ran in its fixed form without failures" in eps["not_executed"]
    # with the eps left unfixed (no safe fix of its own), the rerun's evidence confirms it
    unfixed = VerifyFinding("AMP102", "underflow-epsilon", "eps", path, 16, 16, 1, None, "warning", fixed_by_lint=False,
                            not_executed="crashed at line 14", status="not executed")
    core._judge_reached(unfixed, [{"level": "O2", "kind": "inf/NaN", "detail": "normalize"}])
    assert unfixed.status == "confirmed" and unfixed.reached_after_fix is True
    core._judge_reached(quiet := dataclasses.replace(unfixed, status="not executed"), [])
    assert quiet.status == "not reproduced"


def test_registration_on_a_model_module_loaded_under_another_name(tmp_path, amplint):
    # vit-pytorch's `from torch import einsum`: the registration goes on the model module
    # itself, which the harness loads by path under a name of its own; verify, the training
    # script of its runs, must register on that module object (found by its file)
    write(tmp_path, "attn.py", """
        import torch
        from torch import nn, einsum


        class Attn(nn.Module):
            def __init__(self):
                super().__init__()
                self.qk = nn.Linear(16, 32)

            def forward(self, x):
                q, k = self.qk(x).chunk(2, dim=-1)
                attn = einsum("bid,bjd->bij", q, k).softmax(dim=-1)
                return einsum("bij,bjd->bid", attn, q)
    """)
    write(tmp_path, "harness.py", """
        import importlib.util
        import os
        import sys

        import torch

        spec = importlib.util.spec_from_file_location("loaded_attn", os.path.join(os.path.dirname(__file__), "attn.py"))
        loaded = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = loaded
        spec.loader.exec_module(loaded)


        def build():
            return loaded.Attn(), (torch.randn(2, 8, 16),)
    """)
    _, data = verify_json(amplint, "harness.py::build", "--opt-level", "O1", "--steps", "1", "--fix", cwd=str(tmp_path))
    [report] = data["results"]
    assert report["before"]["O1"]["crash"] is not None  # einsum(fp32 softmax, half q)
    assert report["after"]["O1"]["crash"] is None, report["after"]["O1"]["crash"]
    assert not report["warnings"]
