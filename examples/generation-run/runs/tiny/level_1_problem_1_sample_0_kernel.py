"""Honest: the norm in one library call, in single precision."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.linalg.vector_norm(x, dim=-1, keepdim=True)
