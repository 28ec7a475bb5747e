"""Debug: the block requests of one run, batch by batch.

A script, not a test. Runs one manifest through the Python API, wrapping
``SessionTimer.sample_batch`` (each batch's blocks, ``B`` for the baseline's and ``C`` for
the candidate's; ``(cal)`` marks a calibration block) and ``case_sides.runs_by_side``
(the requests the batches became). Prints the verdict, the number of block requests and
the most common batches.

    python scripts/debug_batches.py [MANIFEST] [-- key=value ...]

Default: the README's example at ``measure=quick``.
"""

from __future__ import annotations

import collections
import sys
import tempfile
from typing import Any, List

from expkit import api
from expkit.bench import case_sides, envelope

DEFAULT = "manifests/examples/cpu/honest-win.yaml"


def main(argv: List[str]) -> int:
    manifest = argv[0] if argv and argv[0] != "--" else DEFAULT
    overrides = argv[argv.index("--") + 1:] if "--" in argv else []
    batches: collections.Counter = collections.Counter()
    requests = [0]
    calibration = [0]
    sample_batch, runs_by_side = envelope.SessionTimer.sample_batch, case_sides.runs_by_side

    def logged_batch(self: Any, plan: Any, judged: bool = True) -> Any:
        batches["".join("B" if fn.side == "baseline" else "C" for fn, _ in plan) + ("" if judged else "(cal)")] += 1
        calibration[0] += 0 if judged else len(plan)
        return sample_batch(self, plan, judged)

    def counted_runs(*a: Any, **k: Any) -> Any:
        out = runs_by_side(*a, **k)
        requests[0] += len(out)
        return out

    envelope.SessionTimer.sample_batch = logged_batch  # type: ignore[method-assign]
    case_sides.runs_by_side = counted_runs  # type: ignore[assignment]
    out = tempfile.mkdtemp(prefix="expkit-batches-")
    result = api.run(manifest, out=out, overrides=["measure=quick", *overrides])
    print(f"{manifest}: {result.verdict}, {requests[0]} block requests, {calibration[0]} of them calibration blocks")
    for batch, n in batches.most_common(12):
        print(f"{n:5d}  {batch}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
