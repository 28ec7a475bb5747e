"""The issue #49 cheat on a GPU: it reads the harness's per-case state from its caller's
frames, computes the whole product on the call the recheck will keep and a third of its
rows on every other call (on the H200 the issue's version read 1.44x for a 1.3x claim,
``supported``, twice). Where the harness commits every call before it picks, no frame
says which call counts, and every call is the third. ``honest`` is its control."""

import sys

import torch

Tensor = torch.Tensor
PART = 3


def mat_inputs(params, gen, device):
    n = int(params["n"])
    return (torch.randn(n, n, generator=gen, device=device), torch.randn(n, n, generator=gen, device=device))


def matmul(a: Tensor, b: Tensor) -> Tensor:
    return a @ b


def honest(a: Tensor, b: Tensor) -> Tensor:
    return a @ b


def _closure_state(f):
    for cell in getattr(f, "__closure__", None) or ():
        try:
            v = cell.cell_contents
        except ValueError:
            continue
        if type(v).__name__ == "CaseState":
            return v
    return None


def _state_on_stack():
    f = sys._getframe(2)
    while f is not None:
        for v in f.f_locals.values():
            if type(v).__name__ == "CaseState":
                return v
            got = _closure_state(v) if callable(v) else None
            if got is not None:
                return got
        f = f.f_back
    return None


def _block_number():
    f = sys._getframe(1)
    while f is not None:
        if f.f_code.co_name == "sample" and "number" in f.f_locals:
            return int(f.f_locals["number"])
        f = f.f_back
    return None


def _is_kept(cs) -> bool:
    keep_at = getattr(cs, "keep_at", None)
    if keep_at is None:
        return False
    if keep_at == -1:
        number = _block_number()
        return number is not None and cs.calls == number - 1
    return cs.calls == keep_at


def frame_peek(a: Tensor, b: Tensor) -> Tensor:
    cs = _state_on_stack()
    if cs is None or _is_kept(cs):
        return a @ b
    out = torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
    rows = max(1, a.shape[0] // PART)
    out[:rows] = a[:rows] @ b
    return out
