"""The ``load`` rule: a verdict that the host's load could explain is not given.

The ``contention`` check (``checks/contention.py``) reports a side whose timing thread
waited for a CPU for more than a tenth of its timed blocks: other work held the cores.
The times are what they were; what this rule asks is whether the verdict would survive
that wait being taken out. A case of such a run is judged again:

* **Every side on one thread.** A side's code ran for its blocks' wall time less its
  timing thread's wait, so the speedup less the waits is the measured one times
  ``(1 - w_baseline) / (1 - w_candidate)`` (each ``w`` the side's wait over its blocks,
  summed over the run's processes). Where the interval so scaled would be judged
  otherwise, ``supported`` or ``refuted`` becomes ``inconclusive``: the verdict rests on
  which side the load fell on. Load that fell on both alike changes nothing.
* **A side on more than one thread** (``case_threads_ran``). One thread's wait then stalls
  those that wait for it at the next barrier of an OpenMP pool, by far more than any one
  thread's wait records: with one busy process on the 2-core CPU machine and two threads
  a side, a cheat whose narrowing of the baseline's cores the harness undoes, and whose own
  work is 1.0x of its baseline's, was ``supported`` at an interval of [1.325, 9.306] for a
  claim of 1.5x, and in 2 of 6 runs of the under-load benchmark
  (evidence/README.md). No figure the run keeps says how much
  of a time was the code's, so ``supported`` and ``refuted`` both become ``inconclusive``.

Each such case gets a ``load`` warning naming its figures, and its reason comes first.
The rule reads only ``defences.resources`` (stored in ``result.json``) and the estimates.
"""

from __future__ import annotations

from typing import Any, Collection, List, Mapping, Optional, Sequence

from ..core.findings import WARNING, Finding
from .rules import INCONCLUSIVE, REFUTED, SUPPORTED, CaseVerdict, Verdict, combine

LOAD = "load"


def _waited(rec: Mapping[str, Any]) -> float:
    blocks = float(rec.get("blocks_ms") or 0.0)
    return min(float(rec.get("waited_ms") or 0.0) / blocks, 0.99) if blocks > 0 else 0.0


def _judge(lo: float, hi: float, threshold: float) -> str:
    return SUPPORTED if lo >= threshold else REFUTED if hi < threshold else INCONCLUSIVE


def _case_finding(cv: CaseVerdict, est: Any, sides: Mapping[str, Mapping[str, Any]]) -> Optional[Finding]:
    waits = {role: _waited(rec) for role, rec in sides.items()}
    if not waits:
        return None
    busiest = max(sorted(waits), key=lambda r: waits[r])
    many = {role: int(rec.get("case_threads_ran") or 0) for role, rec in sorted(sides.items())
            if int(rec.get("case_threads_ran") or 0) > 1}
    if many:
        who = " and ".join(f"the {role} on {n} threads" for role, n in many.items())
        return Finding(LOAD, False, (
            f"{who}, timed on a host where the {busiest}'s timing thread waited for a CPU for {waits[busiest]:.0%} "
            "of its timed blocks: with more runnable threads than free cores, one thread's wait stalls the threads "
            "that wait for it by more than its own wait records, so the case's interval cannot say whether it is "
            f"{cv.verdict} or the host's load; measure on a quiet machine, or with measure.cpu_threads=1"),
            cv.case, severity=WARNING, figure=float(max(many.values())), threshold=1.0)
    wb, wc = waits.get("baseline", 0.0), waits.get("candidate", 0.0)
    factor = (1.0 - wb) / (1.0 - wc)
    lo, hi = est.ci_low * factor, est.ci_high * factor
    again = _judge(lo, hi, cv.threshold)
    if again == cv.verdict:
        return None
    says = {SUPPORTED: "is at or above", REFUTED: "falls below", INCONCLUSIVE: "straddles"}[again]
    return Finding(LOAD, False, (
        f"the baseline's timing thread waited for a CPU for {wb:.0%} of its timed blocks and the candidate's for "
        f"{wc:.0%}: with each side's wait taken out of its times the interval would be [{lo:.3f}, {hi:.3f}], which "
        f"{says} {cv.threshold:.3f}, so the case's verdict ({cv.verdict}) rests on which side the host's load fell "
        "on; measure on a quiet machine"),
        cv.case, severity=WARNING, figure=round(factor, 4), threshold=1.0)


def load_findings(v: Verdict, estimates: Mapping[str, Any], resources: Mapping[str, Mapping[str, Mapping[str, Any]]],
                  busy: Collection[str]) -> List[Finding]:
    """A ``load`` warning for each case of ``busy`` (those with a ``contention`` warning)
    whose ``supported`` or ``refuted`` the host's load could explain (module docstring)."""
    out = []
    for cv in v.cases:
        if cv.case in busy and cv.verdict in (SUPPORTED, REFUTED) and cv.case in estimates:
            f = _case_finding(cv, estimates[cv.case], resources.get(cv.case) or {})
            if f is not None:
                out.append(f)
    return out


def apply_load(v: Verdict, found: Sequence[Finding], aggregate: str = "all") -> Verdict:
    """``v`` with each case a ``load`` warning names made ``inconclusive``, the overall
    verdict combined again under ``aggregate``, and the warnings' reasons first."""
    hit = {f.case: f for f in found if f.check == LOAD and not f.ok}
    if not hit:
        return v
    cases = [CaseVerdict(c.case, INCONCLUSIVE, c.claimed, c.threshold,
                         f"{c.reason}, but the host's load could explain it ({LOAD})") if c.case in hit else c
             for c in v.cases]
    again = combine(cases, aggregate)
    return Verdict(again.verdict, tuple(f.reason() for f in hit.values()) + again.reasons, again.cases)
