"""perceiver-pytorch 0.1.0: Perceiver (ScaleNorm with eps=1e-5, fourier features, cross and
latent attention), images 8x8x3, 2 layers, d=64."""
import torch

from _pinned import use

use("perceiver-pytorch==0.1.0")
from perceiver_pytorch.perceiver_pytorch import Perceiver  # noqa: E402


def build():
    torch.manual_seed(0)
    model = Perceiver(num_freq_bands=4, depth=2, max_freq=10., input_channels=3, input_axis=2, num_latents=16,
                      cross_dim=64, latent_dim=64, cross_heads=1, latent_heads=2, cross_dim_head=32,
                      latent_dim_head=32, num_classes=10)
    return model, (torch.randn(4, 8, 8, 3),)
