"""Wrong solution for KernelBench level2/99_Matmul_GELU_Softmax: softmax over the wrong dimension.

The linear layer is the reference's (same parameters, same order); the epilogue
normalises over dim 0 (the batch) instead of dim 1 (the features): the output has the
right shape, so only its values can show the bug. Our own code.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        y = F.gelu(self.linear(x))
        y = y - y.amax(dim=0, keepdim=True)  # BUG: the reduction axis should be 1 (features)
        e = torch.exp(y)
        return e / e.sum(dim=0, keepdim=True)
