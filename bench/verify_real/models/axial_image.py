"""axial-attention 0.6.1: AxialImageTransformer (ChanLayerNorm with a variance in the input
dtype and eps=1e-5, attention along each axis), 4x64x8x8 feature maps, depth 2."""
import torch

from _pinned import use

use("axial-attention==0.6.1")
from axial_attention.axial_attention import AxialImageTransformer  # noqa: E402


def build():
    torch.manual_seed(0)
    model = AxialImageTransformer(dim=64, depth=2, heads=4, reversible=False)
    return model, (torch.randn(4, 64, 8, 8),)
