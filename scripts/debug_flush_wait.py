"""Debug: the first CUDA call after a forced CUPTI flush, in one process, phase by phase (GPU).

A script for the device, not a test. In the GPU example's defended runs
(``evidence/harness-cost/gpu-request-wait``) the first CUDA driver call after each timed block
(torch's ``current_device``, wherever it came: the request ledger or the next block)
waited 0.6-0.9 ms in the workers that had served the preflight (as a rule) and 3.4-5.1 ms
in later replicates' workers. This reproduces a wait of the kind without the bench (not its
trigger there: priming the bench's recorder as below did not help): the recorder's cycle, the
kinds enabled once (``keep_enabled``), then per block a ``start``, ``calls`` launches of an
add on ``MiB`` of float32, a synchronise, a ``stop`` (the forced flush), and the next
``torch.cuda.current_device()`` timed. Phases run in turn in one fresh process, each after
what might change the wait: ``fresh`` and ``again`` (nothing before), ``after-float64`` (a
float64 reduction over the inputs, as a judge's reference), ``after-cuda-profiler`` and
``after-cpu-cuda-profiler`` (a torch.profiler session over the same calls, CUDA's activity
only, then the CPU's too), ``after-empty-cache``. Prints the median and the
quartiles of the wait per phase, in microseconds.

    python scripts/debug_flush_wait.py [--blocks 40] [--calls 16] [--mib 256] [--steps fresh,after-item,...]

(``--steps``: the phases to run, in order; also ``after-alloc``, ``after-item``, ``after-sum``,
``after-double``: one part of the float64 step each; ``after-tiny``: a one-element fill;
``--tiny-at-start``: before the first phase, one recorder cycle around such a fill alone.)
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Callable, Dict, List


def _arg(argv: List[str], name: str, default: int) -> int:
    return int(argv[argv.index(name) + 1]) if name in argv else default


def main(argv: List[str]) -> int:
    import torch

    from expkit.timing.cupti_recorder import CuptiRecorder

    blocks, calls, mib = _arg(argv, "--blocks", 40), _arg(argv, "--calls", 16), _arg(argv, "--mib", 256)
    n = mib * (1 << 20) // 4
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    torch.cuda.synchronize()
    rec = CuptiRecorder(keep_enabled=True)

    def phase() -> List[float]:
        waits = []
        for b in range(blocks):
            rec.start()
            for i in range(calls):
                rec.push(i + 2)
                torch.add(x, y)
                rec.pop()
            torch.cuda.synchronize()
            rec.stop()
            t0 = time.perf_counter()
            torch.cuda.current_device()
            waits.append((time.perf_counter() - t0) * 1e6)
        return waits

    def profiler(*kinds: str) -> Callable[[], None]:
        def run() -> None:
            from torch.profiler import ProfilerActivity, profile

            with profile(activities=[getattr(ProfilerActivity, k) for k in kinds]):
                for _ in range(calls):
                    torch.add(x, y)
                torch.cuda.synchronize()

        return run

    def float64() -> None:
        (x.double() * y.double()).sum().item()

    def alloc() -> None:  # as much as float64() allocates, nothing computed
        z = torch.empty(3 * 2 * n, dtype=torch.float32, device="cuda")
        del z

    def to_host() -> None:
        x[0].item()

    def reduce() -> None:
        x.sum()
        torch.cuda.synchronize()

    def tiny() -> None:  # one small fill, outside any tag
        torch.zeros(1, device="cuda")
        torch.cuda.synchronize()

    def double() -> None:
        x.double()
        torch.cuda.synchronize()

    steps: Dict[str, Callable[[], None]] = {"fresh": lambda: None, "again": lambda: None,
                                            "after-float64": float64,
                                            "after-cuda-profiler": profiler("CUDA"),
                                            "after-cpu-cuda-profiler": profiler("CPU", "CUDA"),
                                            "after-empty-cache": torch.cuda.empty_cache,
                                            "after-alloc": alloc, "after-item": to_host, "after-sum": reduce,
                                            "after-double": double, "after-tiny": tiny}
    if "--tiny-at-start" in argv:  # the kinds enabled, one small untagged fill, a flush: before any phase
        rec.start()
        tiny()
        rec.stop()
    if "--steps" in argv:  # phases in this order: each in a fresh process tells one step's effect
        steps = {k: steps[k] for k in argv[argv.index("--steps") + 1].split(",")}
    print("| phase | blocks | median us | quartiles us |")
    print("|---|---|---|---|")
    for name, before in steps.items():
        before()
        w = phase()
        q = statistics.quantiles(w, n=4)
        print(f"| {name} | {len(w)} | {statistics.median(w):.0f} | {q[0]:.0f}-{q[2]:.0f} |", flush=True)
    rec.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
