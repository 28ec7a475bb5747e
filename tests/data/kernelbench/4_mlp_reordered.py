"""Adversarial by accident: the same network, layers created in the other order.

Under the shared seed fc2 is drawn first, so the weights differ from the
reference's and the oracle fails -- as it would in KernelBench."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features: int, hidden: int, out_features: int):
        super().__init__()
        self.fc2 = nn.Linear(hidden, out_features)
        self.fc1 = nn.Linear(in_features, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.addmm(self.fc1.bias, x, self.fc1.weight.t()).clamp_min_(0)
        return torch.addmm(self.fc2.bias, h, self.fc2.weight.t())
