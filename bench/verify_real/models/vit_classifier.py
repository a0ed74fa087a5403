"""vit-pytorch 0.20.0: ViT (patch embedding, pre-norm attention, mean pooling), 16x16 images
in 4x4 patches, 2 layers, d=64.  ``vit.py`` is loaded without the package ``__init__``
(which imports the DINO trainer and torchvision)."""
import importlib.util
import os
import sys

import torch

from _pinned import use

_spec = importlib.util.spec_from_file_location(
    "vit_pytorch_vit", os.path.join(use("vit-pytorch==0.20.0"), "vit_pytorch", "vit.py"))
vit = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = vit
_spec.loader.exec_module(vit)


def build():
    torch.manual_seed(0)
    model = vit.ViT(image_size=16, patch_size=4, num_classes=10, dim=64, depth=2, heads=4, mlp_dim=128,
                    dim_head=16, pool="mean")
    return model, (torch.randn(4, 3, 16, 16),)
