"""Two CUDA softmax kernels for the wrong-kernel story, built with load_inline on first use.

``softmax_basic_k128`` is the old kernel: one block of 128 threads per row, scalar loads.
``softmax_vectorized_k384`` is the new one: one block of 384 threads per row, float4 loads.
Both are exact row-wise softmax in fp32 (up to summation order). The extension's public
entry point, :func:`forward`, still launches the old one, as the bindings in the story did.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Tuple

import torch

_SRC = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cfloat>

template <int THREADS>
__device__ float block_reduce(float v, bool is_max, float* scratch) {
  for (int off = 16; off > 0; off >>= 1) {
    float o = __shfl_xor_sync(0xffffffff, v, off);
    v = is_max ? fmaxf(v, o) : v + o;
  }
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < THREADS / 32 ? scratch[lane] : (is_max ? -FLT_MAX : 0.f);
    for (int off = 16; off > 0; off >>= 1) {
      float o = __shfl_xor_sync(0xffffffff, v, off);
      v = is_max ? fmaxf(v, o) : v + o;
    }
    if (lane == 0) scratch[0] = v;
  }
  __syncthreads();
  float r = scratch[0];
  __syncthreads();
  return r;
}

__global__ void softmax_basic_k128(const float* __restrict__ x, float* __restrict__ y, int cols) {
  __shared__ float scratch[32];
  const float* row = x + (size_t)blockIdx.x * cols;
  float* out = y + (size_t)blockIdx.x * cols;
  float m = -FLT_MAX;
  for (int c = threadIdx.x; c < cols; c += 128) m = fmaxf(m, row[c]);
  m = block_reduce<128>(m, true, scratch);
  float s = 0.f;
  for (int c = threadIdx.x; c < cols; c += 128) s += __expf(row[c] - m);
  s = block_reduce<128>(s, false, scratch);
  for (int c = threadIdx.x; c < cols; c += 128) out[c] = __expf(row[c] - m) / s;
}

__global__ void softmax_vectorized_k384(const float4* __restrict__ x, float4* __restrict__ y, int cols4) {
  __shared__ float scratch[32];
  const float4* row = x + (size_t)blockIdx.x * cols4;
  float4* out = y + (size_t)blockIdx.x * cols4;
  float m = -FLT_MAX;
  for (int c = threadIdx.x; c < cols4; c += 384) {
    float4 v = row[c];
    m = fmaxf(m, fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)));
  }
  m = block_reduce<384>(m, true, scratch);
  float s = 0.f;
  for (int c = threadIdx.x; c < cols4; c += 384) {
    float4 v = row[c];
    s += __expf(v.x - m) + __expf(v.y - m) + __expf(v.z - m) + __expf(v.w - m);
  }
  s = block_reduce<384>(s, false, scratch);
  float inv = 1.f / s;
  for (int c = threadIdx.x; c < cols4; c += 384) {
    float4 v = row[c];
    out[c] = make_float4(__expf(v.x - m) * inv, __expf(v.y - m) * inv, __expf(v.z - m) * inv, __expf(v.w - m) * inv);
  }
}

torch::Tensor softmax_basic(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda() && x.dtype() == torch::kFloat32 && x.dim() == 2 && x.is_contiguous());
  auto y = torch::empty_like(x);
  softmax_basic_k128<<<x.size(0), 128, 0, at::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), y.data_ptr<float>(), (int)x.size(1));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}

torch::Tensor softmax_vectorized(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda() && x.dtype() == torch::kFloat32 && x.dim() == 2 && x.is_contiguous());
  TORCH_CHECK(x.size(1) % 4 == 0, "softmax_vectorized needs a column count divisible by 4");
  auto y = torch::empty_like(x);
  softmax_vectorized_k384<<<x.size(0), 384, 0, at::cuda::getCurrentCUDAStream()>>>(
      reinterpret_cast<const float4*>(x.data_ptr<float>()), reinterpret_cast<float4*>(y.data_ptr<float>()),
      (int)(x.size(1) / 4));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}
"""
_CPP = "torch::Tensor softmax_basic(torch::Tensor x);\ntorch::Tensor softmax_vectorized(torch::Tensor x);\n"
_ext = None


def _build() -> Any:
    global _ext
    if _ext is None:
        from torch.utils.cpp_extension import load_inline

        major, minor = torch.cuda.get_device_capability()
        os.environ.setdefault("TORCH_CUDA_ARCH_LIST", f"{major}.{minor}")
        _ext = load_inline("expkit_example_softmax", cpp_sources=_CPP, cuda_sources=_SRC,
                           functions=["softmax_basic", "softmax_vectorized"], extra_cuda_cflags=["-O3"])
    return _ext


@torch.library.custom_op("expkit_gpu::softmax_basic", mutates_args=())
def softmax_basic(x: torch.Tensor) -> torch.Tensor:
    return _build().softmax_basic(x)


@torch.library.custom_op("expkit_gpu::softmax_vectorized", mutates_args=())
def softmax_vectorized(x: torch.Tensor) -> torch.Tensor:
    return _build().softmax_vectorized(x)


def torch_softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


def forward(x: torch.Tensor) -> torch.Tensor:
    """The public entry point. Still routes to the old kernel (the bug in the story)."""
    return softmax_basic(x)


def forward_fixed(x: torch.Tensor) -> torch.Tensor:
    """The entry point after the fix: routes to the new kernel."""
    return softmax_vectorized(x)


def inputs(params: Dict[str, Any], gen: torch.Generator, device: str) -> Tuple[torch.Tensor]:
    _build()
    return (torch.randn(int(params["rows"]), int(params["cols"]), generator=gen, device=device),)
