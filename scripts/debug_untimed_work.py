"""Debug: the harness's untimed work a timed call, read in a real run's workers, for one snapshot of the code.

A script, not a test. ``python scripts/debug_untimed_work.py TREE MANIFEST OUT_DIR`` imports
expkit from TREE (a checkout, ``git archive REV | tar -x -C TREE``, or this repository),
wraps the defended CPU timer's ``sample`` (``timing.per_call.PerCallTimer``) so that each
block writes its untimed work a call (``last_untimed``: fresh inputs, thread counts, the
timer's own reads between calls) and its timed time a call, and runs ``expkit run MANIFEST
measure=quick measure.target_ci=0 measure.max_seconds=2`` in this process with the workers
forked from it. Prints per worker process (by pid; the lower of a pair is the baseline's)
the medians over its blocks of 64 calls or more. Run two trees in turn to compare them.
"""

from __future__ import annotations

import glob
import os
import statistics
import sys


def main(argv: list) -> int:
    if len(argv) < 3:
        print(__doc__)
        return 2
    tree, manifest, out = os.path.abspath(argv[0]), argv[1], argv[2]
    sys.path.insert(0, tree)
    os.makedirs(out, exist_ok=True)
    for old in glob.glob(os.path.join(out, "untimed-*.txt")):
        os.unlink(old)
    import expkit

    if not os.path.abspath(expkit.__file__).startswith(tree):
        raise SystemExit(f"expkit came from {expkit.__file__}, not {tree}")
    from expkit.timing.per_call import PerCallTimer

    inner = PerCallTimer.sample

    def sample(self, fn, number):
        per_call = inner(self, fn, number)
        with open(os.path.join(out, f"untimed-{os.getpid()}.txt"), "a") as f:
            f.write(f"{number} {self.last_untimed / number * 1e6:.3f} {per_call * 1e6:.3f}\n")
        return per_call

    PerCallTimer.sample = sample
    from expkit.cli.commands import main as cli

    cli(["run", manifest, "measure=quick", "measure.target_ci=0", "measure.max_seconds=2",
         "defences.start_method=fork", "--out", os.path.join(out, "run"), "--quiet"])
    print(f"<!-- {os.path.basename(manifest)}, expkit from {tree} -->")
    print("| process | blocks | untimed us a call, median | timed us a call, median |")
    print("|---|---|---|---|")
    for path in sorted(glob.glob(os.path.join(out, "untimed-*.txt"))):
        rows = [line.split() for line in open(path)]
        big = [r for r in rows if int(r[0]) >= 64]
        if big:
            print(f"| {os.path.basename(path)[8:-4]} | {len(big)} | {statistics.median(float(r[1]) for r in big):.2f} | "
                  f"{statistics.median(float(r[2]) for r in big):.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
