"""AMP601-AMP604 (positions, rotary / sinusoidal tables, half weights, attention logits):
the command line on the fixtures, regression cases, and the AMP602 fix at run time."""
from __future__ import annotations

import importlib.util
import json
import os
import re
import textwrap


from amplint.registry import all_rules
from amplint.rules.amp601_position_in_half import PositionInHalf
from amplint.rules.amp602_position_table_in_half import PositionTableInHalf
from amplint.rules.amp603_half_weights_without_master import HalfWeightsWithoutMaster
from amplint.testing import check_examples

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "fixtures", "precision")



def codes(proc) -> list[tuple[str, int, str, str]]:
    return [(os.path.basename(f["path"]), f["line"], f["code"], f["severity"]) for f in json.loads(proc.stdout)]


# --- command line ---------------------------------------------------------------------

def test_cli_reports_position_and_table_in_bf16_under_o2(amplint):
    proc = amplint("check", os.path.join(FIXTURES, "bf16_o2", "llama_rotary.py"), "--format", "json", "--no-cache")
    assert proc.returncode == 1, proc.stderr
    assert codes(proc) == [("llama_rotary.py", 15, "AMP601", "warning"), ("llama_rotary.py", 16, "AMP602", "warning")]


def test_cli_same_file_under_defaults_is_info_only(tmp_path, amplint):
    """fp16 at O1 (no config): the buffer is fp32 until the model is cast; reported as info."""
    copy = tmp_path / "llama_rotary.py"
    copy.write_text(open(os.path.join(FIXTURES, "bf16_o2", "llama_rotary.py")).read())
    proc = amplint("check", str(copy), "--format", "json", "--no-cache", "--select", "AMP6")
    assert proc.returncode == 0, proc.stderr  # info findings do not fail the run (--fail-on info would)
    found = codes(proc)
    assert {c for _, _, c, _ in found} == {"AMP601", "AMP602"}
    assert {s for *_, s in found} == {"info"}


def test_cli_amp604_off_by_default_on_when_selected(tmp_path, amplint):
    src = tmp_path / "attn.py"
    src.write_text(textwrap.dedent("""
        import math
        from torch import nn
        class A(nn.Module):
            def forward(self, q, k):
                return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        """))
    quiet = amplint("check", str(src), "--format", "json", "--no-cache")
    assert "AMP604" not in quiet.stdout
    loud = amplint("check", str(src), "--format", "json", "--no-cache", "--extend-select", "AMP604")
    assert [c for _, _, c, _ in codes(loud)] == ["AMP604"]
    bf16 = amplint("check", str(src), "--format", "json", "--no-cache", "--extend-select", "AMP604", "--target", "bf16")
    assert "AMP604" not in bf16.stdout
    fixed = amplint("fix", str(src), "--no-cache", "--extend-select", "AMP604", "--unsafe-fixes")
    assert fixed.returncode in (0, 1), fixed.stderr
    assert "(q / math.sqrt(q.shape[-1])) @ k.transpose(-2, -1)" in src.read_text()


def test_cli_amp603_message_follows_engine(amplint):
    path = os.path.join(FIXTURES, "bf16_o2", "train_bf16.py")
    ours = amplint("check", path, "--format", "json", "--no-cache")
    torch_engine = amplint("check", path, "--format", "json", "--no-cache", "--engine", "torch")
    (mine,) = [f for f in json.loads(ours.stdout) if f["code"] == "AMP603"]
    (theirs,) = [f for f in json.loads(torch_engine.stdout) if f["code"] == "AMP603"]
    assert "amp.initialize" in mine["message"] and mine["fix"]["applicability"] == "display"
    assert "torch.autocast" in theirs["message"]


def test_cli_fix_leaves_display_and_clean_files_alone(tmp_path, amplint):
    for name in ("train_bf16.py",):
        (tmp_path / name).write_text(open(os.path.join(FIXTURES, "bf16_o2", name)).read())
    before = (tmp_path / "train_bf16.py").read_text()
    proc = amplint("fix", str(tmp_path), "--no-cache", "--target", "bf16")
    assert proc.returncode == 1, proc.stdout + proc.stderr  # AMP603 remains: a suggestion only
    assert (tmp_path / "train_bf16.py").read_text() == before
    clean = amplint("check", os.path.join(FIXTURES, "clean"), "--no-cache", "--target", "bf16", "--opt-level", "O2",
                    "--extend-select", "AMP604")
    assert clean.returncode == 0, clean.stdout


# --- regression cases kept outside the rules --------------------------------------------

def test_positions_regressions():
    failures = check_examples(
        PositionInHalf,
        valid=[
            # a float arange is not integer positions, and an fp32 cast is not half
            "import torch\nfrom torch import nn\nclass P(nn.Module):\n    def forward(self, x, n):\n"
            "        return torch.arange(n).float()\n",
            # int64 positions stay exact
            "import torch\nfrom torch import nn\nclass P(nn.Module):\n    def forward(self, x):\n"
            "        return torch.arange(8192, device=x.device, dtype=torch.long)\n",
        ],
        invalid=[],
    )
    assert not failures, failures


