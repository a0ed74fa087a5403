"""x-transformers 0.3.0: a decoder-only TransformerWrapper with ScaleNorm (``use_scalenorm``:
``torch.norm(...).clamp(min=1e-5)``), 2 layers, d=64, sequence 32."""
import torch

from _pinned import use

use("x-transformers==0.3.0")
from x_transformers.x_transformers import Decoder, TransformerWrapper  # noqa: E402


def build():
    torch.manual_seed(0)
    model = TransformerWrapper(num_tokens=256, max_seq_len=32,
                               attn_layers=Decoder(dim=64, depth=2, heads=4, use_scalenorm=True))
    return model, (torch.randint(0, 256, (4, 32)),)
