"""Debug: what a kernel-timed block pays when another process used the GPU just before (GPU only).

A script for the device, not a test. ``scripts/debug_block_report.py`` found a side's worker
paying about 2 ms a block more than the same sides in one process in the CUDA timer's host
envelope (host time around a block less the lead spin), with the GPU's span of the block
the same, and only with the kernel timer (CUPTI's record on). In a defended run the two
sides' workers take turns on the GPU, each in its own CUDA context; in one process both
sides share one context. This times blocks of ``c = relu(a + b)`` on 64M floats (as the
GPU example) with expkit's CUDA timer, two "sides" taking turns block by block, in arms:

* ``one process``: both sides' timers and tensors in this process;
* ``two processes``: each side in its own child process (``multiprocessing`` spawn),
  this process passing the turn over pipes, as the defended parent does;
* ``two processes, kinds left on``: as above, with each recorder's callbacks registered
  and its activity kinds enabled once, never disabled between blocks (its ``stop`` still
  flushes); ``one process, kinds left on`` likewise, but there the second side's callbacks,
  registered last, receive both sides' records: the first side's blocks have none (its
  ``record ms`` reads 0) and only the second side's row is a reading;
* ``two processes, events``: as above with ``measure.timer=events``.

Per arm and side: the medians over blocks of the envelope less the span (ms), the
``sample`` call's wall (ms), the recorder's host time after the block (ms) and the rest
of the wall (the wall less the envelope and the recorder's time: the lead spin, the
recorder's start, reading the events and the records' attribution to calls), and the
recorder's ``start`` alone (registering its callbacks and enabling its kinds).

    python scripts/debug_context_alternation.py [--blocks 60] [--calls 8] [--rounds 2]
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple

ROOT = Path(__file__).resolve().parent.parent


class Side:
    """One side's tensors and timer (in whichever process holds it)."""

    def __init__(self, timer_kind: str, kinds_left_on: bool) -> None:
        import torch

        from expkit.manifest.settings import MeasureSettings
        from expkit.timing.factory import make_timer

        self.a, self.b = (torch.randn(1 << 26, device="cuda") for _ in range(2))
        self.c = torch.empty_like(self.a)
        self.timer: Any = make_timer("cuda", MeasureSettings(timer=timer_kind))
        rec = getattr(self.timer, "_recorder", None)
        self.start_s: List[float] = []
        if rec is not None:
            start = rec.start

            def timed_start() -> None:
                t = time.perf_counter()
                start()
                self.start_s.append(time.perf_counter() - t)
                if kinds_left_on:  # debug only: registered and enabled once, never disabled
                    rec._register = lambda *a: None
                    rec._enable = rec._disable = lambda kind: None
            rec.start = timed_start
        self.rows: List[Tuple[float, float, float, float]] = []

    def fn(self) -> None:
        import torch

        torch.add(self.a, self.b, out=self.c).relu_()

    def block(self, calls: int, keep: bool) -> None:
        t0 = time.perf_counter()
        self.timer.sample(self.fn, calls)
        wall = time.perf_counter() - t0
        rep = self.timer.last_block
        if keep and rep is not None:
            self.rows.append((rep.envelope_s - rep.span_s, wall, rep.record_s, wall - rep.envelope_s - rep.record_s))

    def summary(self) -> Dict[str, float]:
        if not self.rows:
            return {}
        return {"envelope - span ms": statistics.median(r[0] for r in self.rows) * 1e3,
                "sample wall ms": statistics.median(r[1] for r in self.rows) * 1e3,
                "record ms": statistics.median(r[2] for r in self.rows) * 1e3,
                "rest ms": statistics.median(r[3] for r in self.rows) * 1e3,
                "start ms": statistics.median(self.start_s[6:] or [float("nan")]) * 1e3}


def child(conn: Any, timer_kind: str, kinds_left_on: bool) -> None:
    side = Side(timer_kind, kinds_left_on)
    conn.send("ready")
    while True:
        msg = conn.recv()
        if msg == "stop":
            conn.send(side.summary())
            return
        side.block(int(msg[0]), bool(msg[1]))
        conn.send("done")


def one_process(blocks: int, calls: int, kinds_left_on: bool = False) -> List[Dict[str, float]]:
    sides = [Side("kernel", kinds_left_on), Side("kernel", kinds_left_on)]
    for i in range(2 * blocks + 6):
        sides[i % 2].block(calls, i >= 6)
    return [s.summary() for s in sides]


def two_processes(blocks: int, calls: int, timer_kind: str, kinds_left_on: bool) -> List[Dict[str, float]]:
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    ends = []
    procs = []
    for _ in range(2):
        mine, theirs = ctx.Pipe()
        p = ctx.Process(target=child, args=(theirs, timer_kind, kinds_left_on))
        p.start()
        ends.append(mine)
        procs.append(p)
    for e in ends:
        assert e.recv() == "ready"
    for i in range(2 * blocks + 6):
        e = ends[i % 2]
        e.send((calls, i >= 6))
        assert e.recv() == "done"
    out = []
    for e in ends:
        e.send("stop")
        out.append(e.recv())
    for p in procs:
        p.join(60)
    return out


def main(argv: List[str]) -> int:
    opts = {"--blocks": 60, "--calls": 8, "--rounds": 2}
    for k in opts:
        if k in argv:
            opts[k] = int(argv[argv.index(k) + 1])
    sys.path.insert(0, str(ROOT))
    b, n = opts["--blocks"], opts["--calls"]
    arms = [("two processes", lambda: two_processes(b, n, "kernel", False)),
            ("two processes, kinds left on", lambda: two_processes(b, n, "kernel", True)),
            ("two processes, events", lambda: two_processes(b, n, "events", False)),
            ("one process", lambda: one_process(b, n)),  # last: this process then holds a context
            ("one process, kinds left on", lambda: one_process(b, n, True))]
    print(f"{b} blocks a side, {n} calls a block, sides taking turns")
    print("| round | arm | side | envelope - span ms | sample wall ms | record ms | rest ms | recorder start ms |")
    print("|---|---|---|---|---|---|---|---|")
    for r in range(1, opts["--rounds"] + 1):
        for name, run in arms:
            for s, got in enumerate(run()):
                cells = " | ".join(f"{got.get(k, float('nan')):.2f}" for k in
                                   ("envelope - span ms", "sample wall ms", "record ms", "rest ms", "start ms"))
                print(f"| {r} | {name} | {s} | {cells} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
