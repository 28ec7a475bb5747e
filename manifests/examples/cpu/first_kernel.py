"""Your first claim: ``torch.sum`` against the Python loop it replaces.

Copy this file and ``your-first-kernel.yaml`` beside your own code, then change the three
functions: the code you had (the baseline), the code you wrote (the candidate), and the
inputs both are called with. expkit calls each side as ``fn(*inputs(params, gen, device))``,
with ``params`` from the case, a seeded ``torch.Generator`` and the manifest's device.
"""

from __future__ import annotations

from typing import Any, Dict, Tuple

import torch


def loop_sum(x: torch.Tensor) -> torch.Tensor:
    """The code you had: a Python loop over the elements, adding them as Python floats
    (float64), returned in the input's dtype."""
    total = 0.0
    for v in x.tolist():
        total += v
    return torch.tensor(total, dtype=x.dtype, device=x.device)


def torch_sum(x: torch.Tensor) -> torch.Tensor:
    """The code you wrote: one call to ``torch.sum`` (in float32, in its own order)."""
    return torch.sum(x)


def inputs(params: Dict[str, Any], gen: torch.Generator, device: str) -> Tuple[torch.Tensor]:
    """One vector of ``n`` normal values, both signs: drawn from ``gen`` so that every run
    and every trial can make fresh ones."""
    return (torch.randn(int(params["n"]), generator=gen, device=device),)
