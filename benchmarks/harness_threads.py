"""What the harness's own oracle work costs by thread count and output size.

A script, not a test. The judge runs its digests and oracles under
``preflight.harness_threads`` (the timed blocks' one thread lifted for the harness's own
work). This times one output check as a recheck makes it -- the default rounding oracle
with its float64 reference, on an ``n x n`` matmul output of inner size 256, the candidate's
output summed in another order -- with torch on 1, 2, 4, ... threads up to the host's
cores, each check after ``--idle-ms`` on one thread (as between a worker's rechecks: the
pool asleep), the change of thread count timed with it (the median of ``--repeats``).
On a many-core host a small output checked on every core pays each op's wake-up of the
whole pool; a large one gains from them. The table says where the crossing lies.

    python benchmarks/harness_threads.py [--sizes 64 128 256 512 1024 2048] [--repeats 5] [--idle-ms 50]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    import torch

    from expkit.checks import oracles, rounding
    from expkit.manifest.spec import Oracle

    p = argparse.ArgumentParser()
    p.add_argument("--sizes", type=int, nargs="*", default=[64, 128, 256, 512, 1024, 2048])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--idle-ms", type=float, default=50.0)
    a = p.parse_args()
    cores = os.cpu_count() or 1
    counts = sorted({1, 2, 4, 8, cores} & set(range(1, cores + 1)))
    print(f"{cores} CPUs, torch {torch.__version__}, load average {os.getloadavg()[0]:.2f}\n")
    print("| output n x n | elements | " + " | ".join(f"{t} thread{'s' if t > 1 else ''} (ms)" for t in counts) + " |")
    print("|---|---|" + "---|" * len(counts))
    for n in a.sizes:
        g = torch.Generator().manual_seed(n)
        x, w = torch.randn(n, 256, generator=g), torch.randn(256, n, generator=g)
        exp, act = x @ w, torch.einsum("mk,kn->mn", x, w)
        row = []
        for t in counts:
            times = []
            for _ in range(a.repeats + 1):
                # As in a worker: timed blocks on one thread, the pool idle long enough to sleep,
                # then the check on t threads (the change of count and the wake-up timed with it).
                torch.set_num_threads(1)
                time.sleep(a.idle_ms / 1e3)
                t0 = time.perf_counter()
                torch.set_num_threads(t)
                ladder = rounding.ReferenceLadder(torch.mm, (x, w))
                oracles.check_outputs(Oracle(), exp, act, case="c", reference64=ladder, inputs=(x, w))
                times.append(time.perf_counter() - t0)
            row.append(statistics.median(times[1:]) * 1e3)
        print(f"| {n} | {n * n:,} | " + " | ".join(f"{v:.2f}" for v in row) + " |")
    torch.set_num_threads(1)


if __name__ == "__main__":
    main()
