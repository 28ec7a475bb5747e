"""Recording one call under ``torch.profiler`` as a chrome trace, parsed by :mod:`.trace`.

:func:`capture` is what the identity checks call: one call, not a loop. With CUDA, the
harness-stream markers (:data:`.trace.HARNESS_MARKER`, :data:`.trace.HARNESS_JOIN`) go
around the call, as :mod:`.trace`'s docstring explains. Split from :mod:`.trace` so that
module stays the parser: this one needs torch, that one only the trace's JSON.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from typing import Any, Callable, Dict, Tuple, TypeVar

from .operands import op_calls
from .trace import ENTRY_SPIN_CYCLES, HARNESS_JOIN, HARNESS_MARKER, Trace, parse_chrome_trace

T = TypeVar("T")


#: The fastest SM clock expkit expects (H100/H200 boost to 1980 MHz): a spin of N cycles
#: lasts at least N / this, the bound the entry spin is sized against.
MAX_SM_HZ = 2.1e9


def record_chrome_trace(fn: Callable[[], T], *, cuda: bool) -> Tuple[T, Dict[str, Any]]:
    """:func:`record_once`, with the entry spin long enough for the call it precedes.

    The stream check reads "started after the entry spin ended and ended before the join
    marker started" as ordered with the caller's stream. That holds only if the join
    marker was launched while the spin still ran: a side stream's kernels left unjoined
    then still run when it starts. If the host took longer than the spin between the two
    launches (a slow call under the profiler: on an H100 the side-stream cheat's matmul
    finished before the join was even launched, and passed), the recording is made again
    with a spin four times the host's time, at most twice."""
    cycles = ENTRY_SPIN_CYCLES
    for _ in range(3):
        result, raw, host_s = record_once(fn, cuda=cuda, spin_cycles=cycles)
        if not cuda or host_s < 0.5 * cycles / MAX_SM_HZ:
            break
        cycles = int(4 * host_s * MAX_SM_HZ)
    if cuda:
        raw["expkit_entry_spin"] = {"cycles": cycles, "host_seconds": host_s,
                                    "covered": host_s < 0.5 * cycles / MAX_SM_HZ}
    return result, raw


def record_once(fn: Callable[[], T], *, cuda: bool, spin_cycles: int = ENTRY_SPIN_CYCLES
                ) -> Tuple[T, Dict[str, Any], float]:
    """Run ``fn`` once under ``torch.profiler`` and return its result, the raw
    chrome trace (exported to a temporary file, read back, file deleted), with the
    op calls and their operands (:func:`.operands.op_calls`) under ``expkit_calls``.

    With ``cuda`` the CUDA activity is recorded too, the harness-stream marker is
    launched first and the join marker right after ``fn`` returns (module docstring),
    and the device is synchronized before the profiler stops so that every kernel
    ``fn`` queued is in the trace; and the host's seconds from the entry spin's launch to
    the join marker's (0 without ``cuda``)."""
    # lazy: torch.profiler's import is slow (bench/sides/preload.py); only a recorded call needs it
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    marker_buf = torch.empty(1, device="cuda") if cuda else None
    if cuda:
        torch.cuda.synchronize()
    # Shapes and allocations: what each op read (see .operands), for the whole-op-tree rule.
    t_spun = t_join = 0.0
    with profile(activities=activities, record_shapes=True, profile_memory=True) as prof:
        if cuda:
            with record_function(HARNESS_MARKER):
                marker_buf.fill_(0.0)
                torch.cuda._sleep(spin_cycles)
            t_spun = time.perf_counter()
        result = fn()
        if cuda:
            t_join = time.perf_counter()
            with record_function(HARNESS_JOIN):
                marker_buf.fill_(0.0)
            torch.cuda.synchronize()
    raw = exported(prof, cuda=cuda)
    calls = op_calls(prof, skip=(HARNESS_MARKER, HARNESS_JOIN))
    if calls is not None:
        raw["expkit_calls"] = calls
    return result, raw, t_join - t_spun


def exported(prof: Any, *, cuda: bool) -> Dict[str, Any]:
    """A finished profile as the chrome-trace dict kineto exports: the exported file keeps
    each kernel's grid and block, which the in-memory event API drops."""
    fd, name = tempfile.mkstemp(prefix="expkit-trace-", suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(name)
        with open(name, encoding="utf-8") as f:
            raw = json.load(f)
    finally:
        os.unlink(name)
    raw.pop("traceName", None)  # the deleted temp path
    raw["expkit_activities"] = ["cpu", "cuda"] if cuda else ["cpu"]
    return raw


def capture(fn: Callable[[], T], *, cuda: bool) -> Tuple[T, Trace]:
    """Run ``fn`` once under the profiler; return its result and the parsed trace.

    One call, not a loop: identity needs one clean record, and profiling perturbs
    timing, so these calls are never the measured ones."""
    result, raw = record_chrome_trace(fn, cuda=cuda)
    return result, parse_chrome_trace(raw)
