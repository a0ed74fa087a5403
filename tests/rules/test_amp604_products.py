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


# LSH / shared-QK attention (reformer): the keys are l2-normalised, through a `.type(...)`
# cast, a layout-only `map(lambda ...)`, a local helper and a padded, sliced look-around,
# so |q . k| <= |q|: not reported; the same product with raw keys is, and so are keys
# normalised only under an `if`
NORMALISED_KEYS = textwrap.dedent("""\
    import torch
    import torch.nn as nn
    import torch.nn.functional as F


    def look_around(x, backward=1, forward=0, pad_value=-1, dim=2):
        t = x.shape[1]
        padded_x = F.pad(x, (0, 0, backward, forward), value=pad_value)
        tensors = [padded_x[:, ind:(ind + t), ...] for ind in range(forward + backward + 1)]
        return torch.cat(tensors, dim=dim)


    class LSH(nn.Module):
        def forward(self, bqk, qk, v, dim):
            bq = bqk
            bk = F.normalize(bqk, p=2, dim=-1).type(bq.type())

            def look_one_back(x):
                x_extra = torch.cat([x[:, -1:, ...], x[:, :-1, ...]], dim=1)
                return torch.cat([x, x_extra], dim=2)

            bk = look_one_back(bk)
            dots = torch.einsum('bhie,bhje->bhij', bq, bk) * (dim ** -0.5)
            k = F.normalize(qk, 2, dim=-1).type(bq.type())
            bucket_fn = lambda t: t.reshape(2, 3, 4, -1)
            cq, ck, cv = map(bucket_fn, (bq, k, v))
            ck = look_around(ck)
            dots2 = torch.einsum('bhie,bhje->bhij', cq, ck) * (dim ** -0.5)
            raw = torch.einsum('bhie,bhje->bhij', cq, look_around(cv)) * (dim ** -0.5)
            return dots + dots2 + raw


    class MaybeShared(nn.Module):
        def forward(self, q, k, e):
            if self.shared_qk:
                k = F.normalize(k, 2, dim=-1).type_as(q)
            return torch.einsum('bhie,bhje->bhij', q, k) * (e ** -0.5)
    """)


def test_cli_amp604_keys_normalised_through_casts_maps_and_helpers(tmp_path, amplint):
    src = tmp_path / "lsh.py"
    src.write_text(NORMALISED_KEYS)
    proc = amplint("check", str(src), "--format", "json", "--no-cache", "--extend-select", "AMP604")
    # the raw product, and keys normalised only on one branch
    assert [f["line"] for f in json.loads(proc.stdout) if f["code"] == "AMP604"] == [29, 37], proc.stdout


# `attn @ v` written as an einsum contracts the last index of one operand with an inner
# index of the other; scaling its output (a learned per-head scale, a degree scaler) is not
# scaling logits. q . k lays the contracted feature out alike in both operands.
ATTN_TIMES_V = textwrap.dedent("""\
    import torch
    from torch import einsum, nn


    class Heads(nn.Module):
        def forward(self, attn, v, q, k):
            out = einsum('b h i j, b h j d -> b h i d', attn, v)
            out = out * self.head_scale_params
            agg = torch.einsum("blmh,bmkh->blkh", attn, v)
            agg = agg * self.degree_scalers
            sim = torch.einsum("bldh,bmdh->blmh", q, k) * self.scale
            return out, agg, sim
    """)


def test_cli_amp604_attention_times_values_is_not_logits(tmp_path, amplint):
    src = tmp_path / "heads.py"
    src.write_text(ATTN_TIMES_V)
    proc = amplint("check", str(src), "--format", "json", "--no-cache", "--extend-select", "AMP604")
    assert [f["line"] for f in json.loads(proc.stdout) if f["code"] == "AMP604"] == [11], proc.stdout


# q scaled before the product (the safe form), even when the product is divided again
PRESCALED = textwrap.dedent("""\
    import math
    import torch
    from torch import nn


    class PosAttention(nn.Module):
        def forward(self, pos_emb, x):
            pos_query_layer = self.transpose_for_scores(self.pos_q_linear(pos_emb)) * self.pos_scaling
            pos_key_layer = self.transpose_for_scores(self.pos_k_linear(pos_emb))
            bias = torch.matmul(pos_query_layer, pos_key_layer.transpose(-1, -2))
            bias = bias / math.sqrt(self.attention_head_size)
            query = self.transpose_for_scores(self.q(x))
            scores = torch.matmul(query, pos_key_layer.transpose(-1, -2))
            return bias, scores / math.sqrt(self.attention_head_size)
    """)


def test_cli_amp604_query_scaled_before_the_product(tmp_path, amplint):
    src = tmp_path / "pos.py"
    src.write_text(PRESCALED)
    proc = amplint("check", str(src), "--format", "json", "--no-cache", "--extend-select", "AMP604")
    assert [f["line"] for f in json.loads(proc.stdout) if f["code"] == "AMP604"] == [14], proc.stdout


# edge-augmented keys carry the query's index (`b i d, b i j d -> b i j`): still q . k;
# keys normalised through `map(l2norm, ...)` only under an `if`: still reported
EDGE_KEYS = textwrap.dedent("""\
    import torch
    import torch.nn.functional as F
    from torch import einsum, nn


    def l2norm(t):
        return F.normalize(t, dim=-1)


    class GraphAttention(nn.Module):
        def forward(self, q, k, e):
            k = k[:, None] + e
            return einsum('b i d, b i j d -> b i j', q, k) * self.scale


    class MaybeNormed(nn.Module):
        def forward(self, q, k):
            if self.qk_norm:
                q, k = map(l2norm, (q, k))
            return einsum('b h i d, b h j d -> b h i j', q, k) * self.scale


    class Cosine(nn.Module):
        def forward(self, q, k):
            q, k = map(l2norm, (q, k))
            return einsum('b h i d, b h j d -> b h i j', q, k) * self.scale
    """)


def test_cli_amp604_edge_keys_and_conditionally_normalised_keys(tmp_path, amplint):
    src = tmp_path / "graph.py"
    src.write_text(EDGE_KEYS)
    proc = amplint("check", str(src), "--format", "json", "--no-cache", "--extend-select", "AMP604")
    assert [f["line"] for f in json.loads(proc.stdout) if f["code"] == "AMP604"] == [13, 20], proc.stdout
