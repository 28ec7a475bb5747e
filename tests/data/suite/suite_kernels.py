"""Kernels for the fault-isolation suite: one healthy pair and candidates that die.

A suite runs each manifest in its own worker process; these candidates kill,
hang or abort theirs, and the suite must record each cause and go on.
"""
import ctypes
import os
import sys
import time

import torch


def inputs(params, gen, device):
    return (torch.randn(int(params["n"]), generator=gen, device=device),)


def double_chunked(x):
    """The slow side: doubles the input in 16 chunks, one op each, then joins them."""
    return torch.cat([c * 2 for c in x.chunk(16)])


def double_add(x):
    return x + x


def segfault(x):
    """Dereference address 0: the worker dies with SIGSEGV."""
    ctypes.string_at(0)
    return x + x


def hang(x):
    """Never return: the worker runs into the suite's time limit."""
    while True:
        time.sleep(0.1)


def cuda_abort(x):
    """Print what a CUDA fault prints, then exit the process without a result."""
    print("RuntimeError: CUDA error: an illegal memory access was encountered", file=sys.stderr, flush=True)
    os._exit(1)
