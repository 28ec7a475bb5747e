"""Wrong solution for KernelBench level1/92_cumsum_exclusive: an off-by-one scan.

An exclusive scan must leave out the current element (out[i] = x[0] + ... + x[i-1]).
This one computes the inclusive scan, out[i] = x[0] + ... + x[i]: every element is off
by one position. Our own code.
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.cumsum(x, dim=self.dim)  # BUG: inclusive; the shift by one element is missing
