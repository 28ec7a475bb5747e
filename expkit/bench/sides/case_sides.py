"""One case's two sides for the measurement loop: each block to its side's worker, timed by the parent.

:class:`CaseSides` is what :meth:`.pair.Pair.sides` hands the measurement loop
(:mod:`expkit.timing.measure`): the two sides as callables and the parent's
:class:`~..defences.envelope.SessionTimer` over them. It relays each batch of blocks to the
workers in the loop's order with a fresh seed for each block's salts, picks (after a
candidate block's reply has committed its outputs) the calls the baseline's worker
re-checks, and at the case's end gathers what each side found, the parent's clock
against the candidate's own figures among it (:mod:`..defences.outside_clock`).
"""

from __future__ import annotations

import secrets
from dataclasses import asdict
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ...checks.activity import busiest
from ...checks.interference import WorkerWatch, pool_cores
from ...core.findings import Finding, findings_in as _findings
from ..processes import cores
from ..defences.clock import CLOCK
from ..defences.commit import committed_calls
from ..defences.envelope import RecheckPolicy, SessionTimer, SideFn, envelope_counts, envelope_findings
from ..defences.freeze import Freeze
from .launches import LaunchCheck, launch_findings, launches_at_end
from ..defences.outside_clock import RequestClock
from .side import BASELINE, CANDIDATE


def _harness(rep: Dict[str, Any]) -> float:
    """A block's per-call harness seconds as its worker accounts them: its calls' spans and
    commitments beyond the timed calls (the fresh inputs, the per-call hooks, the loop
    around the calls and the digests), that is its wall time less its checks and calls."""
    return max(0.0, float(rep["wall"]) - float(rep.get("checks", 0.0)) - float(rep["timed"]))


