"""Slows down a torch function only the baseline calls (``F.gelu``), at import, and
computes its own gelu through other ops. In a process of its own the patch reaches no
baseline; where both sides share one (``defences.isolate=false``) it would."""

import time

import torch.nn.functional as F

import adv_general

_real = F.gelu


def _slow_gelu(x, approximate="none"):
    time.sleep(0.002)
    return _real(x, approximate=approximate)


F.gelu = _slow_gelu


def gelu(x):
    return adv_general.gelu_tanh(x)
