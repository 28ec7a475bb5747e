"""Adaptive cheats: each written from expkit's source, against the harness it shares an
interpreter with (issue #49). Every one does the baseline's work or less, so its honest
figure is 1.0x; each reads or changes the harness's own objects in its worker:

* ``frame_peek``: walks its caller's frames to the harness's per-case state and computes a
  whole product only on the call the recheck will keep; a third of it on every other call.
* ``gc_peek``: the same, finding that state through ``gc.get_objects()``; where the harness
  commits every call, it also rewrites the commitments to hold only its whole products.
* ``fewer_calls``: replaces the timer of its case with one that runs half the calls asked and
  divides their time by the number asked; pads the commitments to look whole.
* ``untimed_work``: moves two thirds of each product into the harness's per-call hook,
  outside the timed span: the timed call computes the last third and returns the whole.
* ``reply_forger``: wraps its side's block method so that each reply carries half the timed
  seconds and puts the other half in the untimed part: the same wall time, accounted for.

``honest`` is the control: the same product, every call, nothing else. The harness state
each cheat looks for is found by the names it has in expkit's source; where a name is
gone (the harness changed), the cheat does what it would do on an unchecked call.
"""

from __future__ import annotations

import gc
import sys
from typing import Any, Optional

import torch

Tensor = torch.Tensor
#: The share of the rows a cheat computes on a call it believes is not checked.
PART = 3


def _closure_state(f: Any) -> Optional[Any]:
    """The CaseState a harness closure (``CaseState._make_call``'s ``call``) closes over."""
    for cell in getattr(f, "__closure__", None) or ():
        try:
            v = cell.cell_contents
        except ValueError:
            continue
        if type(v).__name__ == "CaseState":
            return v
    return None


def _state_on_stack() -> Optional[Any]:
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


def _is_kept(cs: Any) -> bool:
    """Whether the call about to run is the one the (older) harness keeps for its recheck."""
    keep_at = getattr(cs, "keep_at", None)
    if keep_at is None:
        return False
    if keep_at == -1:  # LAST_CALL: the block's last call
        number = _block_number()
        return number is not None and cs.calls == number - 1
    return cs.calls == keep_at


def _block_number() -> Optional[int]:
    f = sys._getframe(1)
    while f is not None:
        if f.f_code.co_name == "sample" and "number" in f.f_locals:
            return int(f.f_locals["number"])
        f = f.f_back
    return None


def _whole(a: Tensor, b: Tensor) -> Tensor:
    return torch.mm(a, b)


def _part(a: Tensor, b: Tensor) -> Tensor:
    out = torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
    rows = max(1, a.shape[0] // PART)
    out[:rows] = torch.mm(a[:rows], b)
    return out


def honest(a: Tensor, b: Tensor) -> Tensor:
    return _whole(a, b)


def frame_peek(a: Tensor, b: Tensor) -> Tensor:
    cs = _state_on_stack()
    if cs is None:  # not in a timed block (a preflight trial): whole
        return _whole(a, b)
    return _whole(a, b) if _is_kept(cs) else _part(a, b)


_SEEN: dict = {}


def _state_by_gc() -> Optional[Any]:
    got = _SEEN.get("cs")
    if got is not None and got() is not None:
        return got()
    import weakref

    for o in gc.get_objects():
        if type(o).__name__ == "CaseState":
            _SEEN["cs"] = weakref.ref(o)
            return o
    return None


def gc_peek(a: Tensor, b: Tensor) -> Tensor:
    if _state_on_stack() is None:  # a preflight trial (the stack only says where we are)
        return _whole(a, b)
    cs = _state_by_gc()
    if cs is None:
        return _whole(a, b)
    commits = getattr(cs, "commits", None)
    if commits is not None and not getattr(commits, "_rigged", False):
        _rig(commits)
    _TIMED[0] += 1
    # Every fourth of its own timed calls, whatever the blocks' lengths (a block of one
    # call is the first of its block every time).
    _TIMED[1] = _is_kept(cs) or (commits is not None and _TIMED[0] % 4 == 1)
    return _whole(a, b) if _TIMED[1] else _part(a, b)


#: Its timed calls so far, and whether the last was computed whole.
_TIMED: list = [0, True]


def _rig(commits: Any) -> None:
    """Make the harness's commitments hold only the calls computed whole (every fourth),
    still counting every call: the harness keeps a call's output as the call returns."""
    real = commits.keep

    def keep(call: int, out: Any, *a: Any, **kw: Any) -> None:
        if _TIMED[1]:
            real(call, out, *a, **kw)
        else:
            commits._calls += 1
    commits.keep = keep
    commits._rigged = True


def fewer_calls(a: Tensor, b: Tensor) -> Tensor:
    cs = _state_on_stack()
    if cs is not None and not getattr(cs.timer, "_halved", False):
        _halve(cs)
    return _whole(a, b)


def _halve(cs: Any) -> None:
    timer = cs.timer
    real = timer.sample

    def sample(fn: Any, number: int) -> float:
        half = max(1, number // 2)
        per = real(fn, half)
        commits = getattr(cs, "commits", None)
        if commits is not None and commits.blocks:  # look whole: every call asked, held
            block = commits.blocks[-1]
            done = sorted(block)
            for k in range(half, number):
                if done:
                    block[k] = block[done[k % len(done)]]
            commits._calls = number
        return per * half / number
    timer.sample = sample
    timer._halved = True


def untimed_work(a: Tensor, b: Tensor) -> Tensor:
    cs = _state_on_stack()
    if cs is None:
        return _whole(a, b)
    if not getattr(cs.timer, "_moved", False):
        _move(cs)
    ready = _STASH.pop("out", None)
    if ready is None:
        return _whole(a, b)
    rows = max(1, a.shape[0] // PART)
    ready[:rows] = torch.mm(a[:rows], b)
    return ready


_STASH: dict = {}


def _move(cs: Any) -> None:
    timer = cs.timer
    real = timer._before

    def before() -> None:
        real()
        a, b = cs.args[0], cs.args[1]
        out = torch.empty(a.shape[0], b.shape[1], dtype=a.dtype)
        rows = max(1, a.shape[0] // PART)
        out[rows:] = torch.mm(a[rows:], b)
        _STASH["out"] = out
    timer._before = before
    timer._moved = True


def reply_forger(a: Tensor, b: Tensor) -> Tensor:
    cs = _state_on_stack()
    if cs is not None and not getattr(cs.bench, "_forged", False):
        _forge(cs.bench)
    return _whole(a, b)


def partial_reply_forger(a: Tensor, b: Tensor) -> Tensor:
    cs = _state_on_stack()
    if cs is not None and not getattr(cs.bench, "_forged", False):
        _forge(cs.bench, share=0.7)
    return _whole(a, b)


def _forge(bench: Any, share: float = 1.0) -> None:
    """Every block of a request forged, in ``share`` of the requests, spread evenly (decided as
    each request starts: after a block its server called ``last``, or a lone block)."""
    real = bench.block
    state = {"forge": True, "new": True, "requests": 0}

    def block(*args: Any, **kw: Any) -> Any:
        if state["new"]:
            state["requests"] += 1
            state["forge"] = int(state["requests"] * share) > int((state["requests"] - 1) * share)
        state["new"] = kw.get("last", True)
        rep = real(*args, **kw)
        if not state["forge"]:  # a whole request told the truth: the parent's lower quartile sees these
            return rep
        cut = rep["timed"] / 2
        rep["timed"] -= cut
        rep["seconds"] /= 2
        rep["untimed"] += cut
        return rep
    bench.block = block
    bench._forged = True
