"""Wrong solution for tiny_bias_norm.py: the fused solution with the bias left out of the GEMM.

The same code as tiny_bias_norm_fused.py but for one line: ``x @ W.T`` without ``+ b``.
A per-feature bias is not removed by the norm, so the outputs are wrong by O(0.5)."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, eps):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(out_features) * 0.5)
        self.eps = eps

    def forward(self, x):
        y = torch.mm(x, self.linear.weight.t())  # BUG: the bias is never added
        var, mean = torch.var_mean(y, dim=-1, keepdim=True, unbiased=False)
        return (y - mean) * var.add_(self.eps).rsqrt_()
