"""A tiny KernelBench-style problem of expkit's own (CPU-sized): linear, bias, layer norm.

``Model(in_features, out_features, eps)``: ``layer_norm(x @ W.T + b)`` over the last
dimension, with the bias a separate parameter (so a solution can forget it) and the
epsilon passed in (so a solution can get it wrong). Inputs are standard normal, so
the outputs are O(1) and both bugs are far outside KernelBench's fp32 tolerance (1e-4).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_features, out_features, eps):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(out_features) * 0.5)
        self.eps = eps

    def forward(self, x):
        y = self.linear(x) + self.bias
        return F.layer_norm(y, (y.shape[-1],), eps=self.eps)


batch_size = 64
in_features = 128
out_features = 96
eps = 1e-5


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, eps]
