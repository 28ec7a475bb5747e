"""Every row of a against every row of b: a broadcast product, summed."""
import torch
import torch.nn as nn

m = 32
n = 48
k = 64


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return (a.unsqueeze(1) * b.unsqueeze(0)).sum(-1)


def get_inputs():
    return [torch.randn(m, k), torch.randn(n, k)]


def get_init_inputs():
    return []
