"""Wrong solution for KernelBench level1/40_LayerNorm: the wrong epsilon.

A hand-written layer norm over the trailing ``normalized_shape`` dimensions whose
epsilon is 1e-3 (the default of Keras's normalisation layers) instead of PyTorch's
1e-5. Its affine parameters are made as nn.LayerNorm makes them (ones and zeros), so
they match the reference's. On inputs uniform in [0, 1) (variance 1/12) the larger
epsilon shrinks every output by about 0.6%. Our own code.
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.normalized_shape = tuple(normalized_shape)
        self.eps = 1e-3  # BUG: nn.LayerNorm's default, which the reference uses, is 1e-5
        self.weight = nn.Parameter(torch.ones(self.normalized_shape))
        self.bias = nn.Parameter(torch.zeros(self.normalized_shape))

    def forward(self, x):
        dims = tuple(range(x.dim() - len(self.normalized_shape), x.dim()))
        var, mean = torch.var_mean(x, dim=dims, keepdim=True, unbiased=False)
        return (x - mean) * torch.rsqrt(var + self.eps) * self.weight + self.bias
