"""Honest candidates: each does its own work, and each does something a clumsy
defence could mistake for a cheat (a thread pool, printing, an out= buffer, a
lazily built constant, a scoped setting). None may raise a single alarm."""

import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import torch

import adv_kernels  # noqa: F401  (registers the adv:: ops)

Tensor = torch.Tensor

# Created at import, so its threads exist before the first call and after the last.
_POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="honest-pool")


def gemv(w: Tensor, x: Tensor) -> Tensor:
    return torch.ops.adv.gemv(w, x)


@torch.library.custom_op("adv::gemv_pool", mutates_args=())
def gemv_pool(w: Tensor, x: Tensor) -> Tensor:
    """Two halves of the rows on a persistent pool, joined before returning."""
    half = w.shape[0] // 2
    parts = [_POOL.submit(torch.mv, w[:half], x), _POOL.submit(torch.mv, w[half:], x)]
    return torch.cat([p.result() for p in parts])


def gemv_threaded(w: Tensor, x: Tensor) -> Tensor:
    return torch.ops.adv.gemv_pool(w, x)


def gemv_chatty(w: Tensor, x: Tensor) -> Tensor:
    """Prints what it does, including lines that look like a harness's."""
    print("check: pass  speedup: 12.0  (a candidate's own log line, not a result)")
    print("gemv_chatty: computing", tuple(w.shape), file=sys.stderr)
    return torch.ops.adv.gemv(w, x)


def gemv_out(w: Tensor, x: Tensor) -> Tensor:
    """Writes every element of an uninitialised buffer (torch.mv(out=...))."""
    y = torch.empty(w.shape[0], dtype=w.dtype, device=w.device)
    torch.mv(w, x, out=y)
    return torch.ops.adv.scale(y) * 0.5


_ONES: dict = {}
_LOCK = threading.Lock()


def gemv_scoped(w: Tensor, x: Tensor) -> Tensor:
    """Caches an input-independent constant and changes grad mode inside a scope only."""
    key = (w.shape[0], w.dtype, w.device)
    with _LOCK:
        ones = _ONES.setdefault(key, torch.ones(w.shape[0], dtype=w.dtype, device=w.device))
    with torch.no_grad(), torch.inference_mode(False):
        return torch.ops.adv.gemv(w, x) * ones


def softmax(x: Tensor) -> Tensor:
    return torch.ops.adv.softmax(x)
