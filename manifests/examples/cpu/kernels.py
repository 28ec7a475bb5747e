"""CPU stand-ins for the kernels in the seed stories, registered as torch custom ops.

Each "kernel" is a ``torch.library`` custom op, so the profiler names it
(``expkit_examples::gemv_blocked``) the way it names a CUDA kernel on a GPU, and the
manifests can say which ones must and must not run.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Tuple

import torch
import torch.nn.functional as F

Tensor = torch.Tensor


# --- GEMV: y = W @ x, the story of the weight repack ----------------------------------

@torch.library.custom_op("expkit_examples::gemv_rowwise", mutates_args=())
def gemv_rowwise(w: Tensor, x: Tensor) -> Tensor:
    """Reference GEMV: multiply each row by x, then sum (a scalar-style row-major loop)."""
    return (w * x).sum(dim=1)


@torch.library.custom_op("expkit_examples::gemv_blas", mutates_args=())
def gemv_blas(w: Tensor, x: Tensor) -> Tensor:
    """The same product through the BLAS matrix-vector routine."""
    return torch.mv(w, x)


@torch.library.custom_op("expkit_examples::gemv_blocked", mutates_args=())
def gemv_blocked(w: Tensor, x: Tensor) -> Tensor:
    """GEMV over W viewed in blocks of 4 along d_in (the "repacked" layout).

    Seeded bug, as in the story: the stride of the tail (d_in % 4 leftover columns)
    is computed one short, so for d_in not divisible by 4 the tail reads the wrong
    columns of W. Divisible sizes are exact.
    """
    d_out, d_in = w.shape
    nb, r = divmod(d_in, 4)
    wb = w[:, : nb * 4].reshape(d_out, nb, 4)
    xb = x[: nb * 4].reshape(nb, 4)
    y = torch.einsum("obk,bk->o", wb, xb)
    if r:
        tail = nb * 4 - 1  # BUG: off by one; should be nb * 4
        y = y + w[:, tail: tail + r] @ x[nb * 4:]
    return y


def gemv_inputs(params: Dict[str, Any], gen: torch.Generator, device: str) -> Tuple[Tensor, Tensor]:
    d_out, d_in = int(params["d_out"]), int(params["d_in"])
    w = torch.randn(d_out, d_in, generator=gen, device=device)
    x = torch.randn(d_in, generator=gen, device=device)
    return w, x


# --- A matrix chain: the honest win ------------------------------------------------

@torch.library.custom_op("expkit_examples::chain_left", mutates_args=())
def chain_left(a: Tensor, b: Tensor, x: Tensor) -> Tensor:
    """(A @ B) @ X: forms the m x n product first, m*k*n + m*n*p multiply-adds."""
    return (a @ b) @ x


@torch.library.custom_op("expkit_examples::chain_right", mutates_args=())
def chain_right(a: Tensor, b: Tensor, x: Tensor) -> Tensor:
    """A @ (B @ X): the same product reassociated, k*n*p + m*k*p multiply-adds."""
    return a @ (b @ x)


def chain_inputs(params: Dict[str, Any], gen: torch.Generator, device: str) -> Tuple[Tensor, Tensor, Tensor]:
    m, k, n, p = (int(params[d]) for d in ("m", "k", "n", "p"))
    return (torch.randn(m, k, generator=gen, device=device) / k ** 0.5,
            torch.randn(k, n, generator=gen, device=device) / n ** 0.5,
            torch.randn(n, p, generator=gen, device=device))


# --- Attention: the story of the "vectorized" kernel that never ran -------------------

@torch.library.custom_op("expkit_examples::attn_basic", mutates_args=())
def attn_basic(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """The old kernel: one (batch, head) slice at a time."""
    out = torch.empty_like(q)
    scale = 1.0 / math.sqrt(q.shape[-1])
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            s = (q[b, h] @ k[b, h].transpose(-1, -2)) * scale
            out[b, h] = torch.softmax(s, dim=-1) @ v[b, h]
    return out


@torch.library.custom_op("expkit_examples::attn_vectorized", mutates_args=())
def attn_vectorized(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """The new kernel: all slices in one batched product, scores materialised."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    return torch.matmul(torch.softmax(s, dim=-1), v)


def sdpa(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """The baseline: PyTorch's fused scaled-dot-product attention."""
    return F.scaled_dot_product_attention(q, k, v)


def forward(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """The extension's public entry point, as the benchmark calls it.

    Like the bindings in the story, it still routes to the old kernel: the new one
    exists, compiles and is correct, but this path never runs it.
    """
    return torch.ops.expkit_examples.attn_basic(q, k, v)


def attention_inputs(params: Dict[str, Any], gen: torch.Generator, device: str) -> Tuple[Tensor, Tensor, Tensor]:
    shape = (int(params.get("batch", 1)), int(params.get("heads", 1)), int(params["seq"]), int(params["head_dim"]))
    return tuple(torch.randn(shape, generator=gen, device=device) for _ in range(3))  # type: ignore[return-value]
