"""The kernels of the examples: a matrix chain, evaluated in two orders.

``(A @ B) @ X`` forms an m x n product it then throws away; ``A @ (B @ X)`` computes the
same result with fewer multiply-adds (2.5x fewer at 256^3 x 64). Each side is a
``torch.library`` custom op so that the profiler names it, and the claim can say which
op must run (``expect.must_run``), as a GPU claim names its kernel.
"""

from __future__ import annotations

from typing import Any, Dict, Tuple

import torch

Tensor = torch.Tensor


@torch.library.custom_op("expkit_example::chain_left", mutates_args=())
def chain_left(a: Tensor, b: Tensor, x: Tensor) -> Tensor:
    """The baseline: (A @ B) @ X."""
    return (a @ b) @ x


@torch.library.custom_op("expkit_example::chain_right", mutates_args=())
def chain_right(a: Tensor, b: Tensor, x: Tensor) -> Tensor:
    """The candidate: A @ (B @ X)."""
    return a @ (b @ x)


def chain_inputs(params: Dict[str, Any], gen: torch.Generator, device: str) -> Tuple[Tensor, Tensor, Tensor]:
    """A, B and X for the sizes in ``params`` (m, k, n, p), from the run's seeded generator."""
    m, k, n, p = (int(params[d]) for d in ("m", "k", "n", "p"))
    return (torch.randn(m, k, generator=gen, device=device) / k ** 0.5,
            torch.randn(k, n, generator=gen, device=device) / n ** 0.5,
            torch.randn(n, p, generator=gen, device=device))
