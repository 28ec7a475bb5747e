"""Thin adapters for auditing Liger-Kernel's published per-kernel benchmarks.

The code under test is the installed ``liger-kernel`` package (its Triton kernels,
through its public ``liger_kernel.transformers`` modules); the baselines are what
Liger's own benchmark scripts compared against: Hugging Face ``transformers``'
``LlamaRMSNorm`` (installed package), ``torch.nn.LayerNorm`` and plain torch ops.
Nothing here reimplements either side: each function builds the module once per
configuration and calls it with the weights the input factory drew, through
``torch.func.functional_call`` so that no module state is mutated per call.

Every side returns fresh tensors; none writes to its inputs (Liger's RMSNorm is
called forward-only here, where it does not work in place).
"""

from __future__ import annotations

from typing import Any, Dict, Tuple

import torch
import torch.nn.functional as F
from torch.func import functional_call

_MODULES: Dict[Tuple[Any, ...], torch.nn.Module] = {}


def _module(key: Tuple[Any, ...], build) -> torch.nn.Module:
    mod = _MODULES.get(key)
    if mod is None:
        mod = _MODULES[key] = build()
    return mod


def _dtype(params: Dict[str, Any], default: str) -> torch.dtype:
    return getattr(torch, params.get("dtype", default))


def _randn(shape, gen: torch.Generator, device: str, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, device=device, dtype=torch.float32).to(dtype)


def _weight(n: int, gen: torch.Generator, device: str, dtype: torch.dtype) -> torch.Tensor:
    # Near one, as a trained norm's scale is; random so that the oracle sees it used.
    return (1.0 + 0.1 * torch.randn(n, generator=gen, device=device, dtype=torch.float32)).to(dtype)


# --- RMSNorm (LlamaRMSNorm against LigerRMSNorm), forward ---------------------------


def rms_norm_inputs(params: Dict[str, Any], gen: torch.Generator, device: str) -> tuple:
    """``x`` of shape (M, H) and the norm's weight of shape (H,), both in ``dtype``."""
    dtype = _dtype(params, "bfloat16")
    M, H = int(params["M"]), int(params["H"])
    return _randn((M, H), gen, device, dtype), _weight(H, gen, device, dtype)


def hf_llama_rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    mod = _module(("hf_rms", w.shape[0], eps, x.device.type), lambda: LlamaRMSNorm(w.shape[0], eps=eps).to(x.device))
    return functional_call(mod, {"weight": w}, (x,))


def liger_rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    from liger_kernel.transformers.rms_norm import LigerRMSNorm

    # LigerRMSNorm's defaults (casting_mode="llama", offset 0), as in Liger's benchmark.
    mod = _module(("liger_rms", w.shape[0], eps, x.device.type), lambda: LigerRMSNorm(w.shape[0], eps=eps).to(x.device))
    return functional_call(mod, {"weight": w}, (x,))


# --- LayerNorm (torch.nn.LayerNorm against LigerLayerNorm), forward -----------------


def layer_norm_inputs(params: Dict[str, Any], gen: torch.Generator, device: str) -> tuple:
    """``x`` (M, N), weight (N,) and bias (N,), all in ``dtype``."""
    dtype = _dtype(params, "float32")
    M, N = int(params["M"]), int(params["N"])
    bias = 0.1 * _randn((N,), gen, device, torch.float32)
    return _randn((M, N), gen, device, dtype), _weight(N, gen, device, dtype), bias.to(dtype)


def torch_layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    mod = _module(("torch_ln", w.shape[0], eps, x.device.type),
                  lambda: torch.nn.LayerNorm(w.shape[0], eps=eps).to(x.device))
    return functional_call(mod, {"weight": w, "bias": b}, (x,))


def liger_layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    from liger_kernel.transformers.layer_norm import LigerLayerNorm

    # Liger 0.8 picks among registered implementations (Triton, cuTile, CuTe DSL); the
    # claim was made for its Triton kernel (the only one in 0.6.0), so pin that one.
    mod = _module(("liger_ln", w.shape[0], eps, x.device.type),
                  lambda: LigerLayerNorm(w.shape[0], eps=eps, bias=True, impl="nvidia-triton").to(x.device))
    return functional_call(mod, {"weight": w, "bias": b}, (x,))


# --- Residual add + RMSNorm (naive against LigerFusedAddRMSNorm), forward ------------


def add_rms_norm_inputs(params: Dict[str, Any], gen: torch.Generator, device: str) -> tuple:
    """Hidden states ``x`` (M, H), residual ``r`` (M, H) and the norm's weight (H,)."""
    dtype = _dtype(params, "float32")
    M, H = int(params["M"]), int(params["H"])
    return _randn((M, H), gen, device, dtype), _randn((M, H), gen, device, dtype), _weight(H, gen, device, dtype)


def add_then_hf_rms_norm(x: torch.Tensor, r: torch.Tensor, w: torch.Tensor, eps: float = 1e-6):
    """The unfused pair: ``s = x + r`` then LlamaRMSNorm(s); returns (normed, s).

    In fp32 (the benchmark's dtype) this is exactly what the naive module of Liger's
    script computes: its casts to float32 and back are no-ops there."""
    s = x + r
    return hf_llama_rms_norm(s, w, eps), s


def liger_fused_add_rms_norm(x: torch.Tensor, r: torch.Tensor, w: torch.Tensor, eps: float = 1e-6):
    from liger_kernel.transformers.fused_add_rms_norm import LigerFusedAddRMSNorm

    mod = _module(("liger_add_rms", w.shape[0], eps, x.device.type),
                  lambda: LigerFusedAddRMSNorm(w.shape[0], eps=eps).to(x.device))
    y, s = functional_call(mod, {"weight": w}, (x, r))
    return y, s


# --- ReLU squared (torch against LigerReLUSquared), forward -------------------------


def relu_squared_inputs(params: Dict[str, Any], gen: torch.Generator, device: str) -> tuple:
    dtype = _dtype(params, "bfloat16")
    return (_randn((int(params["M"]), int(params["N"])), gen, device, dtype),)


def torch_relu_squared(x: torch.Tensor) -> torch.Tensor:
    """Two eager ops, relu then square: the unfused form Liger's script timed."""
    return torch.square(F.relu(x))


def liger_relu_squared(x: torch.Tensor) -> torch.Tensor:
    from liger_kernel.transformers.relu_squared import LigerReLUSquared

    mod = _module(("liger_relu2", x.device.type), LigerReLUSquared)
    return mod(x)


# --- LayerNorm forward + backward ---------------------------------------------------


def layer_norm_grad_inputs(params: Dict[str, Any], gen: torch.Generator, device: str) -> tuple:
    """``x`` (M, N), weight (N,), bias (N,) and the output gradient ``dy`` (M, N)."""
    x, w, b = layer_norm_inputs(params, gen, device)
    return x, w, b, _randn(tuple(x.shape), gen, device, x.dtype)


def _train_step(forward, x, w, b, dy):
    """Forward, then backward with ``dy``: returns (y, dx, dw, db). The leaves are
    detached views of the inputs, so the inputs themselves are never written."""
    xg, wg, bg = (t.detach().requires_grad_(True) for t in (x, w, b))
    y = forward(xg, wg, bg)
    y.backward(dy)
    return y.detach(), xg.grad, wg.grad, bg.grad


def torch_layer_norm_train_step(x, w, b, dy):
    return _train_step(torch_layer_norm, x, w, b, dy)


def liger_layer_norm_train_step(x, w, b, dy):
    return _train_step(liger_layer_norm, x, w, b, dy)
