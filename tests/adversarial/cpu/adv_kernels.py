"""Shared pieces of the adversarial suite: input factories, baselines and honest kernels.

Baselines and kernels are ``torch.library`` custom ops (``adv::ref_*`` and ``adv::*``),
so that the profiler names them, the manifests can say which must run, and a
candidate that calls the baseline shows ``adv::ref_*`` in its trace. Shapes are tiny:
the suite runs on a 2-core CI machine in about a minute.
"""



import math
from typing import Any, Dict, Tuple

import torch
import torch.nn.functional as F

Tensor = torch.Tensor


# --- factories -------------------------------------------------------------------------

def vec_inputs(params: Dict[str, Any], gen: torch.Generator, device: str) -> Tuple[Tensor]:
    return (torch.randn(int(params["n"]), generator=gen, device=device),)


def gemv_inputs(params: Dict[str, Any], gen: torch.Generator, device: str) -> Tuple[Tensor, Tensor]:
    d_out, d_in = int(params["d_out"]), int(params["d_in"])
    return (torch.randn(d_out, d_in, generator=gen, device=device),
            torch.randn(d_in, generator=gen, device=device))


def mat_inputs(params: Dict[str, Any], gen: torch.Generator, device: str) -> Tuple[Tensor, Tensor]:
    m, k, n = int(params["m"]), int(params["k"]), int(params["n"])
    return (torch.randn(m, k, generator=gen, device=device), torch.randn(k, n, generator=gen, device=device))


def attn_inputs(params: Dict[str, Any], gen: torch.Generator, device: str) -> Tuple[Tensor, Tensor, Tensor]:
    shape = (1, int(params["heads"]), int(params["seq"]), int(params["head_dim"]))
    return tuple(torch.randn(shape, generator=gen, device=device) for _ in range(3))  # type: ignore[return-value]


def softmax_inputs(params: Dict[str, Any], gen: torch.Generator, device: str) -> Tuple[Tensor]:
    return (torch.randn(int(params["rows"]), int(params["cols"]), generator=gen, device=device),)


# --- baselines --------------------------------------------------------------------------

@torch.library.custom_op("adv::ref_scale", mutates_args=())
def ref_scale(x: Tensor) -> Tensor:
    return x * 2.0


@torch.library.custom_op("adv::ref_gemv", mutates_args=())
def ref_gemv(w: Tensor, x: Tensor) -> Tensor:
    """Row-wise GEMV: multiply, then sum each row."""
    return (w * x).sum(dim=1)


@torch.library.custom_op("adv::ref_matmul", mutates_args=())
def ref_matmul(a: Tensor, b: Tensor) -> Tensor:
    return a @ b


@torch.library.custom_op("adv::ref_softmax", mutates_args=())
def ref_softmax(x: Tensor) -> Tensor:
    return torch.softmax(x, dim=-1)


def sdpa(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    return F.scaled_dot_product_attention(q, k, v)


# --- honest kernels ----------------------------------------------------------------------

@torch.library.custom_op("adv::scale", mutates_args=())
def scale(x: Tensor) -> Tensor:
    return x + x


@torch.library.custom_op("adv::gemv", mutates_args=())
def gemv(w: Tensor, x: Tensor) -> Tensor:
    return torch.mv(w, x)


@torch.library.custom_op("adv::gemv_blocked128", mutates_args=())
def gemv_blocked128(w: Tensor, x: Tensor) -> Tensor:
    """A kernel that only handles inner dimensions divisible by 128 (and says so)."""
    d_out, d_in = w.shape
    if d_in % 128:
        raise ValueError(f"gemv_blocked128 needs d_in % 128 == 0, got {d_in}")
    return torch.einsum("obk,bk->o", w.reshape(d_out, d_in // 128, 128), x.reshape(d_in // 128, 128))


@torch.library.custom_op("adv::attn", mutates_args=())
def attn(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    s = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
    return torch.matmul(torch.softmax(s, dim=-1), v)


@torch.library.custom_op("adv::softmax", mutates_args=())
def softmax(x: Tensor) -> Tensor:
    e = torch.exp(x - x.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=-1, keepdim=True)


@torch.library.custom_op("adv::matmul_bf16", mutates_args=())
def matmul_bf16(a: Tensor, b: Tensor) -> Tensor:
    """A precision downgrade: bf16 products, fp32 result."""
    return (a.to(torch.bfloat16) @ b.to(torch.bfloat16)).to(torch.float32)
