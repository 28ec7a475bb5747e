"""Debug: does another process's CUPTI slow this process's kernel-timed blocks? (GPU only)

A script for the device, not a test. ``scripts/debug_block_split.py`` found a side's worker
spending about 0.25 ms a call more in its sampling span than the same sides in one process,
with the kernel timer only (CUPTI's record), however the workers started. A defended run
has two such workers, each with its own CUPTI recorder; one process has one. This times
blocks of a memory-bound op (``c = relu(a + b)`` on 64M floats, as the GPU example) with
expkit's CUDA timer and CUPTI recorder in this process, in turn:

* ``alone``: nothing else on the GPU;
* ``idle``: beside a process that made a CUPTI recorder, started and stopped it once, and
  sleeps (as the worker that is not being timed);
* ``enabled``: beside a process whose recorder is started (its activity kinds enabled) and
  never stopped;
* ``forkserver-child`` and ``spawn-child`` (with ``--children``): the same blocks in a child
  process that this one started through ``multiprocessing`` (as expkit starts its workers),
  nothing else on the GPU; this process never touches CUDA before them.

Per arm: the median over blocks of the block's wall per call, the timer's figure per call,
the host's time queueing a call, and the recorder's host time a block (flush and parsing).

    python scripts/debug_cupti_neighbour.py [--blocks 40] [--calls 16] [--rounds 2] [--children]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

ROOT = Path(__file__).resolve().parent.parent


def neighbour(mode: str, seconds: float) -> None:
    """The other process: a CUPTI recorder left ``idle`` or ``enabled``, then sleep."""
    import torch

    from expkit.timing.cupti_recorder import CuptiRecorder

    torch.zeros(1, device="cuda")
    rec = CuptiRecorder()
    rec.start()
    torch.zeros(1, device="cuda").add_(1)
    if mode == "idle":
        rec.stop()
    torch.cuda.synchronize()
    print("ready", flush=True)
    time.sleep(seconds)


def blocks(n_blocks: int, calls: int) -> Dict[str, float]:
    import torch

    from expkit.manifest.settings import MeasureSettings
    from expkit.timing.factory import make_timer

    a, b = (torch.randn(1 << 26, device="cuda") for _ in range(2))
    c = torch.empty_like(a)

    def fn() -> None:
        torch.add(a, b, out=c).relu_()

    timer: Any = make_timer("cuda", MeasureSettings())
    for _ in range(3):
        timer.sample(fn, calls)
    walls: List[float] = []
    figures: List[float] = []
    hosts: List[float] = []
    queues: List[float] = []
    for _ in range(n_blocks):
        t0 = time.perf_counter()
        figures.append(timer.sample(fn, calls))
        walls.append((time.perf_counter() - t0) / calls)
        report = timer.last_block  # the CUDA timer's account of the block (cuda_timer.BlockReport)
        hosts.append(report.record_s)
        queues.append(report.queue_s / calls)
    return {"wall per call us": statistics.median(walls) * 1e6, "figure per call us": statistics.median(figures) * 1e6,
            "queue per call us": statistics.median(queues) * 1e6, "method": getattr(timer, "method", "?"),
            "record host ms a block": statistics.median(hosts) * 1e3}


def _in_child(method: str, n_blocks: int, calls: int) -> Dict[str, float]:
    import multiprocessing as mp

    ctx = mp.get_context(method)
    q = ctx.Queue()
    p = ctx.Process(target=_child, args=(q, n_blocks, calls))
    p.start()
    got = q.get(timeout=300)
    p.join(60)
    return got


def _child(q: Any, n_blocks: int, calls: int) -> None:
    q.put(blocks(n_blocks, calls))


def main(argv: List[str]) -> int:
    if argv[:1] == ["--neighbour"]:
        neighbour(argv[1], float(argv[2]))
        return 0
    opts = {"--blocks": 40, "--calls": 16, "--rounds": 2}
    for k in opts:
        if k in argv:
            opts[k] = int(argv[argv.index(k) + 1])
    sys.path.insert(0, str(ROOT))
    print("| round | arm | wall per call us | timer's figure per call us | queueing per call us | record host ms a block |")
    print("|---|---|---|---|---|---|")
    method = ""
    arms = ("alone", "idle", "enabled")
    if "--children" in argv:  # children first: this process has not touched CUDA yet
        arms = ("forkserver-child", "spawn-child", "alone")
    for r in range(1, opts["--rounds"] + 1):
        for arm in arms:
            other = None
            if arm.endswith("-child"):
                got = _in_child(arm.split("-")[0], opts["--blocks"], opts["--calls"])
                print(f"| {r} | {arm} | {got['wall per call us']:.1f} | {got['figure per call us']:.1f} | "
                      f"{got['queue per call us']:.1f} | {got['record host ms a block']:.2f} |", flush=True)
                continue
            if arm != "alone":
                other = subprocess.Popen([sys.executable, __file__, "--neighbour", arm, "120"], stdout=subprocess.PIPE,
                                         text=True, env=None)
                assert other.stdout is not None
                other.stdout.readline()  # "ready"
            try:
                got = blocks(opts["--blocks"], opts["--calls"])
            finally:
                if other is not None:
                    other.kill()
                    other.wait()
            method = str(got["method"])
            print(f"| {r} | {arm} | {got['wall per call us']:.1f} | {got['figure per call us']:.1f} | "
                  f"{got['queue per call us']:.1f} | {got['record host ms a block']:.2f} |", flush=True)
    print(f"\ntimer: {method}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
