"""AMP604 through the command line: a scaling on a later line names the product's line
(related), scaling from the left, in place (`/=`), by a name holding the square root, and
a sum holding a shifted product; an attention helper at module level."""
from __future__ import annotations

import json
import textwrap

SOURCE = textwrap.dedent("""\
    import torch
    from torch import nn


    class RelAttention(nn.Module):
        def forward(self, q, k, p):
            ac = torch.matmul(q, k.transpose(-2, -1))
            bd = torch.matmul(q, p.transpose(-2, -1))
            bd = self.rel_shift(bd)
            return (ac + bd) / self.d_k ** 0.5


    class InPlace(nn.Module):
        def forward(self, q, k):
            w = torch.einsum("bnik,bnjk->bnij", q, k)
            if self.scaling:
                w /= self.size ** 0.5
            return w


    class LeftScale(nn.Module):
        def forward(self, q, k):
            return self.norm_factor * torch.matmul(q, k.transpose(2, 3))


    class SqrtName(nn.Module):
        def forward(self, q, k):
            attn = torch.bmm(q, k.permute(0, 2, 1))
            dimension = torch.as_tensor(k.size(-1)).sqrt()
            return attn / dimension


    def sdpa_fallback(q, k):
        return torch.matmul(q, k.transpose(-2, -1)) / (k.size(-1) ** 0.5)
    """)


def test_cli_amp604_reports_products_formed_before_the_scaling(tmp_path, amplint):
    src = tmp_path / "attn.py"
    src.write_text(SOURCE)
    proc = amplint("check", str(src), "--format", "json", "--no-cache", "--extend-select", "AMP604")
    found = {f["line"]: sorted(r["line"] for r in f["related"]) for f in json.loads(proc.stdout) if f["code"] == "AMP604"}
    assert found == {10: [7, 8], 17: [15], 23: [], 30: [28], 34: []}, proc.stdout
