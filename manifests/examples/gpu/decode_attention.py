"""Decode attention for the GPU micro-win-macro-loss story: SDPA against a Triton kernel.

One query token per sequence attends to a static KV cache of ``max_len`` slots, of
which the first ``cache_len`` are filled (``cache_len`` is a one-element int64 tensor
on the device, as a compiled decoder keeps it, so that no step has to read it back).

* ``sdpa_static`` -- the baseline: ``F.scaled_dot_product_attention`` over every slot,
  the unfilled ones masked: what a static-cache decoder does so that every step has
  the same shapes and can be compiled and captured in a CUDA graph.
* ``decode_attention`` -- the candidate: a split-K ("flash-decoding") Triton kernel.
  ``decode_attn_partial_kernel`` gives each (sequence, head, chunk of ``CHUNK`` slots)
  its own program, reads only filled slots (the length is loaded on the device) and
  writes a partial maximum, sum and weighted value; ``decode_attn_reduce_kernel``
  combines the chunks. Alone it reads a fraction of the cache and spreads over the
  whole GPU, so it beats the baseline.

As integrated, the candidate is an opaque Python function to ``torch.compile``
(``torch.compiler.disable``): every call is a graph break. That is the story's
mistake. The fix is to register it as a ``torch.library.custom_op`` with a fake
(meta) implementation, or to call the Triton kernel where Dynamo can trace it, so
that the decoder stays one graph.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Tuple

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

Tensor = torch.Tensor

#: Cache slots per program of the partial kernel.
CHUNK = 128


@triton.jit
def decode_attn_partial_kernel(q_ptr, k_ptr, v_ptr, len_ptr, m_ptr, l_ptr, acc_ptr,
                               sq_b, sq_h, sk_b, sk_h, sk_t, sv_b, sv_h, sv_t, H, n_splits, scale,
                               D: tl.constexpr, CHUNK: tl.constexpr):
    bh = tl.program_id(0)
    split = tl.program_id(1)
    b = bh // H
    h = bh % H
    n = tl.load(len_ptr)
    offs_t = split * CHUNK + tl.arange(0, CHUNK)
    offs_d = tl.arange(0, D)
    valid = offs_t < n
    q = tl.load(q_ptr + b * sq_b + h * sq_h + offs_d).to(tl.float32)
    k = tl.load(k_ptr + b * sk_b + h * sk_h + offs_t[:, None] * sk_t + offs_d[None, :],
                mask=valid[:, None], other=0.0).to(tl.float32)
    s = tl.sum(k * q[None, :], axis=1) * scale
    s = tl.where(valid, s, -1.0e30)
    m = tl.max(s, axis=0)
    # A chunk with no filled slot keeps m = -1e30 and l = 0: the reduction gives it no weight.
    p = tl.where(valid, tl.exp(s - m), 0.0)
    v = tl.load(v_ptr + b * sv_b + h * sv_h + offs_t[:, None] * sv_t + offs_d[None, :],
                mask=valid[:, None], other=0.0).to(tl.float32)
    acc = tl.sum(p[:, None] * v, axis=0)
    idx = bh * n_splits + split
    tl.store(m_ptr + idx, m)
    tl.store(l_ptr + idx, tl.sum(p, axis=0))
    tl.store(acc_ptr + idx * D + offs_d, acc)


@triton.jit
def decode_attn_reduce_kernel(m_ptr, l_ptr, acc_ptr, out_ptr, so_b, so_h, H, n_splits,
                              D: tl.constexpr, SPLITS: tl.constexpr):
    bh = tl.program_id(0)
    b = bh // H
    h = bh % H
    offs_s = tl.arange(0, SPLITS)
    offs_d = tl.arange(0, D)
    live = offs_s < n_splits
    m = tl.load(m_ptr + bh * n_splits + offs_s, mask=live, other=-1.0e30)
    l = tl.load(l_ptr + bh * n_splits + offs_s, mask=live, other=0.0)
    acc = tl.load(acc_ptr + (bh * n_splits + offs_s)[:, None] * D + offs_d[None, :], mask=live[:, None], other=0.0)
    w = tl.where(l > 0, tl.exp(m - tl.max(m, axis=0)), 0.0)
    out = tl.sum(acc * w[:, None], axis=0) / tl.sum(l * w, axis=0)
    tl.store(out_ptr + b * so_b + h * so_h + offs_d, out.to(out_ptr.dtype.element_ty))


def decode_attention_impl(q: Tensor, k_cache: Tensor, v_cache: Tensor, cache_len: Tensor) -> Tensor:
    """Attention of ``q`` ``[B, H, 1, D]`` over the first ``cache_len`` slots of ``[B, H, T, D]`` caches."""
    b, h, one, d = q.shape
    t = k_cache.shape[2]
    if one != 1 or q.stride(-1) != 1 or k_cache.stride(-1) != 1 or v_cache.stride(-1) != 1:
        raise ValueError("decode_attention needs one query token and unit stride along head_dim")
    n_splits = triton.cdiv(t, CHUNK)
    m = torch.empty(b * h * n_splits, device=q.device, dtype=torch.float32)
    l = torch.empty_like(m)
    acc = torch.empty(b * h * n_splits, d, device=q.device, dtype=torch.float32)
    out = torch.empty_like(q)
    decode_attn_partial_kernel[(b * h, n_splits)](
        q, k_cache, v_cache, cache_len, m, l, acc,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), h, n_splits, 1.0 / math.sqrt(d),
        D=d, CHUNK=CHUNK, num_warps=4)
    decode_attn_reduce_kernel[(b * h,)](m, l, acc, out, out.stride(0), out.stride(1), h, n_splits,
                                        D=d, SPLITS=triton.next_power_of_2(n_splits), num_warps=4)
    return out


#: The candidate as integrated: opaque to torch.compile, so each call breaks the graph.
decode_attention = torch.compiler.disable(decode_attention_impl)


def sdpa_static(q: Tensor, k_cache: Tensor, v_cache: Tensor, cache_len: Tensor) -> Tensor:
    """Baseline: SDPA over every slot of the static cache, the unfilled ones masked."""
    mask = torch.arange(k_cache.shape[2], device=k_cache.device) < cache_len
    return F.scaled_dot_product_attention(q, k_cache, v_cache, attn_mask=mask.view(1, 1, 1, -1))


def attention_inputs(params: Dict[str, Any], gen: torch.Generator, device: str) -> Tuple[Tensor, ...]:
    """``(q, k_cache, v_cache, cache_len)`` in bf16, ``filled`` of ``max_len`` slots filled."""
    b, h, d = int(params.get("batch", 1)), int(params["heads"]), int(params["head_dim"])
    t, n = int(params["max_len"]), int(params["filled"])
    dtype = getattr(torch, str(params.get("dtype", "bfloat16")))
    q = torch.randn(b, h, 1, d, generator=gen, device=device).to(dtype)
    k = torch.randn(b, h, t, d, generator=gen, device=device).to(dtype)
    v = torch.randn(b, h, t, d, generator=gen, device=device).to(dtype)
    return q, k, v, torch.full((1,), n, dtype=torch.int64, device=device)
