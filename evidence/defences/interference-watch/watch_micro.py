"""What the interference watch adds to a block request in the parent, in one process.

Usage: python watch_micro.py [N]

Forks two idle children (as the two workers wait for their requests), then times N rounds
of ``WorkerWatch.before`` and ``after`` (the parent's side of one block request: the other
worker's CPU clock twice, the timed side's scheduling policy and nice) and N of
``findings`` (once a case: a ``waitid`` per worker), and prints microseconds each, the
median of 5 repeats.
"""
import os
import statistics
import sys
import time

from expkit.checks.interference import WorkerWatch

n = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
kids = []
for _ in range(2):
    pid = os.fork()
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    kids.append(pid)
try:
    w = WorkerWatch({"baseline": kids[0], "candidate": kids[1]})
    per_request, per_case = [], []
    for _ in range(5):
        t0 = time.perf_counter()
        for i in range(n):
            side = "baseline" if i % 2 else "candidate"
            w.before(side, i)
            w.after(i + 1)
        per_request.append((time.perf_counter() - t0) / n * 1e6)
        t0 = time.perf_counter()
        for _ in range(n // 10):
            w.findings("c", {"baseline": "baseline", "candidate": "candidate"})
        per_case.append((time.perf_counter() - t0) / (n // 10) * 1e6)
    print("| part | us (median of 5) |")
    print("|---|---|")
    print(f"| a block request: before + after | {statistics.median(per_request):.2f} |")
    print(f"| a case's end: findings (a waitid per worker) | {statistics.median(per_case):.2f} |")
finally:
    for pid in kids:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
