"""Triton kernels for the GPU examples.

* ``fused_add_relu_kernel``: relu(x + y) in one pass (eager PyTorch runs two kernels and
  writes the sum to memory in between), the honest example.
* ``matmul_big_tile_kernel``: an fp16 matmul with 128x128x64 tiles and 5 pipeline
  stages; each stage holds a 128x64 tile of A and a 64x128 tile of B in shared memory,
  5 x (128*64 + 64*128) x 2 B = 160 KiB, which an H100 block may have (227 KiB opt-in)
  and an L4 block may not (99 KiB opt-in): the target-limits example.
"""

from __future__ import annotations

from typing import Any, Dict, Tuple

import torch
import triton
import triton.language as tl


@triton.jit
def fused_add_relu_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(x + y, 0.0), mask=mask)


def fused_add_relu(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    n = x.numel()
    fused_add_relu_kernel[(triton.cdiv(n, 4096),)](x, y, out, n, BLOCK=4096, num_warps=4)
    return out


def eager_add_relu(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.relu(x + y)


def add_relu_inputs(params: Dict[str, Any], gen: torch.Generator, device: str) -> Tuple[torch.Tensor, torch.Tensor]:
    n = int(params["n"])
    return (torch.randn(n, generator=gen, device=device), torch.randn(n, generator=gen, device=device))


@triton.jit
def matmul_big_tile_kernel(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                           BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * sam + (k0 + rk)[None, :] * sak,
                    mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k0 + rk)[:, None] * sbk + rn[None, :] * sbn,
                    mask=((k0 + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc.to(tl.float16),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def matmul_big_tile(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    M, K = a.shape
    _, N = b.shape
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    grid = (triton.cdiv(M, 128), triton.cdiv(N, 128))
    matmul_big_tile_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                 c.stride(0), c.stride(1), BM=128, BN=128, BK=64, num_warps=8, num_stages=5)
    return c


def torch_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a @ b


def matmul_inputs(params: Dict[str, Any], gen: torch.Generator, device: str) -> Tuple[torch.Tensor, torch.Tensor]:
    m, n, k = int(params["m"]), int(params["n"]), int(params["k"])
    a = torch.randn(m, k, generator=gen, device=device).half()
    b = torch.randn(k, n, generator=gen, device=device).half()
    return a, b
