"""AMP601 / AMP602 through the CLI: a rotary embedding whose ``self.dtype`` the class only
sets from a parameter it asserts is fp32 / fp64 (audiocraft's ``assert dtype in
[torch.float64, torch.float32]``) builds its positions and angles in full precision: not
reported. Without the assertion the dtype may be the activations': still reported."""
import json
import textwrap

ROPE = """
import torch
import torch.nn as nn

class RotaryEmbedding(nn.Module):
    def __init__(self, dim, max_period=10000.0, device=None, dtype=torch.float32):
        super().__init__()
        CHECK
        self.dtype = dtype
        adim = torch.arange(0, dim, 2, device=device, dtype=dtype)[: (dim // 2)]
        frequencies = 1.0 / (max_period ** (adim / dim))
        self.register_buffer("frequencies", frequencies)

    def get_rotation(self, start, end):
        idx = torch.arange(end, device=self.frequencies.device, dtype=self.dtype)
        angles = torch.outer(idx, self.frequencies)
        return torch.polar(torch.ones_like(angles), angles)

    def forward(self, x, start=0):
        rotation = self.get_rotation(start, start + x.shape[1])
        return x * rotation
"""


def _lines(amplint, tmp_path, check):
    path = tmp_path / "rope.py"
    path.write_text(textwrap.dedent(ROPE).replace("CHECK", check))
    proc = amplint("check", "--select", "AMP601,AMP602", "--output-format", "json", "--no-cache", str(path), cwd=tmp_path)
    assert proc.returncode in (0, 1), proc.stderr
    return sorted((f["line"], f["code"]) for f in json.loads(proc.stdout))


def test_asserted_full_precision_dtype_is_not_half(amplint, tmp_path):
    assert _lines(amplint, tmp_path, "assert dtype in [torch.float64, torch.float32]") == []


def test_unchecked_dtype_parameter_is_still_reported(amplint, tmp_path):
    assert _lines(amplint, tmp_path, "pass") == [(15, "AMP601"), (16, "AMP602")]


# a sinusoid's frequency index along the feature width reaches only an exponent: not a
# position; the positions cast beside it still are
SINUSOID = """
import torch
import torch.nn as nn

def create_sin_embedding(positions, dim, max_period=10000, dtype=torch.float32):
    half_dim = dim // 2
    positions = positions.to(dtype)
    adim = torch.arange(half_dim, device=positions.device, dtype=dtype).view(1, 1, -1)
    phase = positions / (max_period ** (adim / (half_dim - 1)))
    inv = torch.exp(torch.arange(dim / 2, device=positions.device).type(dtype) * -0.1)
    return torch.cat([torch.cos(phase), torch.sin(phase)], dim=-1), inv

class Encoder(nn.Module):
    def forward(self, x):
        positions = torch.arange(x.shape[1], device=x.device).view(1, -1, 1)
        return x + create_sin_embedding(positions, 512, dtype=x.dtype)[0]
"""


def test_frequency_indices_are_not_positions(amplint, tmp_path):
    path = tmp_path / "sin.py"
    path.write_text(textwrap.dedent(SINUSOID))
    proc = amplint("check", "--select", "AMP601", "--output-format", "json", "--no-cache", str(path), cwd=tmp_path)
    assert sorted(f["line"] for f in json.loads(proc.stdout)) == [7], proc.stdout


# rotary applied in `reduce(torch.promote_types, (t.dtype, freqs.dtype, torch.float32))`:
# at least fp32, so neither the angles nor the cast back are half
PROMOTED = """
from functools import reduce
import torch
import torch.nn as nn

def apply_rotary_pos_emb(t, freqs):
    out_dtype = t.dtype
    dtype = reduce(torch.promote_types, (t.dtype, freqs.dtype, torch.float32))
    freqs, t = freqs.to(dtype), t.to(dtype)
    t = (t * freqs.cos()) + (t.flip(-1) * freqs.sin())
    return t.to(out_dtype)

class Attention(nn.Module):
    def forward(self, x, freqs):
        return apply_rotary_pos_emb(self.q(x), freqs)
"""


def test_dtype_promoted_with_float32_is_full_precision(amplint, tmp_path):
    path = tmp_path / "rope.py"
    path.write_text(textwrap.dedent(PROMOTED))
    proc = amplint("check", "--select", "AMP601,AMP602", "--output-format", "json", "--no-cache", str(path), cwd=tmp_path)
    assert json.loads(proc.stdout) == [], proc.stdout


# a table helper given the activation dtype: reported inside the helper and where the
# call passes it (keyword or positional); a call passing torch.float32 is not
CALL_SITE = """
import torch
import torch.nn as nn

def create_sin_embedding(positions, dim, max_period=10000, dtype=torch.float32):
    half_dim = dim // 2
    positions = positions.to(dtype)
    adim = torch.arange(half_dim, device=positions.device, dtype=dtype).view(1, 1, -1)
    phase = positions / (max_period ** (adim / (half_dim - 1)))
    return torch.cat([torch.cos(phase), torch.sin(phase)], dim=-1)

class Encoder(nn.Module):
    def encode(self, positions, depth, dtype=torch.float32):
        return create_sin_embedding(positions, depth, dtype=torch.float32)

    def forward(self, x):
        positions = torch.arange(x.shape[1], device=x.device).view(1, -1, 1)
        a = create_sin_embedding(positions, 512, dtype=x.dtype)
        b = create_sin_embedding(positions, 512, 10000, x.dtype)
        c = self.encode(positions, 512, x.dtype)
        return x + a + b + c
"""


def test_the_call_passing_the_activation_dtype_is_reported(amplint, tmp_path):
    path = tmp_path / "sin.py"
    path.write_text(textwrap.dedent(CALL_SITE))
    proc = amplint("check", "--select", "AMP602", "--output-format", "json", "--no-cache", str(path), cwd=tmp_path)
    assert sorted(f["line"] for f in json.loads(proc.stdout)) == [9, 18, 19], proc.stdout
