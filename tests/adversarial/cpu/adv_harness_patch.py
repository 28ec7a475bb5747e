"""Replaces a torch method the harness's transport relies on, at import."""

import torch

import adv_kernels  # noqa: F401

_real = torch.Tensor.element_size


def _element_size(self):
    return _real(self)


torch.Tensor.element_size = _element_size


def gemv(w, x):
    return torch.mv(w, x)
