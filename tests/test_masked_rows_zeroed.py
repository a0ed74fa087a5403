"""AMP103 through the CLI: a -inf fill whose softmax probabilities are zeroed again on the
same mask (funasr's ``softmax(s).masked_fill(mask, 0.0)``, rl4co's ``attnc[mask] = 0``) leaves
no NaN forward or backward, so it is not reported; zeroing the output after ``@ v`` still is
(v's gradient reads the NaN row)."""
import json
import textwrap

ZEROED = """
import torch
import torch.nn as nn

class Attention(nn.Module):
    def forward(self, scores, chunk_mask, pad):
        mask = chunk_mask | pad
        scores = scores.masked_fill(mask, float("-inf"))
        return torch.softmax(scores, dim=-1).masked_fill(mask, 0.0)

class Ham(nn.Module):
    def forward(self, compat, mask):
        compat[mask] = float("-inf")
        attn = torch.softmax(compat, dim=-1)
        attnc = attn.clone()
        attnc[mask] = 0
        return attnc
"""

OUTPUT_ZEROED = """
import torch
import torch.nn as nn

class Attention(nn.Module):
    def forward(self, scores, v, mask):
        scores = scores.masked_fill(mask, float("-inf"))
        out = torch.softmax(scores, dim=-1) @ v
        return out.masked_fill(mask, 0.0)
"""


def _amp103_lines(amplint, tmp_path, source):
    path = tmp_path / "model.py"
    path.write_text(textwrap.dedent(source))
    proc = amplint("check", "--select", "AMP103", "--output-format", "json", "--no-cache", str(path), cwd=tmp_path)
    assert proc.returncode in (0, 1), proc.stderr
    return [f["line"] for f in json.loads(proc.stdout) if f["code"] == "AMP103"]


def test_probabilities_zeroed_on_the_same_mask_are_not_reported(amplint, tmp_path):
    assert _amp103_lines(amplint, tmp_path, ZEROED) == []


def test_output_zeroed_after_the_matmul_is_still_reported(amplint, tmp_path):
    assert _amp103_lines(amplint, tmp_path, OUTPUT_ZEROED) == [7]
