"""axial-attention 0.6.1, as ``axial_image.py`` but on un-normalised feature maps (std 300,
e.g. raw spectrogram energies or pixel values times a gain): the per-pixel channel variance of
ChanLayerNorm (``torch.var`` in the input dtype) is ~9e4, above fp16's 65504."""
import torch

from _pinned import use

use("axial-attention==0.6.1")
from axial_attention.axial_attention import AxialImageTransformer  # noqa: E402


def build():
    torch.manual_seed(0)
    model = AxialImageTransformer(dim=64, depth=2, heads=4, reversible=False)
    return model, (300 * torch.randn(4, 64, 8, 8),)
