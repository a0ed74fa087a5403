"""linformer 0.2.0: LinformerLM (token embedding, low-rank projected self-attention, GELU
feed-forward), 2 layers, d=64, sequence 32 projected to k=16."""
import torch

from _pinned import use

use("linformer==0.2.0")
from linformer.linformer import LinformerLM  # noqa: E402


def build():
    torch.manual_seed(0)
    model = LinformerLM(num_tokens=256, dim=64, seq_len=32, depth=2, k=16, heads=4)
    return model, (torch.randint(0, 256, (4, 32)),)
