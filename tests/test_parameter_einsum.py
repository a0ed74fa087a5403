"""AMP401 through the CLI: an einsum whose operands all come from the module's parameters
(Mega's EMA kernel: sigmoid of a parameter, ``arange(length)``, ``self.projection *
self.scale``) is info -- under O1 it runs in fp32 with matching dtypes -- while an einsum
over an argument of ``forward`` (an activation) stays a warning."""
import json
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURE = os.path.join(ROOT, "fixtures", "ops", "parameter_einsum.py")


def test_parameter_only_einsum_is_info(amplint, tmp_path):
    proc = amplint("check", "--select", "AMP401", "--output-format", "json", "--no-cache", FIXTURE, cwd=tmp_path)
    assert proc.returncode in (0, 1), proc.stderr
    found = {f["line"]: f["severity"] for f in json.loads(proc.stdout) if f["code"] == "AMP401"}
    assert found == {24: "info", 27: "warning"}
