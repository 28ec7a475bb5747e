"""The adversarial suite's honest candidates (or its cheats) on a busy host: what each comes out as.

Usage::

    python benchmarks/under_load.py [--busy 2] [--bad | --prevented] [--only NAME,...] [--repeat N] [-- override ...]

Starts ``--busy`` processes that spin on a core each (``python3 -c "while True: pass"``),
then runs every manifest of ``HONEST`` (or, with ``--bad``, of ``BAD`` and of the cheats that
take more cores, ``AWAITING_CALL_SITE``; with ``--prevented``, of the cheats the harness undoes
rather than catches, ``PREVENTED``, which must simply not be ``supported``) in
``tests/adversarial/test_adversarial.py`` ``--repeat`` times (once by default), through the suite's own ``run()`` (its quick
settings and per-manifest overrides, plus any given after ``--``), and prints one row each:
the verdict, the defence checks that raised an alarm (for an honest candidate: a false
alarm), for a cheat whether its expected check caught it, each side's timing thread's wait
for a CPU over its timed blocks and how many threads ran over the case (``2t``: each on a
CPU for a tenth of the blocks or more; ``defences.resources``), and the run's wall time. ``--only a,b`` runs only those manifests. The busy
processes are killed at the end, also on error.

The promise it checks: a host that other work keeps busy may change a verdict (the times
are what they were, and the ``contention`` warning says so), never raise a defence's alarm
against an honest candidate or let a cheat through.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator, List

ROOT = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def spinning(n: int, *, sessions: bool = False) -> Iterator[List[subprocess.Popen]]:
    """``n`` processes that spin on a core each while the block runs, killed after it (also on
    error); ``sessions``: each in a session of its own, as another user's job runs."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=sessions)
             for _ in range(n)]
    try:
        yield procs
    finally:
        for p in procs:
            p.kill()
            p.wait()


def waits(result) -> str:
    cells = []
    for case, sides in sorted(result.get("defences", {}).get("resources", {}).items()):
        for side in ("baseline", "candidate"):
            d = sides.get(side) or {}
            b = float(d.get("blocks_ms") or 0.0)
            w = float(d.get("waited_ms") or 0.0)
            n = d.get("case_threads_ran")
            ran = f" {n}t" if n is not None else ""
            cells.append((f"{case} {side[0]} {w / b:.0%}" if b else f"{case} {side[0]} -") + ran)
    return ", ".join(cells)


def main(argv) -> int:
    rest = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--busy", type=int, default=2)
    which = ap.add_mutually_exclusive_group()
    which.add_argument("--bad", action="store_true", help="the cheats (BAD) instead of the honest candidates")
    which.add_argument("--prevented", action="store_true", help="the cheats the harness undoes (PREVENTED)")
    ap.add_argument("--only", default="", help="comma-separated manifest names: only these")
    ap.add_argument("--repeat", type=int, default=1, help="run each manifest this many times")
    a = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT / "tests" / "adversarial"))
    import test_adversarial as T

    cheats = {**{n: v for n, v in T.BAD.items() if n not in T.COPIED}, **T.AWAITING_CALL_SITE}
    names = list(cheats) if a.bad else list(T.PREVENTED) if a.prevented else list(T.HONEST)
    names = [n for n in names if n in a.only.split(",")] if a.only else names
    print(f"{a.busy} busy processes; overrides: {' '.join(rest) or '(the suite test settings)'}\n")
    judge = "caught by its check" if a.bad else "not supported" if a.prevented else "defence alarms"
    print(f"| manifest | verdict | {judge} | reasons | waited / timed blocks | wall |")
    print("|---|---|---|---|---|---|")
    with spinning(a.busy):
        for name in [n for n in names for _ in range(a.repeat)]:
            t = time.perf_counter()
            out = T.run(name, Path(tempfile.mkdtemp(prefix="under_load_")), *rest)
            result = json.loads((out.out_dir / "result.json").read_text())
            got = T.reason_checks(result)
            if a.bad:
                verdict, checks, _ = cheats[name]
                ok = out.verdict == verdict and all(any(x in got for x in c.split("|")) for c in checks)
                # A cheat on more cores that the scheduler gave none gained nothing: not caught, and
                # no harm unless its claim was supported anyway.
                judged = "yes" if ok else ("**no**" if out.verdict == "supported" else f"no ({out.verdict})")
            elif a.prevented:
                judged = "**no**" if out.verdict == "supported" else "yes"
            else:
                alarms = sorted({c["check"] for c in result["checks"] if not c["ok"] and c["check"] in T.DEFENCE_CHECKS}
                                | ({"resources"} if "resources" in got else set()))
                judged = ", ".join(f"**{x}**" for x in alarms) or "none"
            print(f"| {name} | {out.verdict} | {judged} | {', '.join(sorted(got)) or '-'} | {waits(result)} | "
                  f"{time.perf_counter() - t:.1f} s |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
