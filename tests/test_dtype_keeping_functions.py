"""AMP401 through the CLI: a custom autograd Function without custom_fwd whose forward and
backward only do dtype-keeping ops (DeBERTa's XDropout: ``masked_fill`` and a scalar
multiply) is reported at info, with no fix; one that runs a softmax and
``_softmax_backward_data`` (XSoftmax) stays a warning, also when the module only exports
it through ``__all__``."""
import json
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURE = os.path.join(ROOT, "fixtures", "ops", "dtype_keeping_function.py")


def _amp401(amplint, tmp_path):
    proc = amplint("check", "--select", "AMP401", "--output-format", "json", "--no-cache", FIXTURE, cwd=tmp_path)
    assert proc.returncode in (0, 1), proc.stderr
    return {f["line"]: f for f in json.loads(proc.stdout) if f["code"] == "AMP401"}


def test_dtype_keeping_function_is_info_without_fix(amplint, tmp_path):
    dropout = _amp401(amplint, tmp_path)[40]
    assert dropout["severity"] == "info"
    assert "`masked_fill` and a scalar multiply" in dropout["message"]
    assert not dropout.get("fix")


def test_softmax_function_stays_a_warning(amplint, tmp_path):
    found = _amp401(amplint, tmp_path)
    assert found[15]["severity"] == "warning"


def test_function_exported_through_all_is_reported(amplint, tmp_path):
    exported = _amp401(amplint, tmp_path)[30]
    assert exported["severity"] == "warning"
    assert sorted(_amp401(amplint, tmp_path)) == [15, 30, 40]
