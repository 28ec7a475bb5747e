"""Honest solution for tiny_bias_norm.py: the bias folded into the GEMM (addmm) and the
norm written out, with none of the reference's top-level ops (linear, add, layer_norm).
Parameters are made in the reference's order, so they match under the same seed."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, eps):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(out_features) * 0.5)
        self.eps = eps

    def forward(self, x):
        y = torch.addmm(self.bias, x, self.linear.weight.t())
        var, mean = torch.var_mean(y, dim=-1, keepdim=True, unbiased=False)
        return (y - mean) * var.add_(self.eps).rsqrt_()
