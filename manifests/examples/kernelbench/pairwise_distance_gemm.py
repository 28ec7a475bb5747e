"""Solution (KernelBench format): the same distances through matrix products.

|x - y|^2 = |x|^2 + |y|^2 - 2 x.y, so the n x m x d intermediate becomes one
n x m GEMM (addmm, with the row norms as its addend); the row norms are products
with a vector of ones. Cancellation can make a tiny distance slightly negative;
clamping at zero restores the reference's sign.
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        ones = torch.ones(x.shape[1], 1, dtype=x.dtype, device=x.device)
        xx = (x * x) @ ones              # n x 1
        yy = ((y * y) @ ones).t()        # 1 x m
        return torch.addmm(xx + yy, x, y.t(), alpha=-2.0).clamp_min_(0)
