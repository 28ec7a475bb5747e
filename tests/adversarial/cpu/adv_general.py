"""Cheats the baseline-op rule cannot catch: each does its honest work, or appears to,
through another op than the baseline's outermost one, so only a general mechanism
stops it (issue #13): the whole-op-tree rule, the rounding oracle, the global-state and
tamper snapshots, the recheck, the child count, the CPU-time account.

Cheats that act at import live in modules of their own (``adv_mode_stack``,
``adv_harness_patch``, ``adv_baseline_patch``), so that importing this one changes nothing.
"""

import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, Tuple

import torch
import torch.nn.functional as F

Tensor = torch.Tensor


# --- factories and baselines ----------------------------------------------------------------

def linear_inputs(params: Dict[str, Any], gen: torch.Generator, device: str) -> Tuple[Tensor, Tensor, Tensor]:
    n, d_in, d_out = int(params["n"]), int(params["d_in"]), int(params["d_out"])
    return (torch.randn(n, d_in, generator=gen, device=device), torch.randn(d_out, d_in, generator=gen, device=device),
            torch.randn(d_out, generator=gen, device=device))


def gelu_inputs(params: Dict[str, Any], gen: torch.Generator, device: str) -> Tuple[Tensor]:
    return (torch.randn(int(params["rows"]), int(params["cols"]), generator=gen, device=device),)


@torch.library.custom_op("adv::ref_linear", mutates_args=())
def ref_linear(x: Tensor, w: Tensor, b: Tensor) -> Tensor:
    return F.linear(x, w, b)


@torch.library.custom_op("adv::ref_gelu", mutates_args=())
def ref_gelu(x: Tensor) -> Tensor:
    return F.gelu(x, approximate="tanh")


# --- 1. the baseline's inner op, reached by name ---------------------------------------------

@torch.library.custom_op("adv::fast_linear", mutates_args=())
def fast_linear(x: Tensor, w: Tensor, b: Tensor) -> Tensor:
    """``F.linear`` runs ``aten::addmm(b, x, w.t())``; so does this, by another name."""
    return getattr(torch.ops.aten, "add" + "mm")(b, x, w.t())


def inner_reach(x: Tensor, w: Tensor, b: Tensor) -> Tensor:
    return torch.ops.adv.fast_linear(x, w, b)


# --- 2. the same, on copies of the operands ---------------------------------------------------

@torch.library.custom_op("adv::fast_matmul", mutates_args=())
def fast_matmul(a: Tensor, b: Tensor) -> Tensor:
    """Copies first, so that no operand is an input tensor; then the baseline's ``aten::mm``."""
    return torch.ops.aten.mm(a.clone(), b.contiguous().clone())


def copy_reach(a: Tensor, b: Tensor) -> Tensor:
    return torch.ops.adv.fast_matmul(a, b)


# --- 3. tf32 behind an fp32 signature, through einsum ------------------------------------------

def _tf32(x: Tensor) -> Tensor:
    bits = x.contiguous().view(torch.int32)
    return ((bits + ((bits >> 13) & 1) + 0xFFF) & ~0x1FFF).view(torch.float32)


def tf32_einsum(a: Tensor, b: Tensor) -> Tensor:
    """Keeps 10 mantissa bits of each operand, as a TF32 tensor core does."""
    return torch.einsum("mk,kn->mn", _tf32(a), _tf32(b))


# --- 4. a softmax summed in fp16 ----------------------------------------------------------------

def fp16_softmax(x: Tensor) -> Tensor:
    e = torch.exp((x - x.amax(dim=-1, keepdim=True)).half())
    return (e / e.sum(dim=-1, keepdim=True)).float()


# --- 7. correct only while the preflight's poison is on -----------------------------------------

_STALE: dict = {}


def poison_sniff(w: Tensor, x: Tensor) -> Tensor:
    """The preflight fills new memory through deterministic mode; timed calls run without
    it. This computes only when it sees the mode, and replays an old answer otherwise."""
    key = tuple(w.shape)
    if torch.are_deterministic_algorithms_enabled() or key not in _STALE:
        _STALE[key] = torch.mv(w, x)
    return _STALE[key].clone()


# --- 8. work left running in a child that looks like multiprocessing's resource tracker ---------

_CHILDREN: list = []


def disguised_child(x: Tensor) -> Tensor:
    """The resource tracker's command line, with the work appended to it."""
    code = ("from multiprocessing.resource_tracker import main;main(-1) if False else None;"
            "import time\nt = time.time()\nwhile time.time() - t < 1: pass")
    _CHILDREN.append(subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL))
    return x * 2.0


# --- 9. more cores than the run allows, the setting restored before returning -------------------

def extra_cores(a: Tensor, b: Tensor) -> Tensor:
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        return torch.einsum("mk,kn->mn", a, b)
    finally:
        torch.set_num_threads(before)


# --- 10. more cores through a pool of its own ----------------------------------------------------

_POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="cheat-pool")


def pool_cores(a: Tensor, b: Tensor) -> Tensor:
    half = a.shape[0] // 2
    parts = [_POOL.submit(torch.einsum, "mk,kn->mn", a[:half], b), _POOL.submit(torch.einsum, "mk,kn->mn",
                                                                                a[half:], b)]
    return torch.cat([p.result() for p in parts])


# --- 10b. more cores through a thread of its own each call, joined before returning ---------------

def thread_per_call_cores(a: Tensor, b: Tensor) -> Tensor:
    """Half the product on a new thread that is joined, so gone, before the call returns:
    no thread is left running, and none is alive when the block's account reads its threads."""
    half = a.shape[0] // 2
    out: Dict[str, Tensor] = {}

    def top() -> None:
        torch.set_num_threads(1)  # without it each call took longer here than one thread doing it all
        out["top"] = torch.mm(a[:half], b)

    t = threading.Thread(target=top)
    t.start()
    bottom = torch.mm(a[half:], b)
    t.join()
    return torch.cat([out["top"], bottom])


# --- 11. an honest gelu, beside a patch that slows the baseline's own gelu -----------------------

def gelu_tanh(x: Tensor) -> Tensor:
    """The tanh approximation written out: another op than the baseline's ``aten::gelu``."""
    return 0.5 * x * (1.0 + torch.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))
