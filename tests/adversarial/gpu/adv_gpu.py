"""GPU candidates of the adversarial suite (run by the lead on the device machine).

Inputs are generated on the GPU; the baselines are plain torch calls, so that their
kernels form the fingerprint the candidates must not reuse."""

import torch

Tensor = torch.Tensor


def mat_inputs(params, gen, device):
    n = int(params["n"])
    return (torch.randn(n, n, generator=gen, device=device), torch.randn(n, n, generator=gen, device=device))


def vec_inputs(params, gen, device):
    return (torch.randn(int(params["n"]), generator=gen, device=device),)


def naive_matmul(a: Tensor, b: Tensor) -> Tensor:
    """A slow, honest baseline: broadcast-multiply and reduce."""
    return (a.unsqueeze(-1) * b.unsqueeze(0)).sum(dim=1)


def matmul(a: Tensor, b: Tensor) -> Tensor:
    return a @ b


_SIDE = {}


def side_stream(a: Tensor, b: Tensor) -> Tensor:
    """The right product, queued on a stream the harness's events never wait for."""
    s = _SIDE.setdefault("s", torch.cuda.Stream())
    with torch.cuda.stream(s):
        return a @ b


def side_stream_late(a: Tensor, b: Tensor) -> Tensor:
    """The right product on a side stream that waits for the caller's stream, which never
    waits for it in turn: the call returns while its work still runs."""
    s = _SIDE.setdefault("late", torch.cuda.Stream())
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        return a @ b


def joined_stream(a: Tensor, b: Tensor) -> Tensor:
    """Honest: the product on a stream of its own, ordered with the caller's at both ends,
    as cuDNN orders its streams for grouped convolutions."""
    caller = torch.cuda.current_stream()
    s = _SIDE.setdefault("joined", torch.cuda.Stream())
    s.wait_stream(caller)
    with torch.cuda.stream(s):
        out = a @ b
    caller.wait_stream(s)
    out.record_stream(caller)
    return out


def stale_empty(a: Tensor, b: Tensor) -> Tensor:
    """The Sakana exploit: an uninitialised output the caching allocator may fill with
    the baseline's freshly freed result."""
    return torch.empty(a.shape[0], b.shape[1], device=a.device, dtype=a.dtype)


def scale_twice(x: Tensor) -> Tensor:
    """Baseline of the L2 case: two passes over x."""
    return (x * 1.0) * 2.0


def scale_once(x: Tensor) -> Tensor:
    """One pass over x: faster than the baseline, by more when x sits in L2."""
    return x * 2.0
