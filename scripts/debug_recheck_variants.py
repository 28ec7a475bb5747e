"""Debug: the ``expkit`` command with the recheck changed, to find what disturbs the blocks after one.

A script, not a test. ``python scripts/debug_recheck_variants.py run MANIFEST ...`` is
``expkit run MANIFEST ...`` in this process, with the workers forked from it
(``defences.start_method=fork`` is added), after one change picked by the environment
variable ``EXPKIT_DEBUG_RECHECK``, made before any worker takes its function snapshot:

* ``skip``: the baseline's worker opens the picked call's outputs and closes them, and runs
  neither the baseline nor the oracles (the export, the release and the hand-overs stay);
* ``offcore``: the recheck runs with the baseline worker's thread on the host's other
  cores (those outside the timed blocks' cores), then back;
* ``warm``: after each recheck the candidate's worker makes one untimed call on its next
  inputs (as a timed call's, outside any timed span);
* unset or anything else: no change.

Used with ``benchmarks/recheck_aftermath.py --via scripts/debug_recheck_variants.py``;
a run made this way proves nothing about a claim (its recheck may check nothing).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _patch(mode: str) -> None:
    from expkit.bench import judge, side

    if mode == "skip":
        def recheck(self, case, kept, args):
            self.importer.open(kept["outputs"])
            self.importer.close()
            return []

        judge.Judge.recheck = recheck
    elif mode == "offcore":
        inner = judge.Judge.recheck

        def recheck(self, case, kept, args):
            cur = os.sched_getaffinity(0)
            other = set(range(os.cpu_count() or 1)) - cur
            if other:
                os.sched_setaffinity(0, other)
            try:
                return inner(self, case, kept, args)
            finally:
                os.sched_setaffinity(0, cur)

        judge.Judge.recheck = recheck
    elif mode == "warm":
        inner_release = side.SideBench.release

        def release(self):
            inner_release(self)
            cs = self.case
            if cs is not None:  # an untimed call: nothing of it committed
                committing, cs.committing = cs.committing, False
                cs.before()
                cs.call()
                cs.after()
                cs.committing = committing

        side.SideBench.release = release


def main(argv: list) -> int:
    sys.path.insert(0, str(REPO))
    _patch(os.environ.get("EXPKIT_DEBUG_RECHECK", ""))
    from expkit.cli.commands import main as cli

    args = list(argv)
    args.insert(min(2, len(args)), "defences.start_method=fork")  # after "run MANIFEST", before any flag
    return int(cli(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
