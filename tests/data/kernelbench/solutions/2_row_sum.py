"""Row sums as a matrix-vector product with a column of ones."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ones = torch.ones(x.shape[-1], 1, device=x.device, dtype=x.dtype)
        return torch.matmul(x, ones)
