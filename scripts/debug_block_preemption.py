"""Debug: how often a timed block's calls lose their core to another thread, and what it costs.

A script, not a test. Runs ``expkit run MANIFEST [override ...]`` in this process with the
workers forked from it (``defences.start_method=fork``), after wrapping the CPU timer's
``sample`` (the timed span of one block: ``timing.per_call.PerCallTimer`` defended,
``timing.timer.PerfCounterTimer`` undefended) so that each block reads its thread's
involuntary context switches (``getrusage(RUSAGE_THREAD).ru_nivcsw``) and its moves between
CPUs (``se.nr_migrations`` in ``/proc/thread-self/sched``) before and after and writes them,
with the block's time, to a file per process. The wrapper is in place
before any worker takes its function snapshot, so the tamper check sees it as the
harness's own. Prints, per side, case and block size: the blocks, how many had an
involuntary switch inside the timed span, and the mean block time relative to the
median of those with and without one, and the same for a move to another CPU. Processes are named by pid: the first pair starts
the baseline's worker first, so the lower pid of a pair is the baseline's.

    python scripts/debug_block_preemption.py MANIFEST OUT_DIR [override ...]

Overrides default to a pinned ``quick`` run with ``default``'s blocks and one process.
"""

from __future__ import annotations

import collections
import glob
import os
import resource
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PINNED = ["measure=quick", "measure.max_seconds=2", "measure.target_ci=0", "measure.min_block_seconds=0.005",
          "measure.warmup_seconds=0.2", "measure.processes=1"]


def _migrations() -> int:
    """This thread's moves between CPUs so far (``se.nr_migrations``), or 0 where unknown."""
    try:
        with open("/proc/thread-self/sched") as f:
            for line in f:
                if line.startswith("se.nr_migrations"):
                    return int(line.split(":")[1])
    except OSError:
        pass
    return 0


def _wrap(cls: type, log_dir: str) -> None:
    inner = cls.sample

    def sample(self, fn, number):
        m0, r0 = _migrations(), resource.getrusage(resource.RUSAGE_THREAD).ru_nivcsw
        per_call = inner(self, fn, number)
        r1, m1 = resource.getrusage(resource.RUSAGE_THREAD).ru_nivcsw, _migrations()
        with open(os.path.join(log_dir, f"blocks-{os.getpid()}.txt"), "a") as f:
            f.write(f"{number} {per_call * number:.9f} {r1 - r0} {m1 - m0}\n")
        return per_call

    cls.sample = sample


def summarise(log_dir: str) -> None:
    by = collections.defaultdict(list)
    for path in glob.glob(os.path.join(log_dir, "blocks-*.txt")):
        for line in open(path):
            number, seconds, switches, moves = line.split()
            by[(Path(path).stem, int(number))].append((float(seconds), int(switches), int(moves)))
    print("| process | calls a block | blocks | with a switch in the timed span | mean time, with / without "
          "(rel. to median) | moved to another CPU in it | mean time, moved / not |")
    print("|---|---|---|---|---|---|---|")
    for (proc, number), rows in sorted(by.items()):
        if len(rows) < 10:  # calibration and warm-up blocks
            continue
        med = statistics.median(s for s, _, _ in rows)
        hit = [s / med for s, k, _ in rows if k]
        miss = [s / med for s, k, _ in rows if not k]
        moved = [s / med for s, _, m in rows if m]
        stayed = [s / med for s, _, m in rows if not m]
        mean = (lambda xs: f"{statistics.mean(xs):.3f}" if xs else "-")
        print(f"| {proc} | {number} | {len(rows)} | {len(hit)} ({100 * len(hit) / len(rows):.0f}%) | "
              f"{mean(hit)} / {mean(miss)} | {len(moved)} ({100 * len(moved) / len(rows):.0f}%) | "
              f"{mean(moved)} / {mean(stayed)} |")


def main(argv: list) -> int:
    if len(argv) < 2:
        print(__doc__)
        return 2
    manifest, out = argv[0], Path(argv[1])
    overrides = argv[2:] or PINNED
    log_dir = out / "blocks"
    log_dir.mkdir(parents=True, exist_ok=True)
    for old in log_dir.glob("blocks-*.txt"):
        old.unlink()
    sys.path.insert(0, str(REPO))
    from expkit.timing.per_call import PerCallTimer
    from expkit.timing.timer import PerfCounterTimer

    _wrap(PerCallTimer, str(log_dir))
    _wrap(PerfCounterTimer, str(log_dir))
    from expkit.cli.commands import main as cli

    cli(["run", manifest, *overrides, "defences.start_method=fork", "--out", str(out / "run"), "--quiet"])
    summarise(str(log_dir))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
