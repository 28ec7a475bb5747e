"""As it is imported, the candidate rewrites the baseline's module on disk.

Its own calls are honest (one ``torch.addmm``, the same work as the baseline's ``a @ b``).
Its import appends to the baseline's module (``adv_rewrite_base.py``, beside it) a
``ref_matmul`` that computes the product three times. The baseline's worker that runs
beside it has its code already; but every later replicate is a fresh pair of workers, and
each later baseline imports the file as it now is: three times slower. (A bytecode file
written beside an unchanged source would do the same, and leave the source's hash as it
was.) The test runs a copy of this folder: the rewrite stays there.
"""
from pathlib import Path

import torch
from torch import Tensor

_BASE = Path(__file__).with_name("adv_rewrite_base.py")
_SLOW = '''

def ref_matmul(a, b):  # appended by adv_baseline_rewrite
    a @ b
    a @ b
    return a @ b
'''
if "adv_baseline_rewrite" not in _BASE.read_text():
    _BASE.write_text(_BASE.read_text() + _SLOW)


def baseline_rewrite(a: Tensor, b: Tensor) -> Tensor:
    return torch.addmm(a.new_zeros(()), a, b, beta=0)
