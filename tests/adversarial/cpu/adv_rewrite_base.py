"""The baseline of ``baseline_rewrite.yaml``: a module of its own, which the test copies to a
temporary folder with the manifest, since the cheat beside it rewrites this file."""
from typing import Any, Dict, Tuple

import torch
from torch import Tensor


def mat_inputs(params: Dict[str, Any], gen: torch.Generator, device: str) -> Tuple[Tensor, Tensor]:
    m, k, n = int(params["m"]), int(params["k"]), int(params["n"])
    return (torch.randn(m, k, generator=gen, device=device), torch.randn(k, n, generator=gen, device=device))


def ref_matmul(a: Tensor, b: Tensor) -> Tensor:
    return a @ b
