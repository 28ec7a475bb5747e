"""Adversarial: a solution that does not compile."""
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        return a @ b +
