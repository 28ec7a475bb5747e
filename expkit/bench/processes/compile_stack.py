"""torch.compile's stack, imported once where a suite's manifest processes fork from (a preload module).

A ``torch.compile`` candidate compiles in its preflight; each fresh measurement process then
loads that compilation from the candidate's cache before its first timed call, and in doing so
imports Inductor's compiler and Triton's launcher itself: seconds a process, most of a warm
first call (evidence/README.md). Imported by the suite's fork server, this module imports them
there once, and every manifest process and worker forked from it inherits them.

Imported plainly, the stack would leave the server unfit to fork on a GPU host: one of its
modules asks ``torch.cuda.is_available()`` as it is imported (Inductor's benchmarking module,
in torch 2.11), and torch answers through the CUDA driver, or through NVML, either of which
starts a driver thread; a fork of that process could not use CUDA. So while the stack is
imported, ``torch.cuda.is_available`` answers from what the host shows without asking the
driver (:func:`gpu_visible`), and the real function is put back before this module's import
ends. Where a torch version touches CUDA some other way as the stack is imported, the workers'
own fork check (:mod:`.fork_safety`) sees the driver thread and they start from a fork server
instead: slower, as correct. A missing module only costs time; :data:`IMPORTED` says what was
imported, and how long it took.

Where no GPU is visible the stack is not imported: there it cost every suite server's start
about 1.5 s (evidence/README.md), paid by every suite whether or not a candidate compiles,
and a CPU candidate that compiles imports it in its own processes as it did before.
"""

from __future__ import annotations

import glob
import importlib
import os
import time
from contextlib import contextmanager
from typing import Callable, Dict, Iterator, Mapping, Sequence, Tuple

import torch

#: What a compiled candidate's first call imports even when its compilation is a cache hit.
STACK: Tuple[str, ...] = ("torch._inductor.compile_fx", "torch._inductor.runtime.triton_heuristics")

#: By module: seconds its import took, or why it was skipped.
IMPORTED: Dict[str, object] = {}


def gpu_visible(environ: Mapping[str, str] = os.environ,
                devices: Callable[[], Sequence[str]] = lambda: glob.glob("/dev/nvidia[0-9]*")) -> bool:
    """Whether torch would find a CUDA GPU here, answered without the driver: torch was built
    with CUDA, the host shows an NVIDIA device node, and ``CUDA_VISIBLE_DEVICES`` does not hide
    every device (empty, or a list starting with ``-1``)."""
    if not torch.backends.cuda.is_built():
        return False
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and (not visible.strip() or visible.strip().startswith("-1")):
        return False
    return bool(devices())


def _stand_in(answer: bool) -> Callable[[], bool]:
    def is_available() -> bool:
        return answer
    return is_available


@contextmanager
def availability_without_driver(answer: bool) -> Iterator[None]:
    """``torch.cuda.is_available`` answers ``answer`` inside the block; the real one is back after it."""
    real = torch.cuda.is_available
    torch.cuda.is_available = _stand_in(answer)
    try:
        yield
    finally:
        torch.cuda.is_available = real


def import_stack(stack: Sequence[str] = STACK) -> Dict[str, object]:
    """Import ``stack`` with CUDA's availability answered by :func:`gpu_visible`."""
    with availability_without_driver(gpu_visible()):
        for name in stack:
            t0 = time.perf_counter()
            try:
                importlib.import_module(name)
                IMPORTED[name] = round(time.perf_counter() - t0, 4)
            except ImportError as e:
                IMPORTED[name] = f"skipped: {type(e).__name__}"
    return IMPORTED


def import_stack_where_a_gpu_is_visible() -> Dict[str, object]:
    """:func:`import_stack` where :func:`gpu_visible`; elsewhere each module marked skipped."""
    if gpu_visible():
        return import_stack(STACK)
    IMPORTED.update({name: "skipped: no GPU visible" for name in STACK})
    return IMPORTED


import_stack_where_a_gpu_is_visible()
