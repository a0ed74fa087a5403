"""AMP302 through the CLI: idioms of real projects whose sums cannot overflow, and the
look-alikes that still do."""
import json
import textwrap

# recommender / graph models: each field's embedding row summed over the fields
FIELD_SUMS = """
import torch
import torch.nn as nn
import torch.nn.functional as F

class FieldEmbedding(nn.Module):
    def __init__(self, n, d):
        super().__init__()
        self.embedding = nn.Embedding(n, d)

    def forward(self, ids):
        rows = self.embedding(ids)
        return rows

class Linear(nn.Module):
    def __init__(self, n, d):
        super().__init__()
        self.fc = nn.Embedding(n, 1)
        self.fields = FieldEmbedding(n, d)

    def forward(self, ids, codes, table, seq):
        first = torch.sum(self.fc(ids), dim=1)
        second = self.fields(ids).sum(dim=1)
        third = F.embedding(codes, table).sum(dim=0)
        terms = []
        for s in seq:
            terms.append(s.mean(dim=1, keepdim=True))
        fourth = torch.sum(torch.cat(terms, dim=1), dim=1)
        return first + second + third + fourth
"""

# a factorisation machine squares the sum of its fields: still reported
FM_SQUARED = """
import torch
import torch.nn as nn

class FM(nn.Module):
    def __init__(self, n, d):
        super().__init__()
        self.embedding = nn.Embedding(n, d)

    def forward(self, ids, x):
        square_of_sum = torch.sum(self.embedding(ids), dim=1) ** 2
        s = self.embedding(ids).sum(1)
        long = torch.cat([x, x], dim=2).sum(1)
        return square_of_sum - s * s + long
"""


def _amp302_lines(amplint, tmp_path, source, *options):
    path = tmp_path / "model.py"
    path.write_text(textwrap.dedent(source))
    proc = amplint("check", "--select", "AMP302", "--output-format", "json", "--no-cache", *options, str(path), cwd=tmp_path)
    assert proc.returncode in (0, 1), proc.stderr
    return sorted(f["line"] for f in json.loads(proc.stdout) if f["code"] == "AMP302")


def test_sums_of_embedding_rows_over_fields_are_not_reported(amplint, tmp_path):
    assert _amp302_lines(amplint, tmp_path, FIELD_SUMS) == []


def test_a_squared_field_sum_is_still_reported(amplint, tmp_path):
    assert _amp302_lines(amplint, tmp_path, FM_SQUARED) == [11, 12, 13]


# gates bounded on both branches of an `if` stay bounded; a bound set on one branch only
# is not one (the earlier, unbounded value may reach the sum)
GATES = """
import torch
import torch.nn as nn

class G(nn.Module):
    def forward(self, gates, x, mask):
        if mask is None:
            gates = torch.sigmoid(gates)
        else:
            gates = torch.sigmoid(gates + mask.unsqueeze(-1))
        if self.squash:
            x = torch.sigmoid(x)
        degrees = torch.sum(gates, dim=2, keepdim=True)
        return degrees + torch.sum(x, dim=2)
"""


def test_bounds_on_both_branches_hold_and_on_one_branch_do_not(amplint, tmp_path):
    assert _amp302_lines(amplint, tmp_path, GATES, "--opt-level", "O2") == [14]


# a hand-written GELU kept only as the fallback of `nn.GELU` (torch < 1.2) never runs;
# the same class used directly does
GELU_FALLBACK = """
import math
import torch
from torch import nn

class GELU_(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * torch.pow(x, 3))))

GELU = nn.GELU if hasattr(nn, 'GELU') else GELU_

class Gelu2(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * torch.pow(x, 3))))

class FF(nn.Module):
    def __init__(self):
        super().__init__()
        self.act, self.act2 = GELU(), Gelu2()
"""


def test_a_dead_fallback_of_a_torch_class_is_not_reported(amplint, tmp_path):
    assert _amp302_lines(amplint, tmp_path, GELU_FALLBACK) == [14]


# loader coordinates (`pos`) unpacked from a tuple of differences and crossed stay fp32
# data; an activation summed beside them is still reported
GEOMETRY = """
import torch
import torch.nn as nn

class DimeNet(nn.Module):
    def forward(self, z, pos, idx_i, idx_j, idx_k):
        pos_i = pos[idx_i]
        pos_ji, pos_ki = pos[idx_j] - pos_i, pos[idx_k] - pos_i
        a = (pos_ji * pos_ki).sum(dim=-1)
        b = torch.cross(pos_ji, pos_ki).norm(dim=-1)
        h, g = self.lin(z), z
        return torch.atan2(b, a), h.sum(dim=-1)
"""


def test_coordinates_unpacked_and_crossed_stay_data(amplint, tmp_path):
    assert _amp302_lines(amplint, tmp_path, GEOMETRY) == [12]


# transformers' MegaRMSNorm: the normalised value is a statement of its own, never used
DISCARDED_STATISTIC = """
import torch
import torch.nn as nn

class RMSNorm(nn.Module):
    def forward(self, input):
        mean_square = torch.mean(torch.square(input), dim=-1, keepdim=True)
        input * torch.rsqrt(mean_square + 1e-5)
        return input

class Used(nn.Module):
    def forward(self, input):
        mean_square = torch.mean(torch.square(input), dim=-1, keepdim=True)
        input * torch.rsqrt(mean_square + 1e-5)
        return input * torch.rsqrt(mean_square + 1e-5)
"""


def test_a_statistic_only_used_by_a_statement_with_no_effect_is_not_reported(amplint, tmp_path):
    assert _amp302_lines(amplint, tmp_path, DISCARDED_STATISTIC, "--opt-level", "O2") == [13]


# torchfm's AFN: expm1 of an unbounded logarithmic-network output overflows like exp
EXPM1 = """
import torch
import torch.nn as nn

class LNN(nn.Module):
    def __init__(self, n, d):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, d))

    def forward(self, x):
        lnn_out = torch.matmul(self.weight, torch.log1p(torch.abs(x) + 1e-7))
        clamped = torch.expm1(lnn_out.clamp(max=10.0))
        return torch.expm1(lnn_out) + clamped
"""


def test_expm1_is_reported_like_exp(amplint, tmp_path):
    # line 12: clamped below 11.09 first
    assert _amp302_lines(amplint, tmp_path, EXPM1, "--opt-level", "O2") == [13]


# a spectrogram from a conv STFT (torchlibrosa): the squared components of one complex value
MAGNITUDE = """
import torch
import torch.nn as nn

class Spectrogram(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.conv_real = nn.Conv1d(1, n, 1024)
        self.conv_imag = nn.Conv1d(1, n, 1024)
        self.sigma_data = 0.5

    def forward(self, x, sigma):
        real, imag = self.conv_real(x), self.conv_imag(x)
        power = real ** 2 + imag ** 2
        c_skip = self.sigma_data ** 2 / (sigma ** 2 + self.sigma_data ** 2)
        return power * c_skip
"""


def test_a_magnitude_from_two_squares_is_reported_but_not_one_with_a_hyperparameter(amplint, tmp_path):
    assert _amp302_lines(amplint, tmp_path, MAGNITUDE, "--opt-level", "O2") == [14, 14]
