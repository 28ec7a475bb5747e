"""The pairs of ``benchmarks/rerun/``: eager ``relu(x + y)`` (an add kernel, then a relu kernel)
and the same fused in one Triton kernel (3 passes over memory instead of 5)."""

from __future__ import annotations

from typing import Any, Dict, Tuple

import torch
import triton
import triton.language as tl


@triton.jit
def rerun_add_relu_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(x + y, 0.0), mask=mask)


def fused_add_relu(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    n = x.numel()
    rerun_add_relu_kernel[(triton.cdiv(n, 4096),)](x, y, out, n, BLOCK=4096, num_warps=4)
    return out


def eager_add_relu(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.relu(x + y)


def inputs(params: Dict[str, Any], gen: torch.Generator, device: str) -> Tuple[torch.Tensor, torch.Tensor]:
    n = int(params["n"])
    return (torch.randn(n, generator=gen, device=device), torch.randn(n, generator=gen, device=device))