class CaseSides:
    """One case's two sides for the measurement loop, and the parent's timer over them.

    Every block goes to its side's worker in the loop's order (the loop interleaves
    the sides round by round); the parent times each request on its own clock for the
    envelope check and the outside clock. Each block's reply commits its calls' outputs;
    then the recheck policy may pick some of a candidate block's calls, which the
    candidate's worker exports and the baseline's worker re-checks on inputs it rebuilds
    from the block's seed, before the candidate's next request. ``pair``: the run's
    :class:`.pair.Pair` (typed loosely: that module imports this one)."""

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
        #: Each judged block request as the parent's clock saw it (:mod:`..defences.outside_clock`).
        self.clock: List[RequestClock] = []
        #: The candidate's judged blocks (:mod:`..defences.commit`), for the report: how many, how many
        #: held fewer outputs than calls until they ended (the memory plan's reservoir: a call
        #: not held could not be picked), calls run, and calls that could have been picked.
        self.commit_counts = {"blocks": 0, "reservoir": 0, "calls": 0, "held": 0}
        self._fits: Optional[int] = None
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
        wide = cores.pin(self.share)  # the workers' cores while they relay (bench/processes/cores.py)
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

    def _relay(self, requests: Sequence[Tuple[str, int, bool]]) -> Dict[str, Any]:
        blocks = []
        wall = latency = 0.0
        watch, freeze = self.watch, self.freeze
        # A worker holds each block's committed outputs until the next request (the parent
        # picks after the reply), so where one output fills the commitments' capacity (the
        # baseline's ``fits``, unknown before its first reply) a request carries one block:
        # its worker then holds one committed output beside the one its call is making.
        most = 1 if self.pair.settings.defences.enabled and (self._fits is None or self._fits <= 1) else None
        for side, group in runs_by_side(requests, most):
            if freeze is not None:
                freeze.quiet(side)
            items = [(n, secrets.randbits(63)) for n, _ in group]
            sent = CLOCK()
            if watch is not None:
                watch.before(side)
            if len(items) == 1:
                reps = [self._ep(side).request("block", number=items[0][0], seed=items[0][1])]
            else:
                reps = self._ep(side).request("block", items=items)["blocks"]
            got = CLOCK()
            if watch is not None:
                watch.after()
            stamps = [sent] + [t for r in reps for t in (r.get("t0"), r.get("t1"))] + [got]
            if None not in stamps and stamps == sorted(stamps):  # each block's inside the window, in order
                latency += (stamps[1] - sent) + (got - stamps[-2])
            if all(j for _, j in group):
                self.clock.append(RequestClock(side, got - sent, sum(float(r["timed"]) for r in reps),
                                               sum(n for n, _ in items),
                                               sum(_harness(r) for r in reps)))
            for pos, ((number, seed), (_, judged), rep) in enumerate(zip(items, group, reps)):
                rep["findings"] = list(rep.get("findings", ())) + launch_findings(self.launches, side, rep)
                commits = rep.pop("commits", None)
                if side == BASELINE and commits and commits.get("fits"):
                    self._fits = int(commits["fits"])  # the baseline's: outputs of this size the capacity holds
                if side == CANDIDATE and judged:
                    self._judge_block(rep, pos, number, seed, commits)
                blocks.append(rep)
                wall += rep["wall"]
        return {"blocks": blocks, "wall": wall, "latency": latency}

    def _judge_block(self, rep: Dict[str, Any], pos: int, number: int, seed: int,
                     commits: Optional[Dict[str, Any]]) -> None:
        """A candidate block's commitment: as many calls as asked, and the calls the policy
        picks now (after the reply) re-checked in the baseline's worker."""
        if commits is None:  # undefended: nothing committed, nothing to check
            return
        calls, held, kept = committed_calls(commits)
        c = self.commit_counts
        c["blocks"] += 1
        c["reservoir"] += held < calls
        c["calls"] += calls
        c["held"] += held
        found: List[Dict[str, Any]] = []
        if calls < number:
            found.append(_recheck_finding(self.case, f"a timed block asked for {number} calls committed {calls}: "
                                                     "calls were skipped while the block reported them"))
        elif held < min(calls, self._fits or 0) or (calls and not held):
            found.append(_recheck_finding(self.case, f"a timed block of {calls} calls held {held} outputs until it "
                                                     f"ended where {min(calls, self._fits or 1)} fit (the baseline's "
                                                     "worker held as many): the calls to check were chosen in it"))
        picks = self.timer.policy.pick(CANDIDATE, kept)
        if picks:
            digests = {int(i): d for i, d in commits["kept"]}
            if self.freeze is not None:  # both workers take part in the recheck
                self.freeze.release()
            t0 = CLOCK()
            for call in picks:
                shown = self.pair.c.request("reveal", block=pos, call=call)
                if shown.get("defect") or shown.get("missing"):
                    why = shown.get("defect") or "the worker has no output for it"
                    found.append(_recheck_finding(self.case, f"a timed call's output: {why}"))
                    continue
                kept_call = {"outputs": shown["outputs"], "structure": shown["structure"],
                             "digest": digests[call], "seed": commits["seed"]}
                got = self.pair.b.request("recheck", case=self.case, kept=kept_call, seed=seed, call=call)
                found.extend(got["findings"])
            self.pair.c.request("release")
            rep["recheck"] = CLOCK() - t0
            rep["wall"] = rep["wall"] + rep["recheck"]
        rep["findings"] = list(rep.get("findings", ())) + found

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

    @property
    def clock_judged(self) -> bool:
        """Whether the parent's clock bounds this case's figures (:mod:`..defences.outside_clock`): host
        figures (a CPU run), each side in its own worker, defended."""
        return self.pair.device == "cpu" and self.pair.isolated and self.pair.settings.defences.enabled


def runs_by_side(requests: Sequence[Tuple[str, int, bool]],
                 most: Optional[int] = None) -> List[Tuple[str, List[Tuple[int, bool]]]]:
    """The loop's blocks in order, consecutive blocks of one side as one request: (side,
    [(number, judged), ...]); ``most``: at most this many blocks a request."""
    out: List[Tuple[str, List[Tuple[int, bool]]]] = []
    for side, number, judged in requests:
        if not out or out[-1][0] != side or (most is not None and len(out[-1][1]) >= most):
            out.append((side, []))
        out[-1][1].append((int(number), bool(judged)))
    return out


def _recheck_finding(case: str, message: str) -> Dict[str, Any]:
    return asdict(Finding("recheck", False, message, case))


class _NoRecheck(RecheckPolicy):
    def pick(self, side: str, kept: Sequence[int]) -> List[int]:
        return []
