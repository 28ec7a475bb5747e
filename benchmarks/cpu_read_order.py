"""Whether the order of a timed block's clock reads makes CPU time appear that no thread spent.

Usage::

    python benchmarks/cpu_read_order.py [--spans 2000] [--block-us 200] [--repeats 2]

A second thread hashes a 1 MiB buffer without pause (``hashlib`` releases the GIL, so it
runs on a core of its own) while the main thread times ``--spans`` blocks of
``--block-us`` each, and reads its clocks around every block two ways:

- ``process first``: wall, the process's CPU clock, then every thread's (the order
  :meth:`expkit.checks.activity.ResourceAccount.begin` used before 2026-11-27);
- ``threads first``: wall, every thread's clock, then the process's (the order it uses now,
  the same as at a block's end).

No thread ends, so the process's CPU time beyond its live threads' (``unexplained``)
should be zero, and no span can use more cores than the machine has. The table gives
its median, 99th percentile and largest value, and the cores of the spans.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import threading
import time

from expkit.checks.activity import ProcCpuReader


def span(reader: ProcCpuReader, threads_first: bool, block_s: float, buf: bytes):
    w0 = reader.wall_ns()
    if threads_first:
        t0 = reader.thread_cpu_ns()
        c0 = reader.process_cpu_ns()
    else:
        c0 = reader.process_cpu_ns()
        t0 = reader.thread_cpu_ns()
    until = time.perf_counter() + block_s
    while time.perf_counter() < until:
        hashlib.sha256(buf).digest()
    t1 = reader.thread_cpu_ns()
    c1, w1 = reader.process_cpu_ns(), reader.wall_ns()
    live = sum(t1[t] - t0.get(t, 0) for t in t1)
    return (c1 - c0 - live) / 1e3, (c1 - c0) / (w1 - w0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--spans", type=int, default=2000)
    ap.add_argument("--block-us", type=float, default=200.0)
    ap.add_argument("--repeats", type=int, default=2)
    a = ap.parse_args()
    reader, big, small = ProcCpuReader(), b"x" * (1 << 20), b"x" * 4096
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            hashlib.sha256(big).digest()

    th = threading.Thread(target=spin, daemon=True)
    th.start()
    print(f"{os.cpu_count()} cores; {a.spans} spans of {a.block_us:g} us, a second thread busy throughout\n")
    print("| order | unexplained p50 (us) | p99 (us) | max (us) | cores p50 | p99 | max |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    try:
        for _ in range(a.repeats):
            for threads_first in (False, True):
                got = [span(reader, threads_first, a.block_us / 1e6, small) for _ in range(a.spans)]
                extra, cores = sorted(g[0] for g in got), sorted(g[1] for g in got)
                q = lambda xs, p: xs[min(len(xs) - 1, int(p * len(xs)))]  # noqa: E731
                print(f"| {'threads first' if threads_first else 'process first'} | {q(extra, .5):.1f} | "
                      f"{q(extra, .99):.1f} | {extra[-1]:.1f} | {q(cores, .5):.2f} | {q(cores, .99):.2f} | {cores[-1]:.2f} |")
    finally:
        stop.set()
        th.join()


if __name__ == "__main__":
    main()
