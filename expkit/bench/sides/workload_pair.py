"""The end-to-end workload, the parent's half: both sides' workers asked step by step.

:func:`collect_pair` asks each side's worker to build its workload (with its own op
swapped in), has the baseline's process judge the candidate's final outputs, profiles
and observes each side alone, checks that the candidate's workload ran the candidate,
then times both, interleaved, with the micro-benchmark's measurement loop. It returns
the plain data :func:`expkit.workload.assess.judge` turns into the estimate and the
comparison. The worker's half is :mod:`.workload_side`.

Each side in its own process also ends a confound the one-process collection had to
check for: Dynamo compiles (or gives up on) shared code once per process, so a
candidate built after the baseline could change how the baseline's workload ran. In
separate processes it cannot, and the isolation finding says so; in-process (the
undefended harness) the baseline is profiled again after the candidate is built and
compared (:func:`expkit.workload.collect.isolation_findings`).
"""

from __future__ import annotations

import random
from dataclasses import asdict, fields
from typing import Any, Dict, List, Mapping, Optional

from ...checks.preflight import derive_seed
from ...core.findings import Finding, finding_from
from ...timing import measure
from ...workload.collect import identity_findings, isolation_findings
from ...workload.profile import ProfileSummary, grown
from ..defences.envelope import SideFn
from .side import BASELINE, CANDIDATE

BOTH = (BASELINE, CANDIDATE)


def _profile_from(d: Optional[Mapping[str, Any]]) -> Optional[ProfileSummary]:
    if d is None:
        return None
    names = {f.name for f in fields(ProfileSummary)}
    return ProfileSummary(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in d.items() if k in names})


def _req(pair: Any, side: str, step: str, **payload: Any) -> Dict[str, Any]:
    ep = pair.b if side == BASELINE else pair.c
    return ep.request("end_to_end", step=step, **payload)


def _stopped(findings: List[Finding], why: str, evidence: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    return {"skipped": why, "findings": [asdict(f) for f in findings], "evidence": dict(evidence or {})}


def collect_pair(pair: Any, run_seed: int, progress: Any = None) -> Dict[str, Any]:
    """Build, check, profile, observe and time both sides' workloads; plain data back.

    In order, each step only if the one before passed: build both sides from one seed
    and run each twice (the first run's time, compilation included, and the compiler's
    counters are kept); hold the candidate's final outputs against the baseline's with
    the workload's oracles, in the baseline's process (a disagreement invalidates the
    run: a fast wrong workload is no speedup); profile ``profile_runs`` runs of each
    side alone; sample NVML utilisation while each runs alone (GPU); check that the
    candidate's workload ran the candidate (``expect.must_run``); then time both,
    interleaved, with the micro-benchmark's measurement loop and settings."""
    lm, settings = pair.lm, pair.settings
    m, e2e = lm.manifest, lm.manifest.end_to_end
    seed = derive_seed(run_seed, "end_to_end", e2e.name)
    where = f"workload {e2e.name}"
    findings: List[Finding] = []
    pair.b.send("end_to_end", step="build", seed=seed)
    pair.c.send("end_to_end", step="build", seed=seed)
    built = {BASELINE: pair.b.receive(), CANDIDATE: pair.c.receive()}
    for side in BOTH:
        if "raised" in built[side]:
            check = "end_to_end:crash" if side == CANDIDATE else "end_to_end:baseline"
            findings.append(Finding(check, False, f"the {side} workload raised {built[side]['raised']}", where))
            return _stopped(findings, f"the {side} workload failed")
    outs = _req(pair, CANDIDATE, "outputs")
    findings += [finding_from(f) for f in _req(pair, BASELINE, "judge", outputs=outs["outputs"])["findings"]]
    _req(pair, CANDIDATE, "release")
    profiles = {side: _profile_from(_req(pair, side, "profile")["profile"]) for side in BOTH}
    if pair.isolated:
        findings.append(Finding("end_to_end:isolation", True, "each side's workload runs in a process of its own, so "
                                "neither can change how the other's is compiled or run", where))
    else:
        again = _profile_from(_req(pair, BASELINE, "profile", runs=1, keep=False)["profile"])
        findings += isolation_findings(profiles[BASELINE], again, where)
    if any(f.invalidates for f in findings):
        return _stopped(findings, "the two workloads' final outputs disagree"
                        if not any(f.check == "end_to_end:isolation" and not f.ok for f in findings)
                        else "building the candidate changed how the baseline workload runs")
    ev: Dict[str, Any] = {side: _req(pair, side, "observe")["evidence"] for side in BOTH}
    ev["grown"] = [{**asdict(g), "grew_us": g.grew_us} for g in grown(profiles[BASELINE], profiles[CANDIDATE])]
    findings += identity_findings(e2e.replaced, m.expect.must_run, profiles[BASELINE], profiles[CANDIDATE], where)
    if any(f.invalidates for f in findings):
        return _stopped(findings, "the candidate workload never ran the candidate kernel", ev)

    method: Dict[str, str] = {}

    def warm(side: str, seconds: float) -> None:
        _req(pair, side, "warm_up", seconds=seconds)

    def call(side: str) -> None:
        _req(pair, side, "call")

    class _Timer:
        method = "end to end: time.perf_counter around a block of whole runs, in each side's worker"

        def sample(self, fn: Any, number: int) -> float:
            rep = _req(pair, fn.side, "block", number=number)
            method["m"] = rep["method"]
            return float(rep["seconds"])

    timer = _Timer()
    cs = measure.measure_case(f"end_to_end:{e2e.name}", SideFn(BASELINE, warm, call), SideFn(CANDIDATE, warm, call),
                              timer, settings.measure, rng=random.Random(seed), progress=progress)
    share = profiles[BASELINE].share if profiles[BASELINE] is not None else None
    late = [_req(pair, side, "late") for side in BOTH]
    ev["late_compilation"] = {"graphs": sum(x["graphs"] for x in late), "recompiles": sum(x["recompiles"] for x in late),
                              "recompile_reasons": [r for x in late for r in x["recompile_reasons"]]}
    return {
        "skipped": None,
        "findings": [asdict(f) for f in findings],
        "samples": {"baseline": cs.times("baseline"), "candidate": cs.times("candidate")},
        "stopped": cs.stopped,
        "budget_spent": cs.budget_spent,
        "timed_seconds": cs.timed_seconds,
        "method": method.get("m", timer.method),
        "share": None if share is None else {"value": share.value, "low": share.low, "high": share.high},
        "evidence": ev,
    }

