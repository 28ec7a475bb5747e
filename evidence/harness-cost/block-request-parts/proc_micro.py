"""One-off: the ledger's two /proc/self readings, opened each time (the code before 77b329f)
against a kept descriptor (after), warm, in one process: medians of 5 rounds of 3,000 calls
after 100 discarded, us a call. Run from the repository root with its venv's python."""
import os
import statistics
import time

from expkit.bench.memory import host_peak_reset, host_rss


def opened_rss():
    with open("/proc/self/status", "rb") as f:
        return f.read()


def opened_reset():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def per_call(fn, n=3000):
    for _ in range(100):
        fn()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n * 1e6


print("| reading | opened each time, us | kept descriptor (expkit now), us |")
print("|---|---|---|")
for name, old, new in (("/proc/self/status", opened_rss, host_rss), ("clear_refs 5", opened_reset, host_peak_reset)):
    a = statistics.median(per_call(old) for _ in range(5))
    b = statistics.median(per_call(new) for _ in range(5))
    print(f"| {name} | {a:.1f} | {b:.1f} |")
print(f"({os.cpu_count()} cores)")
