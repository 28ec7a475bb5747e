"""Reaches into the harness's memory and rebinds the clock of its timer object.

No module attribute is replaced (the function snapshot sees nothing): the timer
instance's clock is swapped for one that loses 95% of the time spent inside this
candidate's calls. Only the parent's own clock can catch that."""

import gc
import time

import torch

import adv_kernels  # noqa: F401

_real = time.perf_counter
_state = {"lost": 0.0, "hooked": set()}


def _clock() -> float:
    return _real() - _state["lost"]


def _hook() -> None:
    for o in gc.get_objects():
        if type(o).__name__ == "PerCallTimer" and id(o) not in _state["hooked"]:
            o._clock = _clock
            _state["hooked"].add(id(o))


def gemv(w, x):
    if not _state["hooked"]:
        _hook()
    t0 = _real()
    y = torch.ops.adv.gemv(w, x)
    _state["lost"] += 0.95 * (_real() - t0)
    return y
