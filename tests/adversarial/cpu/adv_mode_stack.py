"""Pushes a torch function mode at import and never pops it: every torch call after that,
the harness's own in this process included, passes through code the candidate owns."""

import torch
from torch.overrides import TorchFunctionMode

import adv_kernels  # noqa: F401


class _Watcher(TorchFunctionMode):
    calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        _Watcher.calls += 1  # could as well skip the harness's salting or copying
        return func(*args, **(kwargs or {}))


_Watcher().__enter__()


def gemv(w, x):
    return torch.mv(w, x)
