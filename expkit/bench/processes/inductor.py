"""torch.compile inside a worker compiles in that worker's own process, never in a pool it leaves behind.

Inductor compiles generated kernels in a pool of subprocesses wherever it may use more than one
thread (``compile_threads``, from the cores a process may run on: every core of a GPU host). The
pool outlives the call that started it, and the worker's check for work left running after a
call (``checks.activity``, ``checks.children``) reads it as a candidate's own process doing
work outside the timed call: a false alarm against any honest ``torch.compile`` candidate. With
one compile thread Inductor compiles in the calling process, so the compilation ends with the
call that asked for it. That costs compile time in the preflight's first call, not run time.
"""

from __future__ import annotations

import os
import sys

#: Inductor's own setting, read when ``torch._inductor.config`` is first imported.
ENV = "TORCHINDUCTOR_COMPILE_THREADS"


def compile_in_process() -> None:
    """One compile thread for Inductor in this process and what it starts: the variable for a
    config not imported yet, the attribute for one the fork server already imported."""
    os.environ[ENV] = "1"
    config = sys.modules.get("torch._inductor.config")
    if config is not None:
        config.compile_threads = 1
