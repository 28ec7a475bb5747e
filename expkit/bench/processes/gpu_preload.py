"""A GPU worker's library start, done once where the workers fork from (a preload module).

Profiled inside the workers of the GPU example (``honest.yaml``, a Triton candidate) on an
H200 host (evidence/README.md):
each worker's first ``prepare`` spent 0.19-0.21 s importing cupti-python (its
``profiler_host`` extension) to open the kernel-time recorder, and each candidate worker's
first Triton launch about 0.40 s in ``triton_key()``, which hashes Triton's own
installation once a process. Five processes a side at ``quick`` paid that ten and five
times over. Imported by the process the workers fork from (the fork server, or the
parent: :func:`..sides.preload.preload_for` ``cuda``), this module does both there once,
and every worker inherits the imported module and Triton's cached key. Neither touches a
GPU: no CUDA context is created, so the process stays fit to fork from. Where a library is
missing, or its version lacks the cached function, it is skipped (:data:`WARMED` says why).
"""

from __future__ import annotations

import importlib
import time
from typing import Dict

#: What :func:`warm` did, by step: seconds taken, or why it was skipped.
WARMED: Dict[str, object] = {}


def warm() -> Dict[str, object]:
    """Import cupti-python and compute Triton's installation key in this process."""
    t0 = time.perf_counter()
    try:
        importlib.import_module("cupti.cupti")
        WARMED["cupti"] = round(time.perf_counter() - t0, 4)
    except Exception as e:  # not installed, or no CUPTI library: the recorder will say so itself
        WARMED["cupti"] = f"skipped: {type(e).__name__}"
    t0 = time.perf_counter()
    try:
        key = importlib.import_module("triton.runtime.cache").triton_key
    except Exception as e:
        WARMED["triton_key"] = f"skipped: {type(e).__name__}"
        return WARMED
    if not hasattr(key, "cache_info"):  # computed afresh on every call: nothing to inherit
        WARMED["triton_key"] = "skipped: not cached by this Triton"
        return WARMED
    try:
        key()
        WARMED["triton_key"] = round(time.perf_counter() - t0, 4)
    except Exception as e:
        WARMED["triton_key"] = f"skipped: {type(e).__name__}"
    return WARMED


warm()
