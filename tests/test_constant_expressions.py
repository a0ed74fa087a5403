"""AMP101 through the CLI: a padding value written as a constant expression of ints
(DIN's ``torch.ones_like(scores) * (-2 ** 32 + 1)``) is a fill value, reported like
``-1e9``; an int added to a tensor that is not a fill (token-id arithmetic) is not."""
import json
import textwrap

SOURCE = """
import torch
import torch.nn as nn

class AttentionSequencePooling(nn.Module):
    def forward(self, query, keys, keys_masks, ids):
        outputs = torch.transpose(self.local_att(query, keys), 1, 2)
        paddings = torch.ones_like(outputs) * (-2 ** 32 + 1)
        outputs = torch.where(keys_masks, outputs, paddings)
        shifted = ids + 2 ** 20
        return outputs, shifted
"""


def test_int_fill_expression_times_ones_is_reported(amplint, tmp_path):
    path = tmp_path / "din.py"
    path.write_text(textwrap.dedent(SOURCE))
    proc = amplint("check", "--select", "AMP101", "--output-format", "json", "--no-cache", str(path), cwd=tmp_path)
    assert proc.returncode in (0, 1), proc.stderr
    assert [f["line"] for f in json.loads(proc.stdout)] == [8], proc.stdout
