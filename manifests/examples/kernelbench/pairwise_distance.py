"""Problem (KernelBench format): squared Euclidean distances between two point sets.

The reference broadcasts x[:, None, :] - y[None, :, :], materialising an
n x m x d tensor of differences before it sums over d.
"""
import torch
import torch.nn as nn

n = 512
m = 512
d = 32


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return ((x[:, None, :] - y[None, :, :]) ** 2).sum(-1)


def get_inputs():
    return [torch.randn(n, d), torch.randn(m, d)]


def get_init_inputs():
    return []
