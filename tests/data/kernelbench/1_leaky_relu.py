"""Elementwise: leaky ReLU with a slope given to the constructor."""
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 16
dim = 512


class Model(nn.Module):
    def __init__(self, slope: float):
        super().__init__()
        self.slope = slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.leaky_relu(x, self.slope)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [0.05]
