"""The verifier through its Python API, on the runtime fixtures (CPU)."""
from __future__ import annotations

import hashlib
import os
import sys

import pytest

import torch  # noqa: E402  (a dev dependency: a broken torch must fail, not skip)

from amplint.verify import verify, verify_model  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
V = os.path.join(ROOT, "fixtures", "verify")


def target(name, factory="example"):
    return os.path.join(V, name) + "::" + factory


def _sha(path):
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def _finding(report, code):
    found = [f for f in report["findings"] if f["code"] == code]
    assert found, f"no {code} finding in {[f['code'] for f in report['findings']]}"
    return found[0]


@pytest.fixture(scope="module")
def attention():
    path = os.path.join(V, "attention_mask.py")
    before = _sha(path)
    report = verify(target("attention_mask.py"), levels=("O1", "O2"), device="cpu", steps=2, fix=True)
    assert _sha(path) == before, "verify --fix must never write the user's files"
    return report


def test_masked_fill_crashes_at_o2_and_maps_to_the_source_line(attention):
    crash = attention["before"]["O2"]["crash"]
    assert crash is not None
    assert "c10::Half without overflow" in crash["message"]
    assert crash["file"] == os.path.join(V, "attention_mask.py")
    with open(crash["file"]) as fh:
        line = fh.read().splitlines()[crash["line"] - 1]
    assert "masked_fill" in line and "-1e9" in line
    assert crash["phase"] == "forward"
    assert attention["before"]["O0"]["crash"] is None
    assert "O2" in attention["failing_levels"]


def test_masked_fill_finding_confirmed_then_fixed(attention):
    f = _finding(attention, "AMP101")
    assert any(e["kind"] == "crash" and e["level"] == "O2" for e in f["evidence"])
    assert f["status"] == "fixed"
    after = attention["after"]["O2"]
    assert after["crash"] is None and not after["first_nonfinite_site"]
    assert attention["fp32_change"] is not None and attention["fp32_change"] <= attention["tolerance"]
    assert attention["exit_status"] == 0  # safe after the fixes
    assert "finfo" in "".join(attention["fixed_files"].values())


def test_crash_is_explained_by_the_finding_not_runtime_only(attention):
    crashes = [p for p in attention["problems"] if p["kind"] == "crash"]
    assert crashes and all(p["explained_by"] for p in crashes)
    assert not [p for p in attention["runtime_only"] if p["kind"] == "crash"]


def test_handwritten_norm_nan_in_half_before_and_not_after_unsafe_fix():
    report = verify(target("handwritten_norm.py"), levels=("O2",), device="cpu", steps=2, unsafe_fixes=True)
    o2 = report["before"]["O2"]
    assert o2["first_nonfinite_site"]["line"] == 16 and o2["first_nonfinite_module"] == "norm"
    site = [s for s in o2["sites"] if s["line"] == 16 and s["new_nonfinite"]]
    assert site and site[0]["nan"] + site[0]["inf"] > 0
    # the O0 run of the same code is finite
    assert not any(s["new_nonfinite"] or s["nan"] or s["inf"] for s in report["before"]["O0"]["sites"])
    f = _finding(report, "AMP102")
    assert {"inf/NaN", "underflow"} <= {e["kind"] for e in f["evidence"]}
    assert f["status"] == "fixed", f
    assert report["after"]["O2"]["first_nonfinite_site"] is None
    assert report["failing_levels"] == ["O2"] and report["failing_levels_after"] == []


def test_handwritten_norm_safe_fixes_only():
    # AMP102's epsilon fix is unsafe and is not applied; the fixes that are applied (safe ones
    # only) must still be proved on the fixed copy, with the status of each finding accordingly
    report = verify(target("handwritten_norm.py"), levels=("O2",), device="cpu", steps=1, fix=True)
    diff = "".join(report["fixed_files"].values())
    assert "1e-4" not in diff  # the unsafe epsilon change was not applied
    after_bad = report["failing_levels_after"]
    for f in report["findings"]:
        if f["status"] == "fixed":
            assert not f["after_evidence"] and not after_bad
        else:
            assert f["status"] in ("confirmed", "fix did not remove it", "not reproduced")
    assert report["exit_status"] == (1 if after_bad else 0)
    # per hazard, not per line: the zero rows' NaN is the epsilon's (its fix was not applied),
    # not the `.pow()`/`.mean()` reduction's on the same line
    by_span = {(f["code"], f["column"]): f for f in report["findings"]}
    assert "inf/NaN" in {e["kind"] for e in by_span[("AMP102", 79)]["evidence"]}
    assert by_span[("AMP302", 45)]["evidence"] == [] and by_span[("AMP302", 45)]["status"] == "not reproduced"


def test_einsum_runs_in_fp32_at_o1_before_registration_and_half_after():
    from amplint.amp._casting import CASTS

    registry = dict(CASTS.registry)
    report = verify(target("einsum_mixer.py"), levels=("O1",), device="cpu", steps=1, fix=True)
    before = [s for s in report["before"]["O1"]["sites"] if s["op"] == "einsum"]
    after = [s for s in report["after"]["O1"]["sites"] if s["op"] == "einsum"]
    assert before[0]["dtypes"] == ["float32"]
    assert after[0]["dtypes"] == ["float16"]
    f = _finding(report, "AMP401")
    # the registrations are the training script's to make (a display fix): verify made them
    # for its run, the files are unchanged (issue 24)
    assert f["evidence"][0]["kind"] == "fp32 path" and f["status"] == "fix not applied (display only)"
    # the fixed copy's register_half_function must not leak into this process
    assert dict(CASTS.registry) == registry
    assert not CASTS.is_installed


