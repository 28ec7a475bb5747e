"""Thin adapters for auditing published matrix-multiply throughput ratios.

* NVIDIA's H100 datasheet ratios, with PyTorch's own entry points to cuBLAS: FP8
  (``torch._scaled_mm`` on e4m3 operands) against BF16 (``torch.mm``), and TF32
  against IEEE FP32 (``torch.mm`` with TF32 allowed or not).
* torchao's float8 training linear (``torchao.float8.Float8Linear``, tensorwise
  recipe, installed package) against a bf16 ``torch.nn.Linear``, both compiled with
  ``torch.compile`` as torchao's benchmark does, forward and backward.

The datasheet claims are about tensor-core throughput on operands already in the
low-precision format, so the fp8 operands and their per-tensor scales are made by the
input factory, outside the timed call; torchao's claim is about the whole training
linear, so there the casts and scaling are inside the timed call.
"""

from __future__ import annotations

import contextlib
from typing import Any, Dict, Iterator, Tuple

import torch
import torch._dynamo.config
import torch._inductor.config
from torch.func import functional_call

torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
# Compile in this process: a pool of compile workers would outlive the first call.
torch._inductor.config.compile_threads = 1

E4M3_MAX = 448.0


def _randn(shape, gen: torch.Generator, device: str, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, device=device, dtype=torch.float32).to(dtype)


# --- FP8 (e4m3, per-tensor scales) against BF16 -------------------------------------


def fp8_gemm_inputs(params: Dict[str, Any], gen: torch.Generator, device: str) -> tuple:
    """bf16 A (M, K) and B (K, N), and the same values as e4m3 with per-tensor scales.

    B is made as (N, K) and passed transposed, the column-major layout
    ``torch._scaled_mm`` needs for its second operand; ``torch.mm`` gets the same view."""
    M, K, N = (int(params[k]) for k in ("M", "K", "N"))
    a = _randn((M, K), gen, device, torch.bfloat16)
    bt = _randn((N, K), gen, device, torch.bfloat16)
    scale_a = (a.abs().amax().float() / E4M3_MAX).reshape(())
    scale_b = (bt.abs().amax().float() / E4M3_MAX).reshape(())
    a8 = (a.float() / scale_a).to(torch.float8_e4m3fn)
    b8 = (bt.float() / scale_b).to(torch.float8_e4m3fn)
    return a, bt.t(), a8, b8.t(), scale_a, scale_b


def bf16_mm(a, b, a8, b8, scale_a, scale_b) -> torch.Tensor:
    return torch.mm(a, b)


def fp8_scaled_mm(a, b, a8, b8, scale_a, scale_b) -> torch.Tensor:
    return torch._scaled_mm(a8, b8, scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16, use_fast_accum=True)


# --- TF32 against IEEE FP32 -----------------------------------------------------------


def fp32_gemm_inputs(params: Dict[str, Any], gen: torch.Generator, device: str) -> tuple:
    M, K, N = (int(params[k]) for k in ("M", "K", "N"))
    return _randn((M, K), gen, device, torch.float32), _randn((K, N), gen, device, torch.float32)


@contextlib.contextmanager
def _tf32(allowed: bool) -> Iterator[None]:
    """Set cuBLAS's TF32 switch for the block and put it back after, so that the
    process-wide setting is what it was (expkit checks that it is)."""
    matmul = torch.backends.cuda.matmul
    before = matmul.allow_tf32
    matmul.allow_tf32 = allowed
    try:
        yield
    finally:
        matmul.allow_tf32 = before


def fp32_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    with _tf32(False):
        return torch.mm(a, b)


def tf32_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    with _tf32(True):
        return torch.mm(a, b)


# --- torchao Float8Linear (tensorwise) against a bf16 Linear, forward + backward -----


_LINEARS: Dict[Tuple[Any, ...], Any] = {}


def linear_inputs(params: Dict[str, Any], gen: torch.Generator, device: str) -> tuple:
    """Input x (M, K), weight (N, K) and the gradient of the output (M, N), bf16."""
    M, K, N = (int(params[k]) for k in ("M", "K", "N"))
    x = _randn((M, K), gen, device, torch.bfloat16)
    w = (_randn((N, K), gen, device, torch.float32) / K ** 0.5).to(torch.bfloat16)
    grad_out = _randn((M, N), gen, device, torch.bfloat16)
    return x, w, grad_out


def _compiled_linear(kind: str, w: torch.Tensor):
    """A bias-free linear of ``w``'s shape (bf16 ``nn.Linear``, or the same converted
    to torchao's ``Float8Linear``), called through ``functional_call`` with the weight
    as an argument, compiled once per configuration."""
    key = (kind, tuple(w.shape), w.dtype, w.device)
    fn = _LINEARS.get(key)
    if fn is None:
        lin = torch.nn.Linear(w.shape[1], w.shape[0], bias=False, device=w.device, dtype=w.dtype)
        if kind == "float8":
            from torchao.float8 import Float8LinearConfig, convert_to_float8_training

            # convert_to_float8_training swaps children; wrap the linear so it has a parent.
            holder = torch.nn.Sequential(lin)
            convert_to_float8_training(holder, config=Float8LinearConfig.from_recipe_name("tensorwise"))
            lin = holder[0]

        def forward(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
            return functional_call(lin, {"weight": weight}, (x,))

        fn = _LINEARS[key] = torch.compile(forward, dynamic=False)
    return fn


def _train_step(fn, x: torch.Tensor, w: torch.Tensor, grad_out: torch.Tensor):
    """One forward and backward: returns (y, dL/dx, dL/dw) for dL/dy = ``grad_out``."""
    xg = x.detach().requires_grad_(True)
    wg = w.detach().requires_grad_(True)
    y = fn(xg, wg)
    y.backward(grad_out)
    return y.detach(), xg.grad, wg.grad


def bf16_linear_train_step(x, w, grad_out):
    if x.dtype is torch.float64:
        # expkit's float64 reference (relative_error oracle): the same linear, uncompiled.
        return _train_step(torch.nn.functional.linear, x, w, grad_out)
    return _train_step(_compiled_linear("bf16", w), x, w, grad_out)


def float8_linear_train_step(x, w, grad_out):
    return _train_step(_compiled_linear("float8", w), x, w, grad_out)
