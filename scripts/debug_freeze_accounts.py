"""Debug: the baseline's CPU account beside the freeze, in one process as a test session runs them.

A script for the device (or the CPU machine), not a test. On the H100 host the honest CPU
candidates' tests failed in a pytest session with the freeze on: the baseline's process
used 1.74 cores in a timed block at ``measure.cpu_threads=1`` (4 threads on a CPU). This
runs MANIFEST through ``run_manifest`` ROUNDS times each way (``defences.freeze`` true and
false, alternating) with the adversarial suite's fast settings, in this one process (whose
workers then come from the fork server, as in a test session), and prints each run's
verdict and failing checks. With ``EXPKIT_DEBUG_SETTLE=1`` (and
``defences.start_method=fork``, so that the workers inherit it) each worker also writes to
its stderr every ``settle`` before a block (seconds since the harness's wide work, whether
it had settled since, seconds waited) and every judged CPU account (cores, and each thread
that ran: its name and CPU ms); the baseline's lines are printed for a run that failed.

    python scripts/debug_freeze_accounts.py MANIFEST [ROUNDS] [k=v ...]
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FAST = ["measure=quick", "measure.max_seconds=0.3", "measure.min_seconds=0.1", "measure.warmup_seconds=0.02",
        "measure.min_rounds=4", "measure.bootstrap=200"]


def instrument() -> None:
    """Log each settle and each judged account to the worker's stderr (fd 2)."""
    from expkit.bench import side
    from expkit.checks import activity

    settle, judge = side.settle, activity.ResourceAccount.judge

    def logged_settle(reader, **kw):  # type: ignore[no-untyped-def]
        since = time.perf_counter() - activity._WIDE_END[0]
        settled = activity._SETTLED[0] > activity._WIDE_END[0]
        waited = settle(reader, **kw)
        os.write(2, f"dbg settle since_wide={since:.4f} settled={settled} waited={waited:.4f}\n".encode())
        return waited

    def comm(tid: int) -> str:
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                return f.read().strip()
        except OSError:
            return "?"

    def logged_judge(self, use, **kw):  # type: ignore[no-untyped-def]
        got = judge(self, use, **kw)
        threads = ", ".join(f"{comm(t)}:{c * 1e3:.1f}" for t, c in use.threads[:8])
        os.write(2, f"dbg judged cores={use.cores:.2f} wall_ms={use.wall_s * 1e3:.1f} bad={got is not None} "
                    f"threads=[{threads}]\n".encode())
        return got

    side.settle = logged_settle
    activity.ResourceAccount.judge = logged_judge


def main(argv: list) -> int:
    manifest = argv[0]
    rounds = int(argv[1]) if len(argv) > 1 and "=" not in argv[1] else 3
    extra = [a for a in argv[1:] if "=" in a]
    sys.path.insert(0, str(ROOT))
    import torch

    torch.ones(8).sum()  # a parent that ran a torch op: its workers come from the fork server
    from expkit.runner import run_manifest

    if os.environ.get("EXPKIT_DEBUG_SETTLE"):
        instrument()
    for r in range(rounds):
        for f in (("true", "false") if r % 2 == 0 else ("false", "true")):
            with tempfile.TemporaryDirectory() as out:
                res = run_manifest(manifest, FAST + extra + [f"defences.freeze={f}"], out_dir=out).result
                bad = [(c["check"], c["message"][:400]) for c in res["checks"] if not c["ok"]]
                print(r + 1, f"freeze={f}", res["verdict"], res["defences"].get("start_method"), bad, flush=True)
                err = Path(out) / "baseline-stderr.txt"
                if bad and err.exists():
                    print("".join(ln for ln in err.read_text().splitlines(True) if ln.startswith("dbg ")), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
