"""The ``gpu-processes`` check: other processes with a compute context on the run's GPU.

Work the code under test hands to another process (a daemon it starts) escapes every timer
of the run's own processes; another job on the same GPU slows either side. NVML lists the
processes with a context on a GPU; /proc says when each started and whose it is.
"""

from __future__ import annotations

import os
import re
from typing import Callable, List, Optional, Protocol, Sequence, Tuple

import pynvml

from ..core.findings import WARNING, Finding
from .children import read_proc

GPU_PROCESSES = "gpu-processes"


class NvmlProcesses(Protocol):
    """``(pid, used bytes)`` of every process with a compute context on GPU ``index`` (tests fake it)."""

    def __call__(self, index: int) -> Sequence[Tuple[int, Optional[int]]]: ...


def nvml_compute_processes(index: int) -> Sequence[Tuple[int, Optional[int]]]:

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    return [(int(p.pid), getattr(p, "usedGpuMemory", None)) for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)]


def _start_ticks(pid: int, read: Callable[[str], Optional[bytes]]) -> Optional[int]:
    raw = read(f"/proc/{pid}/stat")
    if not raw:
        return None
    try:
        return int(raw.decode(errors="replace").rsplit(")", 1)[-1].split()[19])
    except (IndexError, ValueError):
        return None


def gpu_neighbours(index: int, run_pids: Sequence[int], since_pid: int, *, case: Optional[str] = None,
                   processes: Optional[NvmlProcesses] = None,
                   read: Callable[[str], Optional[bytes]] = read_proc) -> List[Finding]:
    """Processes with a compute context on GPU ``index`` that are not the run's (``run_pids``:
    the parent and both workers), for the lead to call around a block or a case.

    One that started after process ``since_pid`` (the run's first worker) and belongs to
    the same user was started during the run -- by the code under test, say, as a daemon
    that escapes the child count -- and makes the run ``invalid``; any other is a
    neighbour sharing the GPU (another job), reported as a warning, since its work can
    slow either side. Where NVML's process ids are not visible here (another PID
    namespace) nothing can be said of their origin: a warning too."""
    try:
        procs = (processes or nvml_compute_processes)(index)
    except Exception as e:  # no NVML: nothing to say
        return [Finding(GPU_PROCESSES, True, f"not checked: NVML gave no process list ({type(e).__name__})", case)]
    mine = set(run_pids)
    since = _start_ticks(since_pid, read)
    uid = os.getuid() if hasattr(os, "getuid") else None
    started, others = [], []
    for pid, used in procs:
        if pid in mine:
            continue
        mem = f"{used / 2**30:.2f} GiB" if used else "memory unknown"
        start = _start_ticks(pid, read)
        owner = None
        status = read(f"/proc/{pid}/status")
        if status:
            m = re.search(rb"^Uid:\s+(\d+)", status, re.M)
            owner = int(m.group(1)) if m else None
        if start is not None and since is not None and start >= since and owner == uid:
            started.append(f"pid {pid} ({mem})")
        else:
            others.append(f"pid {pid} ({mem})")
    out = []
    if started:
        out.append(Finding(GPU_PROCESSES, False, f"{len(started)} process(es) started during the run have a context on "
                           f"the GPU ({', '.join(started[:3])}): work the code under test hands to another process "
                           "escapes its timer", case))
    if others:
        out.append(Finding(GPU_PROCESSES, False, f"the GPU is shared with {len(others)} other process(es) "
                           f"({', '.join(others[:3])}): their work can slow either side", case, severity=WARNING))
    return out
