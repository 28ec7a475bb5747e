"""Does not compile: a syntax error, as a generated file often has."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor
        return x * self.scale
