"""Module-level callables for tests/test_api.py: what a user's kernels module looks like."""

import torch


def inputs(params, gen, device):
    return (torch.randn(int(params.get("n", 8)), generator=gen, device=device),)


def double_mul(x):
    return x * 2


def double_add(x):
    return x + x


class _Op:
    """A callable object with no ``__qualname__`` of its own (as torch's custom ops are)."""

    def __call__(self, x):
        return x + x


op_object = _Op()


class Namespace:
    @staticmethod
    def nested(x):
        return x * 2
