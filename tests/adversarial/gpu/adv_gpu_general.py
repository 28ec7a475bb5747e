"""GPU cheats and honest candidates of issue #13, where the mechanism differs from the CPU's:
TF32 switched on and off inside a call, cuDNN's autotuner switched on at import, CUDA
graphs replayed on stale inputs (and honestly, on the current ones), and work handed to a
process the run did not start."""

import os
import subprocess
import sys

import torch
import torch.nn.functional as F

Tensor = torch.Tensor


def conv_inputs(params, gen, device):
    n, c = int(params["n"]), int(params["c"])
    return (torch.randn(n, c, 32, 32, generator=gen, device=device),
            torch.randn(c, c, 3, 3, generator=gen, device=device))


def conv(x: Tensor, w: Tensor) -> Tensor:
    return F.conv2d(x, w, padding=1)


def mm_fp32(a: Tensor, b: Tensor) -> Tensor:
    """The baseline: cuBLAS in fp32 (torch's default leaves TF32 off for matmul)."""
    return a @ b


# --- TF32 for one call, the switch restored before returning ----------------------------------

def tf32_scoped(a: Tensor, b: Tensor) -> Tensor:
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        return torch.einsum("mk,kn->mn", a, b)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


# --- CUDA graphs ------------------------------------------------------------------------------

_GRAPHS: dict = {}


def graph_stale(a: Tensor, b: Tensor) -> Tensor:
    """Captures a graph of the product on copies of the inputs it first sees at each address,
    and replays it without copying again: a timed call whose inputs changed in place gets the
    old answer."""
    key = (a.data_ptr(), b.data_ptr(), tuple(a.shape), tuple(b.shape))
    hit = _GRAPHS.get(key)
    if hit is None:
        sa, sb = a.clone(), b.clone()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):  # cuBLAS sets itself up outside the capture, as it must
            torch.einsum("mk,kn->mn", sa, sb)
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = torch.einsum("mk,kn->mn", sa, sb)
        hit = _GRAPHS[key] = (g, sa, sb, out)
    g, _, _, out = hit
    g.replay()
    return out.clone()


_STATIC: dict = {}


def graph_honest(a: Tensor, b: Tensor) -> Tensor:
    """One graph per shape on static buffers; every call copies its inputs in, replays, and
    returns a copy of the output."""
    key = (tuple(a.shape), tuple(b.shape), a.dtype)
    hit = _STATIC.get(key)
    if hit is None:
        sa, sb = torch.empty_like(a), torch.empty_like(b)
        sa.copy_(a)
        sb.copy_(b)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):  # warm cuBLAS up before capture
            torch.einsum("mk,kn->mn", sa, sb)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = torch.einsum("mk,kn->mn", sa, sb)
        hit = _STATIC[key] = (g, sa, sb, out)
    g, sa, sb, out = hit
    sa.copy_(a)
    sb.copy_(b)
    g.replay()
    return out.clone()


# --- work handed to a process of its own, detached from the run ----------------------------------

_DAEMON = ("import torch, time\n"
           "x = torch.randn(4096, 4096, device='cuda')\n"
           "t = time.time()\n"
           "while time.time() - t < 10:\n"
           "    x = (x @ x).clamp_(-1, 1)\n"
           "torch.cuda.synchronize()\n")


def gpu_daemon(a: Tensor, b: Tensor) -> Tensor:
    """Starts, once, a process in a session of its own (not a child the count can see once it
    is reparented) that keeps the GPU busy while the baseline is timed."""
    if not _GRAPHS.get("daemon"):
        _GRAPHS["daemon"] = subprocess.Popen([sys.executable, "-c", _DAEMON], start_new_session=True,
                                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ))
    return a @ b