def test_clean_model_is_clean():
    report = verify(target(os.path.join("clean", "mlp.py")), levels=("O1", "O2", "O3"), device="cpu", steps=2, optimizer="sgd")
    assert report["findings"] == []
    assert report["problems"] == [] and report["runtime_only"] == []
    assert report["exit_status"] == 0
    for level in ("O1", "O2", "O3"):
        run = report["before"][level]
        assert run["crash"] is None and run["output_rel_err"] < report["tolerance"]
        assert len(run["losses"]) == 2
        mods = {m["name"]: m for m in run["modules"]}
        assert mods["blocks.0.fc1"]["forward"]["dtypes"] == ["float16"]
        assert mods["blocks.0.fc1"]["grad"]["calls"] == 2
        assert mods["blocks.0.fc1"]["constructed"]["line"] == 10  # where nn.Linear(d, 4 * d) is written
    assert report["before"]["O1"]["loss_scales"] == [65536.0, 65536.0]
    assert report["before"]["O0"]["loss_scales"] == [1.0, 1.0]


def test_failure_no_rule_predicts_is_runtime_only():
    report = verify(target("overflow_gemm.py"), levels=("O1",), device="cpu", steps=2)
    assert report["findings"] == []
    assert report["exit_status"] == 1
    [problem] = report["runtime_only"]
    assert problem["kind"] == "inf/NaN" and problem["level"] == "O1"
    assert problem["file"] == os.path.join(V, "overflow_gemm.py") and problem["line"] == 17  # gram = h @ h^T
    o1 = report["before"]["O1"]
    assert o1["skipped_steps"] == 2 and o1["loss_scales"] == [32768.0, 16384.0]


def test_bf16_has_the_range_for_the_gram_matrix():
    report = verify(target("overflow_gemm.py"), levels=("O1",), dtype="bf16", device="cpu", steps=1)
    assert report["before"]["O1"]["first_nonfinite_site"] is None
    assert report["exit_status"] == 0
    assert report["before"]["O1"]["loss_scales"] == [1.0]


def test_verify_model_object_and_isolation():
    from torch import nn

    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))
    weights = [p.detach().clone() for p in model.parameters()]
    modules_before = set(sys.modules)
    report = verify_model(model, (torch.randn(3, 16),), levels=("O2",), device="cpu", steps=2)
    assert report["exit_status"] == 0
    assert all(torch.equal(a, b) for a, b in zip(weights, model.parameters())), "the caller's model must not be trained"
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert not [m for m in set(sys.modules) - modules_before if m.startswith("amplint_verify_target_")]


def test_divergence_beyond_tolerance_is_reported():
    report = verify(target(os.path.join("clean", "mlp.py")), levels=("O2",), device="cpu", steps=1, tolerance=1e-6)
    [problem] = report["runtime_only"]
    assert problem["kind"] == "divergence"
    assert report["exit_status"] == 0  # divergence alone is reported, not a crash or inf/NaN


def _project(tmp_path, absolute):
    src = tmp_path / "src" / "pkg"
    src.mkdir(parents=True)
    (src / "__init__.py").write_text("")
    text = open(os.path.join(V, "attention_mask.py")).read()
    (src / "model.py").write_text(text.split("\ndef example")[0])
    (tmp_path / "harness").mkdir()
    entry = repr(str(tmp_path / "src")) if absolute else 'os.path.join(os.path.dirname(__file__), "..", "src")'
    (tmp_path / "harness" / "h.py").write_text(
        "import os, sys\n"
        f"sys.path.insert(0, {entry})\n"
        "import torch\n"
        "from pkg.model import Encoder\n\n\n"
        "def make():\n"
        "    mask = torch.zeros(2, 16, dtype=torch.bool)\n"
        "    mask[1, 12:] = True\n"
        "    return Encoder(), (torch.randint(1, 64, (2, 16)), mask)\n")
    return str(tmp_path / "harness" / "h.py") + "::make", src / "model.py"


def test_fix_proof_reimports_a_package_from_the_copies(tmp_path):
    spec, model_file = _project(tmp_path, absolute=False)
    before = model_file.read_bytes()
    report = verify(spec, levels=("O2",), device="cpu", steps=1, fix=True)
    assert model_file.read_bytes() == before
    assert str(model_file) in report["files"]
    assert _finding(report, "AMP101")["status"] == "fixed"
    assert report["after"]["O2"]["crash"] is None and not report["warnings"]
    assert "pkg.model" not in sys.modules  # the user's modules do not stay imported


def test_fix_proof_detects_a_harness_that_imports_the_originals(tmp_path):
    # an absolute sys.path entry makes the "fixed" run import the unfixed original: the proof
    # must say so and must not call the finding fixed
    spec, _ = _project(tmp_path, absolute=True)
    report = verify(spec, levels=("O2",), device="cpu", steps=1, fix=True)
    assert report["warnings"] and "imported the original" in report["warnings"][0]
    assert _finding(report, "AMP101")["status"] == "fix did not remove it"
    assert report["exit_status"] == 1
