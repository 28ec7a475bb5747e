"""Wrong solution for KernelBench level2/1_Conv2D_ReLU_BiasAdd: the bias add is missing.

The "fused conv + ReLU epilogue" creates the same parameters in the same order as the
reference (so its weights match under KernelBench's seed), but its forward stops after
the ReLU: the per-channel bias that the reference adds last never is. Our own code,
written for expkit's wrong-solution set.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, bias_shape):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        y = F.conv2d(x, self.conv.weight, self.conv.bias)
        return F.relu(y)  # BUG: `+ self.bias` dropped when the epilogue was fused
