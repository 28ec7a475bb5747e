"""The checks after a timed block: what a defended side's calls left behind.

After each timed block a defended side checks its own process: threads alive that were
not before the block (or a call that returned with a new thread still running), child
processes still running, and the functions and settings the harness relies on (checks
``tamper`` and ``global_state``). On honest-win on the 2-core CPU machine they took about
0.5 ms of each timed block request, which took 3.7 ms on average
(evidence/README.md).

Running them after the block's reply instead, while the parent has the other side's
worker time its next block, was tried and measured: it cut the parent's wait per block
by about 90 us of 650 us on the 2-core CPU machine and moved neither the measurement
phase on it nor on a 16-core H100 host beyond the runs' spread
(evidence/README.md), so they run before the reply.
"""

from __future__ import annotations

import os
import threading
from typing import Any, List

from ...checks.activity import THREADS, Activity, new_activity, parked_new_threads
from ...checks.children import child_pids
from ...core.findings import Finding


#: The new threads a case's timed calls may leave parked, waiting for work, before each
#: further one counts as a call that left a thread behind: a pool started on first use
#: grows by its workers once (``concurrent.futures.ThreadPoolExecutor``'s default ceiling,
#: the host's cores + 4 up to 32), where a candidate that hands each call's last part to a
#: new thread, which parks once done, leaves one per call. Calls count each new thread once
#: (``CaseState.after``): counted by the call that left it and again by the next one, a
#: pool that grew in the middle of a block was a finding, and the suite's honest pooled
#: GEMV was ``invalid`` with both cores busy with other work (evidence/README.md).
POOL_THREADS = min(32, (os.cpu_count() or 1) + 4)


def started_at_import(role: str, before: Activity) -> List[Finding]:
    """Child processes still running that a side's code started when it was imported
    (``before``: this process's activity just before the import). Such a process can do
    part of every call beside the timed one: its CPU time is in no account of the side's
    cores, and the counts around each call and block take it as there before them (a
    candidate that handed half of each product to one was ``supported``,
    ``tests/adversarial/cpu/import_pool_cores.yaml``). ``multiprocessing``'s idle helpers
    are not counted (:func:`~expkit.checks.children.helper_process`)."""
    new = sorted(child_pids() - before.children)
    if not new:
        return []
    return [Finding(THREADS, False, f"{role}: {len(new)} child process(es) started when its code was imported and "
                    f"still running (pid {', '.join(map(str, new[:3]))}): a process of its own can work beside every "
                    "timed call, outside the account of the side's cores", None)]


def threads_now() -> Activity:
    """The live Python threads (what a block's checks compare against its start)."""
    return Activity({t.ident or 0: t.name for t in threading.enumerate()}, frozenset())


def opening(defended: bool) -> Any:
    """(live threads, child pids) at the start of a request's first block, which its last
    block's checks compare against; None undefended."""
    return (threads_now(), child_pids()) if defended else None


def after_block(side: Any, cs: Any, before: Activity, children: Any) -> List[Finding]:
    """What one block of ``side`` (a ``SideBench``) left behind: threads, child processes,
    and the tamper and global-state checks. ``before`` and ``children``: the live threads
    and child pids when the block began; ``cs``: its case's state (its leaked-thread count
    is read and reset here)."""
    found: List[Finding] = []
    grown = new_activity(before, threads_now())
    # Calls that returned with more threads alive than they started with, beyond the
    # workers a lazily started pool keeps parked (at most POOL_THREADS a case): threads
    # that did the work after the call and were gone by the end of the block.
    excused = min(parked_new_threads(before), max(0, POOL_THREADS - cs.pool_threads))
    cs.pool_threads += excused
    leaked = cs.leaked_threads - excused
    cs.leaked_threads = 0
    if grown or leaked > 0:
        beyond = f", beyond the {POOL_THREADS} parked threads a pool may add" if cs.pool_threads >= POOL_THREADS else ""
        found.append(Finding(THREADS, False, f"{side.role}: " + (grown or f"{leaked} call(s) left a new "
                                                                 f"thread running when they returned{beyond}"), cs.name))
    new = sorted(child_pids() - children)
    if new:
        found.append(Finding(THREADS, False, f"{side.role}: {len(new)} new child process(es) still running (pid "
                             f"{', '.join(map(str, new[:3]))}) after timed calls returned: work that goes on "
                             "after a call escapes its timer", cs.name))
    return found + side.tamper_findings(f"while the {side.role} was timed", cs.name, hot_only=True)
