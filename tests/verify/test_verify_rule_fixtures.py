"""The rule engineers' fixtures, run: each rule family's finding manifests at runtime and its
fix removes it (CPU).  Lines are not hard-coded: the fixtures belong to the rule families."""
from __future__ import annotations

import os


import torch  # noqa: E402,F401  (a dev dependency: a broken torch must fail, not skip)

from amplint.verify import verify  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(rel, levels, **kw):
    path = os.path.join(ROOT, "fixtures", rel)
    assert os.path.isfile(path), f"fixture {rel} is missing"  # a missing fixture is a failure, not a skip
    return verify(path + "::example", levels=levels, device="cpu", steps=1, **kw)


def with_code(report, code):
    found = [f for f in report["findings"] if f["code"] == code]
    assert found, f"no {code} finding; got {[(f['code'], f['line']) for f in report['findings']]}"
    return found


def test_amp101_masked_fill_crashes_at_o2_and_the_fix_runs():
    report = run("constants/attention_masked_fill.py", ("O2",), fix=True)
    crashed = [f for f in with_code(report, "AMP101") if any(e["kind"] == "crash" for e in f["evidence"])]
    assert crashed and all(f["status"] == "fixed" for f in crashed)
    assert report["failing_levels"] == ["O2"] and report["failing_levels_after"] == []
    assert report["exit_status"] == 0


def test_amp102_epsilon_nan_in_half_and_the_unsafe_fix_removes_it():
    report = run("constants/layernorm_eps.py", ("O2",), unsafe_fixes=True)
    manifested = [f for f in with_code(report, "AMP102") if any(e["kind"] == "inf/NaN" for e in f["evidence"])]
    assert manifested and all(f["status"] == "fixed" for f in manifested)
    assert report["failing_levels_after"] == []
    assert report["fp32_change"] <= report["tolerance"]


def test_amp401_op_not_covered_at_o1_and_registration_fixes_it():
    report = run("ops/perceiver_io.py", ("O1",), fix=True)
    confirmed = [f for f in with_code(report, "AMP401") if f["evidence"]]
    # the registration is a display fix for the training script, which verify makes itself:
    # the fixed run passes, and the finding says the file was not changed (issue 24)
    assert confirmed and all(f["status"] == "fix not applied (display only)" for f in confirmed)
    assert report["failing_levels_after"] == []


def test_amp201_unaligned_layers_ran_in_half_and_padding_changes_fp32():
    report = run("dims/widths.py", ("O1",), unsafe_fixes=True)
    slow = [f for f in with_code(report, "AMP201") if any(e["kind"] == "slow path" for e in f["evidence"])]
    assert slow
    # padding a layer changes the architecture: the fp32 results cannot stay the same
    assert all(f["status"] == "fix changes fp32 results" for f in slow)
    assert report["exit_status"] == 1


def test_amp301_softmax_underflow_in_pure_half():
    report = run("reductions/o2/pure_half.py", ("O2",), fix=True)
    under = [f for f in with_code(report, "AMP301") if any(e["kind"] == "underflow" for e in f["evidence"])]
    assert under
    for f in under:
        # the status must agree with what the fixed copy did at runtime: computing softmax in
        # fp32 but storing the probabilities in half again still flushes those below 6e-8 to 0
        still = any(e["kind"] == "underflow" for e in f["after_evidence"])
        assert f["status"] == ("fix did not remove it" if still else "fixed")
