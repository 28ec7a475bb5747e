"""The host allocator's thresholds, the same in both workers whatever the harness did before.

glibc's ``malloc`` adapts two thresholds to a process's history: a freed block served by
``mmap`` raises the size above which blocks are ``mmap``-ed, and with it the size of free
memory at the top of the heap that is given back to the system. Two processes running the
same code can therefore allocate an output of a few megabytes differently: one from the
heap it keeps, the other (we infer; fixing the thresholds removed the effect) from pages
the kernel faults in and zeroes on every call. The
baseline's worker frees large buffers while it judges and the candidate's does not, so
the difference fell on the candidate's side: on the project's 2-core CPU, the identity
solution of KernelBench's 81_conv_transposed_2D (sizes / 64, a 6.4 MB output a call)
measured against itself a geometric mean of 0.569x over 50 processes, 26 of them under
0.5x; with both thresholds fixed here, 0.916x over 30 processes, one under 0.5x
(evidence/README.md).

:func:`steady` fixes both in a worker before any code under test runs: blocks of
``MMAP_THRESHOLD`` (32 MiB, the most glibc's own adaptation reaches on 64-bit) and larger
are ``mmap``-ed, and free memory at the heap's top is kept up to ``TRIM_THRESHOLD``. Where
the C library is not glibc, nothing is changed and the result says so.
"""

from __future__ import annotations

import ctypes
from typing import Optional

MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 4 << 30
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3

#: What :func:`steady` did in this process (None until it ran): one line for the evidence.
STATE: Optional[str] = None


def steady() -> str:
    global STATE
    try:
        libc = ctypes.CDLL(None)
        ok = libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and libc.mallopt(_M_TRIM_THRESHOLD,
                                                                                  TRIM_THRESHOLD) == 1
    except (OSError, AttributeError):
        ok = False
    STATE = (f"glibc malloc: mmap threshold {MMAP_THRESHOLD >> 20} MiB, trim threshold {TRIM_THRESHOLD >> 30} GiB, "
             "fixed in both workers" if ok else "the C library's allocator as it is (no glibc mallopt)")
    return STATE
