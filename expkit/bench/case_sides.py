"""One case's two sides for the measurement loop: each block to its side's worker, timed by the parent.

:class:`CaseSides` is what :meth:`.pair.Pair.sides` hands the measurement loop
(:mod:`expkit.timing.measure`): the two sides as callables and the parent's
:class:`~.envelope.SessionTimer` over them. It relays each batch of blocks to the
workers in the loop's order, runs the recheck of a kept candidate call in the
baseline's worker, and at the case's end gathers what each side found.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..checks.activity import busiest
from ..checks.interference import WorkerWatch, pool_cores
from ..core.findings import Finding
from . import cores
from .clock import CLOCK
from .envelope import RecheckPolicy, SessionTimer, SideFn, envelope_counts, envelope_findings
from .freeze import Freeze
from .launches import LaunchCheck, launch_findings, launches_at_end
from .side import BASELINE, CANDIDATE, LAST_CALL
from .trial import findings_of as _findings


class CaseSides:
    """One case's two sides for the measurement loop, and the parent's timer over them.

    Every block goes to its side's worker in the loop's order (the loop interleaves
    the sides round by round); the parent times each request on its own clock for the
    envelope check. A candidate block the recheck policy picked comes back with one
    call's output and inputs exported, which the baseline's worker re-checks before
    the next block starts. ``pair``: the run's :class:`.pair.Pair` (typed loosely: that
    module imports this one)."""

    def __init__(self, pair: Any, case: str, share: Optional[cores.Cores] = None) -> None:
        self.pair, self.case, self.share = pair, case, share
        d = pair.settings.defences
        self.timer = SessionTimer(self._run_blocks, d, envelope=pair.isolated,
                                  policy=RecheckPolicy(d, processes=pair.settings.measure.processes)
                                  if d.enabled else _NoRecheck(d))
        pids = {BASELINE: pair.b.pid(), CANDIDATE: pair.c.pid()}
        apart = d.enabled and pair.isolated and all(pids.values())
        #: The other side's worker stopped while a side's blocks are timed (.freeze); None
        #: where the sides share a process or the run sets defences.freeze=false.
        self.freeze = Freeze(pids) if apart and d.freeze else None
        #: Each worker's stops, and (a CPU run) the other worker's CPU time while a side is
        #: timed (checks.interference): a stopped worker's pool spins nothing, so its
        #: allowance is kept for runs without the freeze.
        spin = 0.0 if self.freeze is not None else pool_cores(pair.settings.measure.cpu_threads)
        self.watch = WorkerWatch(pids, cpu=pair.device == "cpu", pool_cores=spin) if apart else None
        if self.watch is not None and share is not None and self.watch.expected is not None:
            # Hand-overs on shared cores: a woken worker waits for the parent to wait (.cores).
            policy = cores.relay_quietly([pids[BASELINE], pids[CANDIDATE]])
            if policy is not None:
                self.watch.expected = (policy, self.watch.expected[1])
            pair.evidence["relay_policy"] = "SCHED_BATCH" if policy is not None else "the parent's"
        #: Each timed call's kernels against the profiled call's (.launches), a GPU run's.
        self.launches = LaunchCheck(case, pair.launches.get(case) if pair.device == "cuda" else None)
        self.baseline = SideFn(BASELINE, self._warm, self._call)
        self.candidate = SideFn(CANDIDATE, self._warm, self._call)

    def _ep(self, side: str) -> Any:
        return self.pair.b if side == BASELINE else self.pair.c

    def _warm(self, side: str, seconds: float) -> None:
        self._ep(side).request("warm_up", seconds=seconds)

    def _call(self, side: str) -> None:
        self._ep(side).request("call")

    def _run_blocks(self, requests: Sequence[Tuple[str, int, Optional[int]]]) -> Dict[str, Any]:
        """Each block from its side's worker, in order (a side's consecutive blocks in one
        request: :func:`runs_by_side`); the batch's transport latency from the workers' stamps.

        A worker stamps its block's start and end on the harness's clock, which is the
        system's monotonic clock (``time.perf_counter``) and so the parent's too. For an
        honest worker each block's stamps lie inside the parent's send-to-receive window,
        and what lies outside them is the channel's latency (on a loaded machine,
        milliseconds a request), which no worker accounts for. Stamps outside the window
        mean the worker's clock is not the parent's: that block's latency counts as
        unexplained, and the envelope check sees it."""
        wide = cores.pin(self.share)  # the workers' cores while they relay (bench/cores.py)
        freeze = self.freeze
        held = freeze.seconds if freeze is not None else 0.0
        try:
            out = self._relay(requests)
        finally:
            if freeze is not None:
                freeze.release()
            cores.unpin(wide)
        if freeze is not None:  # its waits are the parent's own, not a worker's to explain
            out["latency"] += freeze.seconds - held
        return out

    def _relay(self, requests: Sequence[Tuple[str, int, Optional[int]]]) -> Dict[str, Any]:
        blocks = []
        wall = latency = 0.0
        last_only = self.pair.memory is not None and not self.pair.memory.keep_pristine
        watch, freeze = self.watch, self.freeze
        for side, group in runs_by_side(requests, LAST_CALL if last_only else None):
            if freeze is not None:
                freeze.quiet(side)
            sent = CLOCK()
            if watch is not None:
                watch.before(side, int(sent * 1e9))
            if len(group) == 1:
                reps = [self._ep(side).request("block", number=group[0][0], recheck=group[0][1])]
            else:
                reps = self._ep(side).request("block", items=group)["blocks"]
            got = CLOCK()
            if watch is not None:
                watch.after(int(got * 1e9))
            stamps = [sent] + [t for r in reps for t in (r.get("t0"), r.get("t1"))] + [got]
            if None not in stamps and stamps == sorted(stamps):  # each block's inside the window, in order
                latency += (stamps[1] - sent) + (got - stamps[-2])
            for rep in reps:
                rep["findings"] = list(rep.get("findings", ())) + launch_findings(self.launches, side, rep)
                kept = rep.pop("kept", None)
                if kept is not None:
                    if freeze is not None:  # both workers take part in the recheck
                        freeze.release()
                    t0 = CLOCK()
                    got = self.pair.b.request("recheck", case=self.case, kept=kept)
                    self.pair.c.request("release")
                    spent = CLOCK() - t0
                    rep["findings"] = list(rep.get("findings", ())) + list(got["findings"])
                    rep["recheck"] = spent
                    rep["wall"] = rep["wall"] + spent
                blocks.append(rep)
                wall += rep["wall"]
        return {"blocks": blocks, "wall": wall, "latency": latency}

    def finish(self, trim: bool = True) -> List[Finding]:
        """End the case in both workers; ``trim``: each gives the device back its cached
        memory (needless where the pair closes next)."""
        done: List[Finding] = []
        sides = ((BASELINE, self.pair.b), (CANDIDATE, self.pair.c))
        for _, ep in sides:  # both at once: nothing is timed while a case ends
            ep.send("finish_case", trim=trim)
        continued: Dict[str, int] = {}
        for role, reply in [(role, ep.receive()) for role, ep in sides]:
            done += _findings(reply)
            continued[role] = int(reply.get("continued") or 0)
            if reply.get("resources") is not None:  # the cores each side's timed blocks used (CPU)
                per = self.pair.evidence.setdefault("resources", {}).setdefault(self.case, {})
                per[role] = busiest(per.get(role), reply["resources"])
        if self.pair.device == "cuda" and self.pair.isolated:
            done += self.pair.neighbours(self.case)
        if self.watch is not None:  # what each worker did while the other was timed
            if self.watch.cpu:
                self.watch.add_summary(self.pair.evidence.setdefault("interference", {}).setdefault(self.case, {}))
            roles = {BASELINE: "baseline", CANDIDATE: "candidate"}
            if self.freeze is not None:  # the harness's own SIGCONT are not another's
                ours = self.freeze.take_sent()
                continued = {s: max(0, n - ours.get(s, 0)) for s, n in continued.items()}
                done += self.freeze.findings(self.case, roles)
            done += self.watch.findings(self.case, roles, continued)
            if self.watch.unwatched:
                self.pair.evidence["stops_unwatched"] = sorted(self.watch.unwatched)
        done += launches_at_end(self.launches, self.pair)
        d = self.pair.settings.defences
        self.pair.evidence.setdefault("envelope", {})[self.case] = envelope_counts(self.timer.accounts, d)
        return self.timer.findings + envelope_findings(self.case, self.timer.accounts, d) + done


def runs_by_side(requests: Sequence[Tuple[str, int, Optional[int]]],
                 keep_as: Optional[int]) -> List[Tuple[str, List[Tuple[int, Optional[int]]]]]:
    """The loop's blocks in order, consecutive blocks of one side as one request: (side,
    [(number, recheck), ...]). A block that keeps a call for the recheck ends its request
    (the recheck runs before the next block); ``keep_as`` replaces its index (LAST_CALL
    where the memory plan has no room for a pristine copy)."""
    out: List[Tuple[str, List[Tuple[int, Optional[int]]]]] = []
    cut = True
    for side, number, keep in requests:
        if keep is not None and keep_as is not None:
            keep = keep_as
        if cut or out[-1][0] != side:
            out.append((side, []))
        out[-1][1].append((int(number), keep))
        cut = keep is not None
    return out


class _NoRecheck(RecheckPolicy):
    def pick(self, side: str, number: int) -> Optional[int]:
        return None
