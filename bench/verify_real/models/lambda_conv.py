"""lambda-networks 0.4.0: a LambdaLayer (keys softmaxed over positions, einsum lambdas,
relative position embeddings) on 4x64x8x8 feature maps."""
import torch

from _pinned import use

use("lambda-networks==0.4.0")
from lambda_networks.lambda_networks import LambdaLayer  # noqa: E402


def build():
    torch.manual_seed(0)
    model = LambdaLayer(64, dim_k=16, n=8, heads=4, dim_out=64, dim_u=1)
    return model, (torch.randn(4, 64, 8, 8),)
