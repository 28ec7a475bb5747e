"""What the baseline's affinity guard costs a block request, in a hot loop (a lower bound: in
a worker, right after a block's calls, caches are cold).

Usage: python guard_micro.py   (from the repository's root; 2 torch threads, so that
OpenMP's pool has its threads)
"""
import time

import torch

from expkit.bench.affinity_guard import AffinityGuard
from expkit.bench.cores import current

torch.set_num_threads(2)
torch.ones(512, 512) @ torch.ones(512, 512)  # OpenMP's pool started
guard = AffinityGuard(2, current())
n = 20000
for label, fn in (("restore", guard.restore), ("narrowed", guard.narrowed)):
    for _ in range(500):
        fn()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    print(f"{label}: {(time.perf_counter() - t) / n * 1e6:.2f} us a call ({len(guard.narrowed()) or 'no'} thread narrowed)")
import os  # noqa: E402

print("threads in this process:", len(os.listdir("/proc/self/task")), "guard on:", guard.on)
