"""One-off: the hot tamper check as a GPU block reads it (228 entries) and as a CPU block does
since d00811d (without the GPU timing's functions), warm in one process with the harness's
modules imported: medians of five rounds of 2,000 checks, us a check."""
import statistics
import time

from expkit.bench import side
from expkit.bench.tamper import FunctionSnapshot

side._harness_modules()  # noqa: SLF001 -- as a worker imports them before its snapshot
snap = FunctionSnapshot.take()


def per_check(gpu, n=2000):
    snap.changed(hot_only=True, gpu=gpu)
    t = time.perf_counter()
    for _ in range(n):
        snap.changed(hot_only=True, gpu=gpu)
    return (time.perf_counter() - t) / n * 1e6


sizes = {g: len(snap.__dict__["_hot" if g else "_hot_cpu"].names) + len(snap.__dict__["_hot" if g else "_hot_cpu"].slow)
         for g in (True, False) if per_check(g, 1) is not None}
print("| block | entries | us a check |")
print("|---|---|---|")
for g in (True, False):
    print(f"| {'GPU' if g else 'CPU'} | {sizes[g]} | {statistics.median(per_check(g) for _ in range(5)):.1f} |")
