"""Wrong solution for tiny_bias_norm.py: the fused solution with a hard-coded epsilon of 1e-3.

The same code as tiny_bias_norm_fused.py but the norm's epsilon is Keras's default
(1e-3) instead of the problem's (1e-5): with a variance near 0.6 the outputs shrink by
about 0.1%, a few times KernelBench's 1e-4 tolerance at these magnitudes."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, eps):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(out_features) * 0.5)
        self.eps = 1e-3  # BUG: ignores the eps passed in (1e-5)

    def forward(self, x):
        y = torch.addmm(self.bias, x, self.linear.weight.t())
        var, mean = torch.var_mean(y, dim=-1, keepdim=True, unbiased=False)
        return (y - mean) * var.add_(self.eps).rsqrt_()
