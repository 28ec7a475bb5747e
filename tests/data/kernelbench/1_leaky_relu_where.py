"""Leaky ReLU as one select instead of the fused activation."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, slope: float):
        super().__init__()
        self.slope = slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.where(x >= 0, x, x * self.slope)
