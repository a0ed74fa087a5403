"""AMP103 through the CLI: masks that empty a padded query's row although their names say
"padding" or nothing -- a query mask x key mask outer product whose union is filled
(LoFTR), a key-padding mask over a sliding window or added on top of a band mask
(LightHuBERT), ``triu(-inf, diagonal=0)`` (fairseq's downsampled attention) -- are
warnings; a key-padding bias over all keys and a ``diagonal=1`` causal mask stay quiet."""
import json
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURE = os.path.join(ROOT, "fixtures", "constants", "padded_query_rows.py")
CLEAN = os.path.join(ROOT, "fixtures", "constants", "clean", "key_rows.py")


def _amp103(amplint, tmp_path, path):
    proc = amplint("check", "--select", "AMP103", "--output-format", "json", "--no-cache", path, cwd=tmp_path)
    assert proc.returncode in (0, 1), proc.stderr
    return [(f["line"], f["severity"]) for f in json.loads(proc.stdout) if f["code"] == "AMP103"]


def _expected_lines(path):
    with open(path, encoding="utf-8") as fh:
        return [n for n, line in enumerate(fh, 1) if "# expect: AMP103" in line]


def test_padded_query_rows_are_warnings(amplint, tmp_path):
    found = _amp103(amplint, tmp_path, FIXTURE)
    assert [line for line, _ in found] == _expected_lines(FIXTURE)
    assert {severity for _, severity in found} == {"warning"}


def test_rows_that_keep_a_key_are_quiet(amplint, tmp_path):
    assert _amp103(amplint, tmp_path, CLEAN) == []