def test_table_regressions():
    failures = check_examples(
        PositionTableInHalf,
        valid=[
            # a buffer read in __init__ is fp32: the model is cast after construction
            "import torch\nfrom torch import nn\nclass RotaryEmbedding(nn.Module):\n    def __init__(self, dim):\n"
            "        super().__init__()\n        self.register_buffer('inv_freq', torch.ones(dim))\n"
            "        t = torch.arange(4096).type_as(self.inv_freq)\n        freqs = torch.outer(t, self.inv_freq)\n"
            "        self.register_buffer('cos', freqs.cos())\n",
            # autocast disabled around the product
            "import torch\nfrom torch import nn\nclass Rotary(nn.Module):\n    def forward(self, x, n):\n"
            "        t = torch.arange(n, device=x.device).float()\n"
            "        with torch.autocast(device_type='cuda', enabled=False):\n"
            "            freqs = torch.einsum('i,j->ij', t, self.inv_freq.float())\n        return freqs.cos()\n",
            # float arange (Transformer-XL's pos_seq) times an fp32 buffer
            "import torch\nfrom torch import nn\nclass RelPos(nn.Module):\n    def forward(self, klen):\n"
            "        pos_seq = torch.arange(klen - 1, -1, -1.0)\n"
            "        s = torch.einsum('i,d->id', pos_seq, self.inv_freq)\n        return s.sin(), s.cos()\n",
        ],
        invalid=[],
    )
    assert not failures, failures


def test_half_weights_regressions():
    failures = check_examples(
        HalfWeightsWithoutMaster,
        valid=[
            # half model code inside a module is not a training script
            "import torch\nfrom torch import nn\nclass M(nn.Module):\n    def forward(self, x):\n"
            "        return x.half()\n",
            # DeepSpeed owns precision (fp32 master weights in its optimizer wrapper)
            "import torch, deepspeed\nmodel = torch.nn.Linear(8, 8).half()\n"
            "opt = torch.optim.Adam(model.parameters())\nengine, *_ = deepspeed.initialize(model=model, optimizer=opt)\n"
            "opt.step()\n",
        ],
        invalid=[],
    )
    assert not failures, failures


def test_readme_rules_table_lists_every_rule(amplint):
    """The README's rules table and `amplint rules` name the same codes."""
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    table = text.split("<!-- rules-table")[1].split("<!-- /rules-table -->")[0]
    in_readme = re.findall(r"^\| (AMP\d+) \|", table, re.M)
    listed = re.findall(r"^(AMP\d+)\s", amplint("rules").stdout, re.M)
    assert in_readme == listed == [r.code for r in all_rules()]


# --- the AMP602 fix at run time ------------------------------------------------------------

ROTARY = '''
import torch
from torch import nn


class RotaryEmbedding(nn.Module):
    def __init__(self, dim, base=10000):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
        self.register_buffer("inv_freq", inv_freq)

    def forward(self, x, seq_len):
        t = torch.arange(seq_len, device=x.device).type_as(x)
        freqs = torch.einsum("i,j->ij", t, self.inv_freq.type_as(x))
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()
'''


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_amp602_fix_is_bit_identical_in_fp32_and_fixes_bf16(tmp_path, amplint):
    import torch
    original = tmp_path / "rotary_original.py"
    fixed = tmp_path / "rotary_fixed.py"
    original.write_text(ROTARY)
    fixed.write_text(ROTARY)
    proc = amplint("fix", str(fixed), "--no-cache", "--select", "AMP602", "--target", "bf16")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert fixed.read_text() != ROTARY and "AMP602" not in amplint("check", str(fixed), "--no-cache", "--target", "bf16").stdout

    seq_len, dim = 4096, 128
    before = _load(original, "rotary_original").RotaryEmbedding(dim)
    after = _load(fixed, "rotary_fixed").RotaryEmbedding(dim)

    # fp32: the fix changes nothing, bit for bit
    x32 = torch.zeros(1, dtype=torch.float32)
    for a, b in zip(before(x32, seq_len), after(x32, seq_len)):
        assert a.dtype == b.dtype == torch.float32
        assert torch.equal(a, b)

    # bf16 activations: the reference tables in fp64
    t = torch.arange(seq_len, dtype=torch.float64)
    inv = 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    emb = torch.cat([torch.outer(t, inv)] * 2, dim=-1)
    reference = (emb.cos(), emb.sin())
    x16 = torch.zeros(1, dtype=torch.bfloat16)
    error_before = max((a.double() - r).abs().max().item() for a, r in zip(before(x16, seq_len), reference))
    out_after = after(x16, seq_len)
    error_after = max((a.double() - r).abs().max().item() for a, r in zip(out_after, reference))
    assert all(a.dtype == torch.bfloat16 for a in out_after)  # the tables still meet bf16 activations
    print(f"bf16 cos/sin table max error at T={seq_len}: {error_before:.3g} before the fix, {error_after:.3g} after")
    assert error_before > 1.5, error_before  # ~2: meaningless tables
    assert error_after <= 0.01, error_after  # ~0.002: one final rounding
