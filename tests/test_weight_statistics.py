"""The dtype flow through the CLI: a layer subclass's inherited ``self.weight`` is a
parameter (fp32 under O1, half under O2), and so are the statistics unpacked from it
(``std, mean = torch.std_mean(self.weight, ...)``, timm's weight standardisation); a
learned temperature that the class sets to a number or an ``nn.Parameter`` is a weight,
not an activation."""
import json
import textwrap

STD_CONV = """
import torch
import torch.nn as nn
import torch.nn.functional as F

class StdConv2d(nn.Conv2d):
    def __init__(self, *a, eps=1e-5, **k):
        super().__init__(*a, **k)
        self.eps = eps

    def get_weight(self):
        std, mean = torch.std_mean(self.weight, dim=[1, 2, 3], keepdim=True, unbiased=False)
        return (self.weight - mean) / (std + self.eps)

    def forward(self, x):
        s, m = torch.std_mean(x, dim=1, keepdim=True)
        x = (x - m) / (s + self.eps)
        return F.conv2d(x, self.get_weight(), self.bias)
"""

TEMPERATURE = """
import torch
import torch.nn as nn

class Attention(nn.Module):
    def __init__(self, dim_head, heads, qk_norm=False):
        super().__init__()
        self.scale = dim_head ** -0.5
        if qk_norm:
            self.scale = nn.Parameter(torch.ones(1, heads, 1, 1) * 10.0)

    def forward(self, q, k):
        scale = 1 / (self.scale.exp().clamp(min=1e-2))
        return (q @ k.transpose(-2, -1)) * scale, q.exp()
"""


def _findings(amplint, tmp_path, source, select, *options):
    path = tmp_path / "model.py"
    path.write_text(textwrap.dedent(source))
    proc = amplint("check", "--select", select, "--output-format", "json", "--no-cache", *options, str(path), cwd=tmp_path)
    assert proc.returncode in (0, 1), proc.stderr
    return sorted((f["line"], f["severity"]) for f in json.loads(proc.stdout))


def test_statistics_of_an_inherited_weight_are_fp32_under_o1(amplint, tmp_path):
    # the weight's std: info under O1 (half only once the model is cast); the input's: a warning
    assert _findings(amplint, tmp_path, STD_CONV, "AMP102") == [(13, "info"), (17, "warning")]
    assert _findings(amplint, tmp_path, STD_CONV, "AMP102", "--opt-level", "O2") == [(13, "warning"), (17, "warning")]


def test_exp_of_a_learned_temperature_is_not_an_activation(amplint, tmp_path):
    assert [line for line, _ in _findings(amplint, tmp_path, TEMPERATURE, "AMP302")] == [14]
