"""Honest candidates a general defence could mistake for cheats (issue #13). Each sums in
another order than its baseline, shares an op with the baseline's insides, keeps a pool
or a workspace of its own, or is compiled. None may raise a single alarm.
"""

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, Tuple

import torch

import adv_kernels  # noqa: F401  (registers the adv:: ops)

Tensor = torch.Tensor


def rows_inputs(params: Dict[str, Any], gen: torch.Generator, device: str) -> Tuple[Tensor]:
    return (torch.randn(int(params["rows"]), int(params["cols"]), generator=gen, device=device),)


# --- baselines ----------------------------------------------------------------------------------

@torch.library.custom_op("adv::ref_bsum_matmul", mutates_args=())
def ref_bsum_matmul(a: Tensor, b: Tensor) -> Tensor:
    """The issue's reference: broadcast multiply, then sum over the inner dimension."""
    return (a[:, :, None] * b[None, :, :]).sum(1)


@torch.library.custom_op("adv::ref_rowsum", mutates_args=())
def ref_rowsum(x: Tensor) -> Tensor:
    return x.sum(dim=1)


# --- candidates ---------------------------------------------------------------------------------

def mm(a: Tensor, b: Tensor) -> Tensor:
    """The issue's honest candidate: the BLAS product, which sums in another order."""
    return torch.mm(a, b)


@torch.library.custom_op("adv::matmul_blocked", mutates_args=())
def matmul_blocked(a: Tensor, b: Tensor) -> Tensor:
    """``aten::mm`` on 64-wide blocks of the inner dimension, accumulated: the baseline's
    ``aten::matmul`` runs ``aten::mm`` too, on the whole operands."""
    acc = torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
    for s in range(0, a.shape[1], 64):
        acc += torch.mm(a[:, s:s + 64], b[s:s + 64])
    return acc


def blocked(a: Tensor, b: Tensor) -> Tensor:
    return torch.ops.adv.matmul_blocked(a, b)


def split_k(a: Tensor, b: Tensor) -> Tensor:
    """Four partial products over quarters of the inner dimension, then their sum."""
    return torch.stack([x @ y for x, y in zip(a.chunk(4, dim=1), b.chunk(4, dim=0))]).sum(0)


def rowsum_gemv(x: Tensor) -> Tensor:
    """A row sum as a matrix-vector product with ones: another order, another routine."""
    return torch.mv(x, torch.ones(x.shape[1], dtype=x.dtype, device=x.device))


# A library with a worker pool of its own, sized to the run's one thread: the call hands
# its work over and waits, so one core computes at a time. torch's intra-op thread count
# is per thread (OpenMP's), so the worker takes the caller's: without the initializer the
# worker's torch.mm ran on every core (1.87 cores of a 2-core machine, caught as
# ``resources``), which is more than the run allows, not a pool "within the threads".
_ALLOWED = torch.get_num_threads()  # imported after the harness set measure.cpu_threads
_POOL = ThreadPoolExecutor(max_workers=1, thread_name_prefix="honest-library",
                           initializer=lambda: torch.set_num_threads(_ALLOWED))


def own_pool(a: Tensor, b: Tensor) -> Tensor:
    return _POOL.submit(torch.mm, a, b).result()


# A workspace allocated once per shape and reused: one row of partial products per
# 64-wide block, every element written on every call, and never returned.
_WORKSPACE: Dict[Tuple[int, ...], Tensor] = {}
_LOCK = threading.Lock()


def workspace_gemv(w: Tensor, x: Tensor) -> Tensor:
    blocks = range(0, w.shape[1], 64)
    with _LOCK:
        ws = _WORKSPACE.get(tuple(w.shape))
        if ws is None:
            ws = _WORKSPACE[tuple(w.shape)] = torch.empty(len(blocks), w.shape[0], dtype=w.dtype, device=w.device)
    for i, s in enumerate(blocks):
        torch.mv(w[:, s:s + 64], x[s:s + 64], out=ws[i])
    return ws.sum(dim=0)


def _softmax(x: Tensor) -> Tensor:
    e = torch.exp(x - x.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=-1, keepdim=True)


# torch.compile with AOTAutograd's eager backend: Dynamo's tracing, guards (on
# deterministic mode, which the preflight's poison turns on) and recompiles, without a
# C++ compiler.
_compiled = torch.compile(_softmax, backend="aot_eager", dynamic=False)


def compiled_softmax(x: Tensor) -> Tensor:
    return _compiled(x)
