"""AMP401 on the idioms of fixtures/ops/library, through the command line: where the
finding's severity says something the fixture markers cannot."""
from __future__ import annotations

import json


def test_library_functions_are_info_and_model_code_is_not(amplint):
    proc = amplint("check", "fixtures/ops/library", "fixtures/ops/clean/library_script.py",
                   "--select", "AMP401", "--format", "json", "--no-cache")
    assert proc.returncode in (0, 1), proc.stderr
    found = {(f["path"].rsplit("/", 1)[-1], f["line"]): f for f in json.loads(proc.stdout)}
    # a library file's public functions: their callers decide whether the input is half
    assert found[("spectral.py", 37)]["severity"] == "info"
    assert "library function" in found[("spectral.py", 37)]["message"]
    # the same op reached from a module's forward is the model's own
    assert found[("fft_conv.py", 17)]["severity"] == "warning"
    assert found[("einsum_wrappers.py", 18)]["message"].startswith("`tl.einsum`")
    assert not [k for k in found if k[0] == "library_script.py"]


def test_functions_a_factory_returns_and_forward_calls_through_self_run_in_training(amplint):
    proc = amplint("check", "fixtures/ops/library/factory_contraction.py",
                   "--select", "AMP401", "--format", "json", "--no-cache")
    assert proc.returncode == 1, proc.stderr
    found = {f["line"]: f for f in json.loads(proc.stdout)}
    # the two contractions get_contract_fun returns; the one it never returns stays quiet
    assert sorted(found) == [10, 14]
    assert all(f["severity"] == "warning" and f["message"].startswith("`tl.einsum`") for f in found.values())


def test_a_kernel_keops_compiles_bound_through_partial_is_a_compiled_extension(amplint):
    proc = amplint("check", "fixtures/ops/library/keops_reduction.py",
                   "--select", "AMP401", "--format", "json", "--no-cache")
    assert proc.returncode == 1, proc.stderr
    found = {f["line"]: f for f in json.loads(proc.stdout)}
    # log_conv: partial(softmin_online, log_conv=keops_lse(...)), keops_lse returning
    # generic_logsumexp(...); plain_softmin's `reduce` is bound to nothing KeOps built
    assert sorted(found) == [11]
    assert "compiled extension" in found[11]["message"]
