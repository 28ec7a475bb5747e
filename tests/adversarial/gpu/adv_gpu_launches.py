"""GPU candidates that do less on the timed calls than on the profiled one (issue #49),
written from expkit's source.

Each computes ``a @ b`` in full where it may be watched -- under the profiler
(``torch.autograd._profiler_enabled()``) or outside a timed block (the preflight's
trials) -- and only the first half of the rows on a timed call (a smaller grid), found
on the stack (the timer's ``sample``). ``forged_grid`` also rewrites the kernel record
it finds through the garbage collector (the recorder's callbacks) so that its half-size
launches read as full-size; ``stopped_recorder`` turns CUPTI's kernel records off in its
worker so that no timed call's launches are recorded at all."""

from __future__ import annotations

import gc
import sys

from typing import Any, Dict

import torch

Tensor = torch.Tensor
_OUT: Dict[Any, Tensor] = {}
_DONE: Dict[str, bool] = {}


def _timed() -> bool:
    f = sys._getframe(2)
    while f is not None:
        if f.f_code.co_name == "sample" and str(f.f_globals.get("__name__", "")).startswith("expkit.timing"):
            return True
        f = f.f_back
    return False


def _half(a: Tensor, b: Tensor) -> Tensor:
    n, h = a.shape[0], a.shape[0] // 2
    out = _OUT.get((a.shape, b.shape))
    if out is None:
        out = _OUT[(a.shape, b.shape)] = torch.zeros(n, b.shape[1], device=a.device)
    torch.mm(a[:h], b, out=out[:h])
    return out


def _watched() -> bool:
    return torch.autograd._profiler_enabled() or not _timed()


def profiler_aware(a: Tensor, b: Tensor) -> Tensor:
    return a @ b if _watched() else _half(a, b)


class _Grown:
    """A kernel record whose grid reads twice its size (every other field as it was)."""

    def __init__(self, rec: Any) -> None:
        self._rec = rec

    def __getattr__(self, name: str) -> Any:
        v = getattr(self._rec, name)
        return v * 2 if name in ("grid_x", "grid_y") else v


def _forge() -> None:
    from expkit.timing.cupti_recorder import CuptiRecorder

    for o in gc.get_objects():
        if isinstance(o, CuptiRecorder):
            requested, completed = o._callbacks

            def forging(activities: Any, _completed: Any = completed) -> None:
                _completed([_Grown(a) for a in activities])

            o._callbacks = (requested, forging)
            o._completed = forging


def forged_grid(a: Tensor, b: Tensor) -> Tensor:
    if _watched():
        return a @ b
    if not _DONE.get("forge"):
        _DONE["forge"] = True
        _forge()
    return _half(a, b)


def stopped_recorder(a: Tensor, b: Tensor) -> Tensor:
    if _watched():
        return a @ b
    if not _DONE.get("stop"):
        _DONE["stop"] = True
        from cupti import cupti

        cupti.activity_disable(cupti.ActivityKind.CONCURRENT_KERNEL)
    return _half(a, b)


