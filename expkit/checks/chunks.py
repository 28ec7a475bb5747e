"""Elementwise checks in chunks, so that their memory does not grow with the tensors checked.

An oracle compares outputs in float64; compared whole, an 8 GiB output takes several
float64 copies of 16 GiB each (KernelBench's level-1 ReLU at its original size ran an
80 GB GPU out of memory that way). Maxima and counts combine across chunks, so the
checks walk :data:`CHUNK` elements at a time.
"""

from __future__ import annotations

from typing import Iterator, List, Tuple

import torch

#: Elements handled at a time: float64 temporaries of about 128 MiB each.
CHUNK = 1 << 24


def flat_chunks(*tensors: torch.Tensor, chunk: int = CHUNK) -> Iterator[Tuple[int, List[torch.Tensor]]]:
    """``(offset, pieces)`` over the tensors' elements in order, ``chunk`` at a time; each
    piece a flat view (a copy only for a non-contiguous tensor)."""
    flats = [t.detach().reshape(-1) for t in tensors]
    n = flats[0].numel() if flats else 0
    for start in range(0, n, chunk):
        yield start, [f[start:start + chunk] for f in flats]
