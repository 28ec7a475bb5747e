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
from typing import Any, Callable, Dict, Tuple, TypeVar

from .operands import op_calls
from .trace import ENTRY_SPIN_CYCLES, HARNESS_JOIN, HARNESS_MARKER, Trace, parse_chrome_trace

T = TypeVar("T")


def record_chrome_trace(fn: Callable[[], T], *, cuda: bool) -> Tuple[T, Dict[str, Any]]:
    """Run ``fn`` once under ``torch.profiler`` and return its result and the raw
    chrome trace (exported to a temporary file, read back, file deleted), with the
    op calls and their operands (:func:`.operands.op_calls`) under ``expkit_calls``.

    With ``cuda`` the CUDA activity is recorded too, the harness-stream marker is
    launched first and the join marker right after ``fn`` returns (module docstring),
    and the device is synchronized before the profiler stops so that every kernel
    ``fn`` queued is in the trace."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    marker_buf = torch.empty(1, device="cuda") if cuda else None
    if cuda:
        torch.cuda.synchronize()
    # Shapes and allocations: what each op read (see .operands), for the whole-op-tree rule.
    with profile(activities=activities, record_shapes=True, profile_memory=True) as prof:
        if cuda:
            with record_function(HARNESS_MARKER):
                marker_buf.fill_(0.0)
                torch.cuda._sleep(ENTRY_SPIN_CYCLES)
        result = fn()
        if cuda:
            with record_function(HARNESS_JOIN):
                marker_buf.fill_(0.0)
            torch.cuda.synchronize()
    raw = exported(prof, cuda=cuda)
    calls = op_calls(prof, skip=(HARNESS_MARKER, HARNESS_JOIN))
    if calls is not None:
        raw["expkit_calls"] = calls
    return result, raw


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
