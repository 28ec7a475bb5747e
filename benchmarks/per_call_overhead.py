"""The harness's work around each timed call of a defended CPU side, in this process.

A defended side times each call on its own (``timing.per_call.PerCallTimer``) and, between
calls, makes the next call's inputs fresh and counts threads (``bench.sides.side.CaseState``);
that work is outside the timed spans but inside the run's wall time, and on an op of a few
microseconds it is a large part of what the defences cost. This builds the candidate's side
of MANIFEST's first case in this process (no workers, no parent), times ``--blocks`` blocks
of ``--calls`` calls after as many warm ones, and prints the medians per call of the timed
and the untimed work and per block of the checks; then ``FreshInputs.take()`` alone in a
hot loop on a GEMV's inputs (64x128 and 128) of each floating dtype. With ``--gib N``,
also the salt on one input of N GiB of each of float32 and bfloat16: what building the
fresh inputs adds to the process's resident memory (the tensor itself excluded) and the
time of one ``take()``, next to one plain call of a copy of that input (``clone()``, a
memory-bound op of its size).

    python benchmarks/per_call_overhead.py [MANIFEST] [--blocks 50] [--calls 300] [--gib N]

Default manifest: the suite's honest GEMV (``tests/adversarial/cpu/honest_gemv.yaml``).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import timeit
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ROOT / "tests/adversarial/cpu/honest_gemv.yaml"


def blocks(manifest: Path, n_blocks: int, calls: int) -> str:
    from expkit.bench.sides.side import CANDIDATE, SideBench
    from expkit.manifest.settings import Settings
    from expkit.manifest.spec import load

    lm = load(str(manifest))
    side = SideBench(lm, Settings(), "cpu", CANDIDATE)
    side.prepare(lm.manifest.cases[0].name, run_seed=1, salt_seed=2, input_sets=Settings().measure.input_sets)
    try:
        for _ in range(n_blocks):
            side.block(calls)
        got = [side.block(calls) for _ in range(n_blocks)]
    finally:
        side.close()
    med = lambda key, scale: statistics.median(r[key] for r in got) * scale  # noqa: E731
    return (f"| {manifest.name} | {lm.manifest.cases[0].name} | {n_blocks} x {calls} | "
            f"{med('timed', 1e6 / calls):.2f} | {med('untimed', 1e6 / calls):.2f} | {med('checks', 1e6):.0f} |")


def takes(n: int = 100_000) -> list:
    import torch

    from expkit.bench.defences.fresh import FreshInputs

    g = torch.Generator().manual_seed(0)
    rows = []
    for dt in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.complex64):
        sets = [(torch.randn(64, 128, generator=g).to(dt), torch.randn(128, generator=g).to(dt)) for _ in range(4)]
        fresh = FreshInputs(sets, "salt", random.Random(0))
        per = timeit.timeit(fresh.take, number=n) / n
        rows.append(f"| {str(dt).replace('torch.', '')} | {per * 1e6:.2f} |")
    return rows


def _rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def big(gib: float, n: int = 10_000) -> list:
    """The salt on one input of ``gib`` GiB per dtype: resident memory added by building
    the fresh inputs, a ``take()``, and one ``clone()`` of the input for scale."""
    import time

    import torch

    from expkit.bench.defences.fresh import FreshInputs

    rows = []
    for dt in (torch.float32, torch.bfloat16):
        x = torch.empty(int(gib * (1 << 30)) // torch.tensor([], dtype=dt).element_size(), dtype=dt).uniform_()
        r0 = _rss()
        fresh = FreshInputs([(x,)], "salt", random.Random(0))
        added = _rss() - r0
        per = timeit.timeit(fresh.take, number=n) / n
        t0 = time.perf_counter()
        y = x.clone()
        plain = time.perf_counter() - t0
        del y, fresh, x
        rows.append(f"| {str(dt).replace('torch.', '')} | {gib:g} | {added / (1 << 20):.1f} | {per * 1e6:.2f} | "
                    f"{plain * 1e3:.0f} |")
    return rows


def main(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("manifest", nargs="?", default=str(DEFAULT))
    ap.add_argument("--blocks", type=int, default=50)
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--gib", type=float, default=0.0, help="also the salt on one input of this many GiB")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from expkit.core.errors import ExpkitError

    try:
        table = blocks(Path(args.manifest), args.blocks, args.calls)
    except ExpkitError as e:
        print(f"per_call_overhead.py: {e}", file=sys.stderr)
        return 2
    print("| manifest | case | blocks x calls | timed us a call | untimed us a call | checks us a block |")
    print("|---|---|---|---|---|---|")
    print(table)
    print()
    print("| inputs' dtype | FreshInputs.take() (salt), us a call |")
    print("|---|---|")
    print("\n".join(takes()))
    if args.gib:
        print()
        print("| dtype | input GiB | resident memory the fresh inputs add, MiB | take(), us | one clone() of the input, ms |")
        print("|---|---|---|---|---|")
        print("\n".join(big(args.gib)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
