"""How many threads a candidate keeps runnable, three ways, on a quiet and a busy host.

Usage::

    python benchmarks/share_estimators.py [--busy 0,1,2] [--blocks 40] [--block-ms 15]

For each of a few candidates of the adversarial suite (honest ones that hand work to a pool,
cheats that compute on two threads), with ``--busy`` other processes spinning on a core each,
times ``--blocks`` blocks of calls (each about ``--block-ms`` long), one thread allowed
(``torch.set_num_threads(1)``), reading each thread's CPU clock and its wait for a CPU
(``/proc/self/task/TID/schedstat``) around each block, and prints:

- ``cores``: the process's CPU time over the blocks' wall time (the CPU-time rule's figure);
- ``per-thread``: each thread's CPU time plus its own wait for a CPU, summed, over the wall
  time: the average number of runnable threads (threads that started and ended inside a
  block: their CPU time, with the timing thread's wait per CPU second where that thread was
  runnable for half the block or more);
- ``capped``: the same with each thread's wait counted up to the wait per CPU second of the
  thread that spent the most CPU time in the block (a thread woken many times for a moment
  of work waits after each wake-up);
- ``host``: ``cores`` x (1 + the host's wait per CPU second over the blocks), the host's
  figure from ``/proc/schedstat`` over the CPUs this process may use: the threads runnable
  if each waited as long per CPU second as the host's average;
- ``busiest``: ``cores`` x (1 + the wait per CPU second of the thread with the most CPU time);
- the timing thread's wait share over the blocks, and the speedup of the candidate's blocks
  over one thread doing the same work (``torch.mm`` / ``torch.mv`` in the calling thread,
  timed in alternation with it): what the candidate gained.

The question it answers: whether any of these figures stays near one for honest candidates
that hand work over and near two for cheats on two threads, whatever the load. It was the
evidence for not judging a count of runnable threads (``evidence/defences/busy-host-share-rule/README.md``).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Dict, List, Tuple

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks"), str(ROOT / "tests" / "adversarial" / "cpu")]

import torch  # noqa: E402

from expkit.checks.activity import ProcCpuReader  # noqa: E402
from under_load import spinning  # noqa: E402


def host_sched() -> Tuple[int, int]:
    """(CPU ns, run-queue wait ns) summed over the CPUs this process may run on."""
    mine = os.sched_getaffinity(0)
    cpu = delay = 0
    if not os.path.exists("/proc/schedstat"):  # not every kernel (or sandbox) has it: the column reads as cores
        return 0, 0
    with open("/proc/schedstat") as f:
        for line in f:
            if line.startswith("cpu"):
                parts = line.split()
                if int(parts[0][3:]) in mine:
                    cpu += int(parts[7])
                    delay += int(parts[8])
    return cpu, delay


def candidates() -> Dict[str, Tuple[Callable, Callable, tuple]]:
    import adv_general as G
    import adv_honest as H
    import adv_honest_more as M

    g = torch.Generator().manual_seed(0)
    mat = (torch.randn(1024, 1024, generator=g), torch.randn(1024, 1024, generator=g))
    small = (torch.randn(64, 128, generator=g), torch.randn(128, generator=g))
    big = (torch.randn(4096, 4096, generator=g), torch.randn(4096, generator=g))
    return {
        "one thread (mm)": (torch.mm, torch.mm, mat),
        "honest_own_pool": (M.own_pool, torch.mm, mat),
        "honest_threaded": (H.gemv_threaded, torch.mv, small),
        "honest_threaded, 4096 rows": (H.gemv_threaded, torch.mv, big),
        "thread_per_call_cores": (G.thread_per_call_cores, torch.mm, mat),
        "pool_cores": (G.pool_cores, torch.mm, mat),
    }


def waits(tids) -> Dict[int, int]:
    """Each thread's wait for a CPU so far (ns; ``schedstat``'s second field)."""
    out = {}
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                out[tid] = int(f.read().split()[1])
        except (OSError, IndexError, ValueError):
            pass
    return out


def runnable(cpu: Dict[int, float], wait: Dict[int, float], wall: float, gone: float, timer: int,
             cap: bool) -> Dict[int, float]:
    """Seconds each thread was runnable (CPU plus wait). ``cap``: each wait counted up to the
    wait per CPU second of the thread with the most CPU time. The threads that ended in the
    blocks (``gone`` CPU seconds) count with the timing thread's wait per CPU second where
    it was runnable for half the wall time or more, else as CPU time alone."""
    top = max(cpu, key=cpu.__getitem__, default=None)
    rho = wait.get(top, 0.0) / cpu[top] if top is not None and cpu[top] > 0 else 0.0
    out = {t: c + (min(wait.get(t, 0.0), c * rho) if cap else wait.get(t, 0.0)) for t, c in cpu.items()}
    c, w = cpu.get(timer, 0.0), wait.get(timer, 0.0)
    out[0] = gone * (1 + w / c) if c > 0 and c + w >= 0.5 * wall else gone
    return out


def blocks(fn: Callable, ref: Callable, args: tuple, n: int, block_s: float) -> Dict[str, float]:
    reader = ProcCpuReader()
    me = threading.get_native_id()
    for _ in range(3):
        fn(*args), ref(*args)
    t = time.perf_counter()
    fn(*args)
    calls = max(1, int(block_s / max(time.perf_counter() - t, 1e-6)))
    wall = 0.0
    host_cpu = host_wait = 0
    fn_s = ref_s = 0.0
    cpu: Dict[int, float] = {}
    wait: Dict[int, float] = {}
    raw = capped = gone = 0.0
    for _ in range(n):
        h0 = host_sched()
        t0 = reader.thread_cpu_ns()
        q0 = waits(t0)
        p0, w0 = reader.process_cpu_ns(), time.perf_counter()
        for _ in range(calls):
            fn(*args)
        w1 = time.perf_counter()
        t1 = reader.thread_cpu_ns()
        q1 = waits(t1)
        p1 = reader.process_cpu_ns()
        h1 = host_sched()
        fn_s += w1 - w0
        host_cpu += h1[0] - h0[0]
        host_wait += h1[1] - h0[1]
        bc = {tid: (v - t0.get(tid, 0)) / 1e9 for tid, v in t1.items() if v - t0.get(tid, 0) > 0}
        bw = {tid: (v - q0.get(tid, 0)) / 1e9 for tid, v in q1.items() if tid in q0 or tid not in t0}
        bg = max(0.0, (p1 - p0) / 1e9 - sum(bc.values()))
        raw += sum(runnable(bc, bw, w1 - w0, bg, me, False).values())
        capped += sum(runnable(bc, bw, w1 - w0, bg, me, True).values())
        gone += bg
        wall += w1 - w0
        for into, what in ((cpu, bc), (wait, bw)):
            for tid, v in what.items():
                into[tid] = into.get(tid, 0.0) + v
        t0r = time.perf_counter()
        for _ in range(calls):
            ref(*args)
        ref_s += time.perf_counter() - t0r
    cpu_all = (sum(cpu.values()) + gone) / wall
    rho_host = host_wait / host_cpu if host_cpu else 0.0
    busiest = max(cpu.items(), key=lambda x: x[1], default=(0, 0.0))
    rho_b = wait.get(busiest[0], 0.0) / busiest[1] if busiest[1] > 0 else 0.0
    ran = sum(1 for c in cpu.values() if c >= 0.1 * wall) + math.ceil(gone / wall - 1e-9) * (gone >= 0.1 * wall)
    return {"cores": cpu_all, "per-thread": raw / wall, "capped": capped / wall, "host": cpu_all * (1 + rho_host),
            "busiest": cpu_all * (1 + rho_b), "wait": wait.get(me, 0.0) / wall, "gain": ref_s / fn_s if fn_s else 0.0,
            "ran": ran}


def main(argv: List[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--busy", default="0,1,2")
    ap.add_argument("--blocks", type=int, default=40)
    ap.add_argument("--block-ms", type=float, default=15.0)
    ap.add_argument("--only", default="", help="comma-separated candidate names (default: all)")
    ap.add_argument("--sessions", action="store_true",
                    help="start each busy process in a session of its own (setsid), as another user's job runs")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    print(f"{os.cpu_count()} CPUs, {len(os.sched_getaffinity(0))} in this process's affinity; torch {torch.__version__}; "
          f"{a.blocks} blocks of about {a.block_ms:g} ms each; busy processes "
          f"{'each in a session of its own' if a.sessions else 'in this session'}\n")
    print("| busy | candidate | cores | per-thread | capped | host | busiest | ran | timing thread's wait | gain over one thread |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for busy in [int(x) for x in a.busy.split(",")]:
        with spinning(busy, sessions=a.sessions):
            time.sleep(0.3)
            for name, (fn, ref, args) in candidates().items():
                if a.only and name not in a.only.split(","):
                    continue
                r = blocks(fn, ref, args, a.blocks, a.block_ms / 1e3)
                print(f"| {busy} | {name} | {r['cores']:.2f} | {r['per-thread']:.2f} | {r['capped']:.2f} | {r['host']:.2f} | "
                      f"{r['busiest']:.2f} | {r['ran']} | {r['wait']:.0%} | {r['gain']:.2f}x |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
