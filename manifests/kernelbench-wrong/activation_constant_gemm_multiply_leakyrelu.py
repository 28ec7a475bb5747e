"""Wrong solution for KernelBench level2/12_Gemm_Multiply_LeakyReLU: the wrong activation constant.

The epilogue hard-codes LeakyReLU's negative slope as 0.01 (PyTorch's default) instead
of the ``negative_slope`` the problem passes in (0.1). The GEMM's outputs are negative
about half the time, so the slope matters. Parameters are made as the reference makes
them. Our own code.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, multiplier, negative_slope):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.multiplier = multiplier
        self.negative_slope = negative_slope

    def forward(self, x):
        y = F.linear(x, self.gemm.weight, self.gemm.bias) * self.multiplier
        return torch.where(y > 0, y, 0.01 * y)  # BUG: should be self.negative_slope
