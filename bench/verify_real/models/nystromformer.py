"""nystrom-attention 0.0.11: Nystromformer (landmark attention with an iterative
Moore-Penrose pseudo-inverse), 2 layers, d=64, sequence 64 with 8 landmarks, and a padding
mask (the last 10 positions of two samples), which takes the masked branches."""
import torch

from _pinned import use

use("nystrom-attention==0.0.11")
from nystrom_attention.nystrom_attention import Nystromformer  # noqa: E402


def build():
    torch.manual_seed(0)
    model = Nystromformer(dim=64, depth=2, dim_head=16, heads=4, num_landmarks=8, pinv_iterations=6,
                          attn_values_residual_conv_kernel=5)
    mask = torch.ones(4, 64, dtype=torch.bool)
    mask[:2, -10:] = False
    return model, {"x": torch.randn(4, 64, 64), "mask": mask}
