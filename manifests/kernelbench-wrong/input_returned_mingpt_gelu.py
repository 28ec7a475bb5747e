"""Wrong solution for KernelBench level1/88_MinGPTNewGelu: the input is returned unchanged.

A "fast path" for contiguous fp16 CUDA tensors computes the tanh-approximated GELU;
every other input falls through to a fallback that was meant to compute it in fp32 and
instead returns a copy of the input. KernelBench's problem is fp32, so every call takes
the fallback. (A copy, not ``x`` itself: expkit would also reject an output sharing the
input's storage; this one is wrong in its values alone.) Our own code.
"""

import math

import torch
import torch.nn as nn

_C = math.sqrt(2.0 / math.pi)


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(_C * (x + 0.044715 * x * x * x)))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        if x.is_cuda and x.dtype == torch.float16 and x.is_contiguous():
            return _gelu_tanh(x)
        return x.clone()  # BUG: the fallback should compute the GELU in fp32, not copy the input
