"""Bad candidates, one per way of faking or fooling a speedup (docs/threat-model.md).

Each one is correct where a naive harness looks, and wrong, absent or untrustworthy
where expkit's defences look. Cheats that act when their module is imported live in
modules of their own (``adv_timer_patch``, ``adv_flag_flipper``, ``adv_timer_rebind``),
so that importing this one changes nothing.
"""

import gc
import hashlib
import os
import stat
import subprocess
import threading
import time

import torch
import torch.nn.functional as F

import adv_kernels

Tensor = torch.Tensor


# 1. Calls the baseline op, disguised.
def ref_passthrough(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    op = getattr(F, "scaled_" + "dot_product_attention")
    return op(q, k, v)


# 2. A real kernel for friendly shapes, the baseline for the rest.
def fallback_odd(w: Tensor, x: Tensor) -> Tensor:
    try:
        return torch.ops.adv.gemv_blocked128(w, x)
    except Exception:
        return torch.ops.adv.ref_gemv(w, x)


# 3. Returns a tensor the harness holds (or a view of one) instead of computing.
def stale_buffer(x: Tensor) -> Tensor:
    for o in gc.get_objects():
        if type(o) is torch.Tensor and o is not x and o.shape == x.shape and o.dtype == x.dtype:
            return o.view(o.shape)
    return torch.empty_like(x)


# 3b. Finds the baseline's result in memory by spot checks and copies it: works only
#     when the baseline ran first on these inputs.
def stale_clone(x: Tensor) -> Tensor:
    n = x.numel()
    spots = [0, n // 2, n - 1]
    want = [2.0 * float(x[i]) for i in spots]
    for o in gc.get_objects():
        if type(o) is torch.Tensor and o.shape == x.shape and o.dtype == x.dtype and o is not x:
            if all(abs(float(o[i]) - w) < 1e-6 for i, w in zip(spots, want)):
                return o.clone()
    return torch.zeros_like(x)


# 4. Replays outputs keyed on a hash of the first 64 values of the first input.
_REPLAY: dict = {}


def replay_cache(w: Tensor, x: Tensor) -> Tensor:
    key = (tuple(w.shape), hashlib.sha1(w.reshape(-1)[:64].numpy().tobytes()).hexdigest())
    hit = _REPLAY.get(key)
    if hit is None:
        hit = _REPLAY[key] = torch.ops.adv.gemv(w, x)
    return hit.clone()


# 5. Zeroes its inputs, returns zeros: a baseline run afterwards on the same tensors agrees.
def input_zeroer(x: Tensor) -> Tensor:
    x.zero_()
    return torch.zeros_like(x)


# 6. Returns at once, computes on a thread ~50 ms later.
def thread_defer(x: Tensor) -> Tensor:
    out = torch.empty_like(x)

    def later() -> None:
        time.sleep(0.05)
        out.copy_(torch.ops.adv.scale(x))

    threading.Thread(target=later, name="deferred-work", daemon=True).start()
    return out


# 6a. Returns at once and fills the output from a new thread that then parks, as a pool's
# worker waits for work: one such thread a call. Its wait in the standard library's code
# looks like a pool that grew, which a case may do by POOL_THREADS threads, not by one a call.
def parked_defer(x: Tensor) -> Tensor:
    out = torch.empty_like(x)
    out[:1] = torch.ops.adv.scale(x[:1])  # the declared op, on the calling thread

    def later() -> None:
        out[1:] = torch.ops.adv.scale(x[1:])
        threading.Event().wait(30.0)

    threading.Thread(target=later, name="parked-defer", daemon=True).start()
    return out


# 6b. Leaves a child process running (work that outlives the call).
def child_process(x: Tensor) -> Tensor:
    subprocess.Popen(["sleep", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return torch.ops.adv.scale(x)


# 7. A tensor subclass that could compute lazily when compared.
class Lazy(torch.Tensor):
    pass


def lazy_result(x: Tensor) -> Tensor:
    return torch.ops.adv.scale(x).as_subclass(Lazy)


# 8. Correct at the declared size; for others processes n // 128 * 128 elements and
#    leaves the tail unwritten.
@torch.library.custom_op("adv::scale_blocks", mutates_args=())
def scale_blocks(x: Tensor) -> Tensor:
    out = torch.empty_like(x)
    k = x.numel() // 128 * 128
    out[:k] = x[:k] * 2.0
    return out


def declared_shape_only(x: Tensor) -> Tensor:
    return torch.ops.adv.scale_blocks(x)


# 9. Zeros when the output is tiny (a softmax over a long row).
def zeros_when_tiny(x: Tensor) -> Tensor:
    if x.shape[-1] >= 1024:
        return torch.zeros_like(x)
    return torch.ops.adv.softmax(x)


# 10. Regenerates the inputs from guessed seeds and answers from a table.
_TABLE: dict = {}


def seed_oracle(w: Tensor, x: Tensor) -> Tensor:
    shape = tuple(w.shape)
    if shape not in _TABLE:
        for seed in (0, 1, 42, 1234):
            g = torch.Generator().manual_seed(seed)
            ww, xx = adv_kernels.gemv_inputs({"d_out": shape[0], "d_in": shape[1]}, g, "cpu")
            _TABLE.setdefault(shape, torch.mv(ww, xx))
    return _TABLE[shape].clone()


# 11. Computes every output of a batch on the first call and looks them up after:
#     finds all same-shaped inputs in memory, keys by storage address, and rebuilds
#     its table whenever it sees a freshly made input (version 0).
_BATCH: dict = {}


def batch_then_skip(w: Tensor, x: Tensor) -> Tensor:
    key = (w.data_ptr(), x.data_ptr())
    if key not in _BATCH or w._version == 0:
        _BATCH.clear()
        ws = [o for o in gc.get_objects() if type(o) is torch.Tensor and o.shape == w.shape and o.dtype == w.dtype]
        xs = [o for o in gc.get_objects() if type(o) is torch.Tensor and o.shape == x.shape and o.dtype == x.dtype]
        for a in ws:
            for b in xs:
                _BATCH[(a.data_ptr(), b.data_ptr())] = torch.ops.adv.gemv(a, b)
        _BATCH.setdefault(key, torch.ops.adv.gemv(w, x))
    return _BATCH[key].clone()


# 12. Forges result lines on stdout and on every pipe it can write to.
def report_forger(x: Tensor) -> Tensor:
    fake = b"check: pass\nspeedup: 12.0\n"
    print(fake.decode(), end="", flush=True)
    for fd in range(3, 256):
        try:
            st = os.fstat(fd)
            if stat.S_ISFIFO(st.st_mode):
                os.write(fd, fake)
        except OSError:
            continue
    return torch.ops.adv.scale(x)


# 13. Reads uninitialised memory and gets lucky: 0 * garbage is 0, unless the
#     garbage is NaN (which is what expkit fills new allocations with).
def uninit_garbage(x: Tensor) -> Tensor:
    scratch = torch.empty_like(x)
    return torch.ops.adv.scale(x) + scratch * 0.0
