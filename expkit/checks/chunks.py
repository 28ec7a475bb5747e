"""Elementwise checks in chunks, so that their memory does not grow with the tensors checked.

An oracle compares outputs in float64; compared whole, an 8 GiB output takes several
float64 copies of 16 GiB each (KernelBench's level-1 ReLU at its original size ran an
80 GB GPU out of memory that way). Maxima and counts combine across chunks, so the
checks walk a chunk of elements at a time (:func:`chunk_for`): :data:`CHUNK` on a GPU,
:data:`HOST_CHUNK` on the host.
"""

from __future__ import annotations

from typing import Iterator, List, Optional, Tuple

import torch

#: Elements handled at a time on a GPU: float64 temporaries of about 128 MiB each, few
#: enough kernel launches that the check runs at memory bandwidth.
CHUNK = 1 << 24
#: On the host: float64 temporaries of 8 MiB, under the workers' mmap threshold
#: (``bench/processes/allocator.py``), so the scratch a check adds stays small and comes from heap
#: pages already mapped. Time does not decide it: a benchmark of the chunk size found no
#: consistent difference between 64 Ki and 16 Mi elements on the 2-core CPU
#: (evidence/README.md).
HOST_CHUNK = 1 << 20


def chunk_for(device: torch.device) -> int:
    """Elements a chunk holds for tensors on ``device``."""
    return HOST_CHUNK if device.type == "cpu" else CHUNK


def flat_chunks(*tensors: torch.Tensor, chunk: Optional[int] = None) -> Iterator[Tuple[int, List[torch.Tensor]]]:
    """``(offset, pieces)`` over the tensors' elements in order, ``chunk`` at a time (by
    default :func:`chunk_for` the first tensor's device); each piece a flat view (a copy
    only for a non-contiguous tensor)."""
    flats = [_flat(t.detach()) for t in tensors]
    n = flats[0].numel() if flats else 0
    chunk = chunk or (chunk_for(flats[0].device) if flats else CHUNK)
    for start in range(0, n, chunk):
        yield start, [f[start:start + chunk] for f in flats]


def _flat(t: torch.Tensor) -> torch.Tensor:
    """A flat view; a broadcast constant (every stride 0) stays one element, not a copy."""
    if t.dim() and t.numel() > 1 and all(st == 0 for st in t.stride()):
        return t.as_strided((t.numel(),), (0,))
    return t.reshape(-1)


def max_abs(t: torch.Tensor) -> float:
    """``max |t|`` as a float (NaN if any element is NaN), without a tensor of ``|t|``:
    one pass of ``aminmax`` for a real tensor."""
    if t.numel() == 0:
        return 0.0
    if t.is_complex():
        return float(t.abs().max())
    lo, hi = torch.aminmax(t)
    lo_f, hi_f = float(lo), float(hi)
    if lo_f != lo_f or hi_f != hi_f:
        return float("nan")
    return max(-lo_f, hi_f) + 0.0  # + 0.0: a maximum of zeros is 0.0, never -0.0


def max_abs_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """``max |a - b|`` in the wider of the two dtypes (float64 when either is), one
    subtraction and one pass; NaN if any difference is NaN."""
    return max_abs(torch.sub(a, b))
