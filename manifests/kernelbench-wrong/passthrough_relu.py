"""Wrong solution for KernelBench level1/19_ReLU: the input returned (copied) unchanged.

KernelBench's ReLU problem draws its input with ``torch.rand`` (uniform in [0, 1)),
where ReLU is the identity: this solution does no work and KernelBench's own check
passes it. expkit's oracle calibration should say so instead (a candidate passing the
input through passes the oracle, so the oracle cannot support a claim). Our own code.
"""

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x.clone()  # BUG: no ReLU at all; invisible on inputs that are never negative
