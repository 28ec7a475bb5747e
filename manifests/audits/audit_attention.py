"""Thin adapters for auditing PyTorch's published attention claims.

All three sides are PyTorch's own code (the installed ``torch``):

* ``sdpa_flash``: ``F.scaled_dot_product_attention`` restricted to the FlashAttention-2
  backend (``SDPBackend.FLASH_ATTENTION``), the "FlashAttention2" of both claims;
* ``sdpa_cudnn``: the same call restricted to the cuDNN backend (``CUDNN_ATTENTION``);
* ``flex_causal``: ``torch.nn.attention.flex_attention.flex_attention`` compiled with
  ``torch.compile`` and a causal ``BlockMask`` built once per shape and reused, as the
  FlexAttention blog recommends (``create_block_mask`` is not part of the timed call).

The float64 reference that expkit's ``relative_error`` oracle asks the baseline for
cannot run on the flash or cuDNN kernels (they take fp16/bf16 only), so for float64
inputs ``sdpa_flash`` uses SDPA's math backend: the reference is exact attention in
float64, not another fused kernel.
"""

from __future__ import annotations

from typing import Any, Dict, Tuple

import torch
import torch._dynamo.config
import torch._inductor.config
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

# One compilation per shape: no dynamic shapes, and room for the recompiles the
# harness causes by toggling deterministic mode during its correctness trials.
torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
# Compile in this process: a pool of compile workers would outlive the first call.
torch._inductor.config.compile_threads = 1

_HALF = (torch.float16, torch.bfloat16)


def attention_inputs(params: Dict[str, Any], gen: torch.Generator, device: str) -> tuple:
    """q, k, v of shape (B, H, S, D) in ``dtype``, and whether the mask is causal."""
    dtype = getattr(torch, params.get("dtype", "bfloat16"))
    B, H, S, D = (int(params[k]) for k in ("B", "H", "S", "D"))
    q, k, v = (torch.randn(B, H, S, D, generator=gen, device=device, dtype=torch.float32).to(dtype) for _ in range(3))
    return q, k, v, bool(params.get("causal", True))


def _sdpa(backend: SDPBackend, q, k, v, causal: bool) -> torch.Tensor:
    with sdpa_kernel([backend]):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def sdpa_flash(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    backend = SDPBackend.FLASH_ATTENTION if q.dtype in _HALF else SDPBackend.MATH
    return _sdpa(backend, q, k, v, causal)


def sdpa_cudnn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    return _sdpa(SDPBackend.CUDNN_ATTENTION, q, k, v, causal)


_COMPILED = None
_BLOCK_MASKS: Dict[Tuple[Any, ...], Any] = {}


def _causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def flex_causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    global _COMPILED
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    if _COMPILED is None:
        _COMPILED = torch.compile(flex_attention, dynamic=False)
    mask = None
    if causal:
        key = (q.shape[-2], k.shape[-2], q.device)
        mask = _BLOCK_MASKS.get(key)
        if mask is None:
            mask = _BLOCK_MASKS[key] = create_block_mask(_causal, B=None, H=None, Q_LEN=q.shape[-2],
                                                         KV_LEN=k.shape[-2], device=q.device)
    return _COMPILED(q, k, v, block_mask=mask)
