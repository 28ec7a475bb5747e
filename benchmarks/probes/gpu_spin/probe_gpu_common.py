"""A probe of a limit, not a test (see ``probe_spin.py``): the factory, the baseline and the
candidate's honest product, shared by the two candidates."""
from typing import Any, Dict, Tuple

import torch
from torch import Tensor


def mat_inputs(params: Dict[str, Any], gen: torch.Generator, device: str) -> Tuple[Tensor, Tensor]:
    n = int(params["n"])
    return (torch.randn(n, n, generator=gen, device=device), torch.randn(n, n, generator=gen, device=device))


def mm_fp32(a: Tensor, b: Tensor) -> Tensor:
    return torch.mm(a, b)


def product(a: Tensor, b: Tensor) -> Tensor:
    """An honest fp32 product computed in fp64 as a batch of one: neither the baseline's op
    (``aten::mm``) nor its kernel, both of which the candidate may not run."""
    return torch.bmm(a.double()[None], b.double()[None])[0].float()
