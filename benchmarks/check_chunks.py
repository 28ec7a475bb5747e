"""What an output check costs against one plain call, by chunk size and method.

Usage::

    python benchmarks/check_chunks.py [--elements 134217728] [--device cpu] [--repeat 3]

The oracles compare outputs in float64, a chunk of elements at a time
(``expkit/checks/chunks.py``). For one fp32 output of ``--elements`` elements this prints,
for each chunk size, the best of ``--repeat`` wall times of ``max |c - r|`` against a
float64 reference ``r``, two ways:

* ``copy-abs-max``: ``c`` copied to float64, subtracted, ``abs``, ``max`` (what
  ``checks/rounding.py`` did before this script was written);
* ``sub-aminmax``: the subtraction promotes ``c`` to float64 itself, and one ``aminmax``
  pass gives ``max |d|`` without a tensor of ``|d|`` (``chunks.max_abs_diff``);

and beside them one plain call of an elementwise op on the same input (``x * 2``), the
unit the harness's own costs are held against. The host allocator's thresholds are set
as in expkit's workers first (``bench/processes/allocator.steady``): without them glibc gives the
top of the heap back after each chunk of a few MiB and faults it in again for the next.
Timings are noisy on shared machines: compare the rows of one run.
"""

from __future__ import annotations

import argparse
import time
from typing import Callable, List

import torch

from expkit.bench.processes.allocator import steady
from expkit.checks.chunks import CHUNK, HOST_CHUNK, max_abs_diff


def best(fn: Callable[[], object], repeat: int, sync: Callable[[], None]) -> float:
    out = float("inf")
    for _ in range(repeat):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        out = min(out, time.perf_counter() - t0)
    return out


def main(argv: List[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--elements", type=int, default=1 << 27)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args(argv)
    allocator = steady()
    dev = torch.device(a.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(a.elements, generator=g, device=dev)
    cand = x + x
    ref = x.double() * 2

    def old(ch: int) -> None:
        for s in range(0, a.elements, ch):
            float((cand[s:s + ch].to(torch.float64) - ref[s:s + ch]).abs().max())

    def new(ch: int) -> None:
        for s in range(0, a.elements, ch):
            max_abs_diff(cand[s:s + ch], ref[s:s + ch])

    plain = best(lambda: x * 2, a.repeat, sync)
    print(f"device {dev}, {a.elements} fp32 elements ({a.elements * 4 / 2**30:.2f} GiB), torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads; shipped chunk here: "
          f"{HOST_CHUNK if dev.type == 'cpu' else CHUNK}; {allocator}")
    print(f"one plain call (x * 2): {plain * 1e3:.1f} ms\n")
    print("| chunk (elements) | copy-abs-max ms | sub-aminmax ms | copy-abs-max / plain | sub-aminmax / plain |")
    print("|---|---|---|---|---|")
    for ch in (1 << 16, 1 << 18, 1 << 20, 1 << 22, 1 << 24):
        o, n = best(lambda: old(ch), a.repeat, sync), best(lambda: new(ch), a.repeat, sync)
        print(f"| {ch} | {o * 1e3:.1f} | {n * 1e3:.1f} | {o / plain:.2f} | {n / plain:.2f} |")


if __name__ == "__main__":
    main()
