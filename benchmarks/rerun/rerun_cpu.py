"""The CPU A/A pair of ``benchmarks/rerun/``: eager ``relu(x + y)`` against itself (the GPU
pairs in ``rerun_kernels.py`` need Triton)."""

from __future__ import annotations

from typing import Any, Dict, Tuple

import torch


def eager_add_relu(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.relu(x + y)


def inputs(params: Dict[str, Any], gen: torch.Generator, device: str) -> Tuple[torch.Tensor, torch.Tensor]:
    n = int(params["n"])
    return (torch.randn(n, generator=gen, device=device), torch.randn(n, generator=gen, device=device))
