"""What the process the workers fork from imports before it forks them (:mod:`.endpoint`)."""

from __future__ import annotations

from typing import List

from .side import HARNESS_MODULES

#: Imported once by the fork server (or by the parent, where workers fork from it:
#: :func:`.endpoint.warm_up_forkserver`). ``torch._dynamo`` and ``torch.profiler`` are here
#: because the first profiled call of a process imports them (about 1.3 s of a 2-core
#: machine's time per worker otherwise, measured for :mod:`.endpoint`); importing them
#: starts no thread. So is ``side.HARNESS_MODULES``: a worker spent 0.04-0.10 s of its
#: start importing them itself (evidence/README.md).
PRELOAD = ["torch", "torch._dynamo", "torch.profiler", "torch._inductor.standalone_compile",
           "expkit.bench.sides.side", "expkit.bench.sides.serve", "expkit.bench.sides.endpoint", "expkit.manifest",
           *(f"expkit.{name}" for name in HARNESS_MODULES)]
#: And for a GPU run, cupti-python and Triton's installation key (:mod:`..processes.gpu_preload`).
GPU_PRELOAD = ["expkit.bench.processes.gpu_preload"]


def preload_for(device: str) -> List[str]:
    """The modules the process the workers fork from imports first, for ``device``."""
    return PRELOAD + GPU_PRELOAD if device == "cuda" else list(PRELOAD)
