"""Where a run's wall time goes, request by request: one `expkit run`, with the parent's
time waiting on each worker request (``trial_inputs``, ``judge``, ``recheck``, ``block``...)
summed per side and request. A table on stdout; nothing is written.

    python benchmarks/request_times.py MANIFEST [OUT_DIR] [override ...]

The harness-cost benchmark (``harness_cost.py``) gives the stages; this says which
requests inside them cost the time. Each request is timed from its send to its reply, so
requests the parent sends through ``send``/``receive`` (``hello``, ``prepare``, a trial's
requests to both sides) count as well as those through ``request``. Where the parent sends
to both sides before it waits (``hello``, ``prepare``), their times overlap: the rows then
add up to more than the time spent waiting.
"""

from __future__ import annotations

import collections
import sys
import tempfile
import time
from typing import Any, Dict, Tuple

from expkit import api
from expkit.bench.sides import endpoint


def main(argv: list) -> int:
    if not argv:
        print(__doc__)
        return 2
    manifest = argv[0]
    out = argv[1] if len(argv) > 1 and "=" not in argv[1] else tempfile.mkdtemp(prefix="expkit-req-")
    overrides = [a for a in argv[1:] if "=" in a] or ["measure=quick"]
    spent: Dict[Tuple[str, str], float] = collections.defaultdict(float)
    count: Dict[Tuple[str, str], int] = collections.Counter()
    send, receive = endpoint.WorkerEndpoint.send, endpoint.WorkerEndpoint.receive
    pending: Dict[int, Tuple[str, float]] = {}

    def timed_send(self: Any, op: str, **payload: Any) -> Any:
        pending[id(self)] = (op, time.perf_counter())
        return send(self, op, **payload)

    def timed_receive(self: Any) -> Dict[str, Any]:
        try:
            return receive(self)
        finally:
            op, t = pending.pop(id(self), ("?", time.perf_counter()))
            spent[(self.role, op)] += time.perf_counter() - t
            count[(self.role, op)] += 1

    endpoint.WorkerEndpoint.send = timed_send  # type: ignore[method-assign]
    endpoint.WorkerEndpoint.receive = timed_receive  # type: ignore[method-assign]
    t0 = time.perf_counter()
    result = api.run(manifest, out=out, overrides=overrides)
    wall = time.perf_counter() - t0
    print(f"{manifest}: {getattr(result, 'verdict', result)}, {wall:.1f} s wall, "
          f"{sum(spent.values()):.1f} s in requests ({' '.join(overrides)})\n")
    print("| side | request | n | seconds |\n|---|---|---|---|")
    for (role, op), s in sorted(spent.items(), key=lambda kv: -kv[1]):
        print(f"| {role} | {op} | {count[(role, op)]} | {s:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
