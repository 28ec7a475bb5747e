"""The parent's timer and the envelope check (check ``timer``), with the recheck policy.

The parent times every request for timed blocks on its own clock (the *envelope*)
while the worker reports its own account: the timed seconds, the untimed harness work
and its wall time. A batch whose worker wall time falls short of the envelope by more
than ``max(envelope_abs_s, envelope_rel x envelope)`` is flagged; more than half of a
case's batches flagged makes the run invalid. :class:`RecheckPolicy` decides, on the
parent's side, from a secret RNG and only once a block's reply has committed its calls'
outputs (:mod:`.commit`), which calls of which block are re-checked.
"""

from __future__ import annotations

import random
import secrets
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ...core.findings import Finding, finding_from
from ...manifest.settings import DefenceSettings
from ...timing.timer import BlockTiming
from .clock import CLOCK

TIMER = "timer"


@dataclass(frozen=True)
class BlockAccount:
    """One timed block as the parent saw it (``envelope``) and the worker reported it."""

    side: str
    number: int
    envelope: float
    wall: float
    timed: float
    untimed: float
    recheck: float
    checks: float
    latency: float = 0.0

    def shortfall(self) -> float:
        """Seconds the worker cannot account for: envelope minus its wall time and the
        measured round trips of the requests (``latency``), or its wall time minus the
        parts it measured, whichever is larger."""
        return max(self.envelope - self.wall - self.latency,
                   self.wall - (self.timed + self.untimed + self.recheck + self.checks))


def flagged(acc: BlockAccount, d: DefenceSettings) -> bool:
    return acc.shortfall() > max(d.envelope_abs_s, d.envelope_rel * acc.envelope)


def envelope_findings(case: str, accounts: Sequence[BlockAccount], d: DefenceSettings) -> List[Finding]:
    """The parent's verdict on the worker's clock over one case's batches.

    One flagged batch means little: on a loaded machine the parent's wake-up after a
    reply can lag by several milliseconds (4-12 ms were measured on a loaded 2-core
    machine while the worker's OpenMP threads spun), so flagged batches are only
    counted (``envelope_counts``). More than half of them flagged is ``invalid``: the
    worker's account of its own time is not to be trusted."""
    bad = [a for a in accounts if flagged(a, d)]
    if not bad or len(bad) * 2 <= len(accounts):
        return []
    worst = max(bad, key=lambda a: a.shortfall() / max(a.envelope, 1e-12))
    accounted = worst.timed + worst.untimed + worst.recheck + worst.checks
    msg = (f"{len(bad)} of {len(accounts)} batches of timed blocks disagree with the harness's clock (worst: the "
           f"worker accounted for {accounted:.4g} s and its wall clock for {worst.wall:.4g} s of a "
           f"{worst.envelope:.4g} s request): something in the worker is changing what the harness's clock reads")
    return [Finding(TIMER, False, msg, case, figure=float(len(bad)), threshold=len(accounts) / 2)]


def envelope_counts(accounts: Sequence[BlockAccount], d: DefenceSettings) -> Dict[str, Any]:
    bad = [a for a in accounts if flagged(a, d)]
    return {"batches": len(accounts), "flagged": len(bad),
            "worst_shortfall_s": max((a.shortfall() for a in accounts), default=0.0)}


#: Calls re-checked in a block the policy picks (fewer where fewer were kept).
CALLS_PER_PICK = 2


class RecheckPolicy:
    """Which timed blocks re-check some of their calls, and which calls.

    The first ``min_rechecks`` candidate blocks of a case, then any block while the
    re-checks (those done, plus those planned at the average cost so far) have cost
    less than ``budget`` of the timed seconds. One policy serves one case in one of
    ``processes`` processes: the minimum is shared between them, at least one in each
    (3 processes of a case with ``min_rechecks=3`` re-check one block each, not three).

    The choice is made after the block: :meth:`pick` is given the calls the block's
    reply committed (:mod:`.commit`) and draws ``CALLS_PER_PICK`` of them from a secret
    RNG in the parent. While the candidate's calls run, which block and which call will
    be checked is decided nowhere, so no reading of its worker's memory can tell."""

    def __init__(self, d: DefenceSettings, rng: Optional[random.Random] = None, processes: int = 1) -> None:
        self.min = max(1, -(-d.min_rechecks // max(1, processes))) if d.min_rechecks > 0 else 0
        self.budget = d.recheck_budget
        self.rng = rng or random.Random(secrets.randbits(64))
        self.picked = 0
        self.recheck_s = 0.0
        self.timed_s = 0.0

    def pick(self, side: str, kept: Sequence[int]) -> List[int]:
        """The committed calls (``kept``: their indices) of one block to re-check, maybe none."""
        if side != "candidate" or not kept:
            return []
        each = self.recheck_s / self.picked if self.picked else 0.0
        if self.picked < self.min or self.recheck_s + each < self.budget * self.timed_s:
            self.picked += 1
            return sorted(self.rng.sample(list(kept), min(CALLS_PER_PICK, len(kept))))
        return []

    def spent(self, timed: float, recheck: float) -> None:
        self.timed_s += timed
        self.recheck_s += recheck


class SideFn:
    """Stands for one side in ``measure.measure_case``: timers see ``side``, warm-up
    goes to ``warm_up`` and a plain call runs one untimed call."""

    def __init__(self, side: str, warm: Callable[[str, float], None], call: Callable[[str], None]) -> None:
        self.side, self._warm, self._call = side, warm, call

    def warm_up(self, seconds: float) -> None:
        self._warm(self.side, seconds)

    def __call__(self) -> None:
        self._call(self.side)


#: (side, calls, judged): a judged block's committed calls may be picked for the recheck.
Request = Tuple[str, int, bool]


class SessionTimer:
    """The parent's timer: asks the bench for blocks, times each request, checks it.

    ``run_blocks([(side, number, judged), ...]) -> {"blocks": [...], "wall": s}``
    runs a batch of blocks (each side's in its own worker, :class:`~..sides.case_sides.CaseSides`).
    With ``envelope`` the parent's own time of each batch is held against the workers'
    account of it (:func:`flagged`, :func:`envelope_findings`), less the channel's
    latency the reply explains (``latency``: see ``CaseSides._run_blocks``)."""

    def __init__(self, run_blocks: Callable[[List[Request]], Mapping[str, Any]], d: DefenceSettings,
                 *, envelope: bool, clock: Callable[[], float] = CLOCK,
                 policy: Optional[RecheckPolicy] = None) -> None:
        self._run, self._d, self._envelope, self._clock = run_blocks, d, envelope, clock
        self.policy = policy or RecheckPolicy(d)
        self.accounts: List[BlockAccount] = []
        self.findings: List[Finding] = []
        self.method = "defended"
        self.info: Any = None  # the workers' timers' TimerInfo (set by the pair)

    def sample(self, fn: Any, number: int) -> float:
        return BlockTiming.coerce(self.sample_batch([(fn, number)], judged=False)[0]).seconds

    def sample_batch(self, plan: Sequence[Tuple[Any, int]], judged: bool = True) -> List[Any]:
        """Seconds per call of each block, or (GPU timers) each block's both figures as the
        worker's ``BlockTiming`` dict, which the measurement loop accepts."""
        # Calibration's single blocks (``judged`` False) re-check nothing: they are the first,
        # shortest calls, before a cache or a skip has anything to gain, and a re-check spent
        # there is one the measured blocks do not get. The calls a judged block re-checks are
        # picked after its reply (``run_blocks`` asks ``self.policy``).
        reqs: List[Request] = [(fn.side, number, judged) for fn, number in plan]
        t0 = self._clock()
        rep = self._run(reqs)
        envelope = self._clock() - t0
        out = []
        for (side, number, _), r in zip(reqs, rep["blocks"]):
            self.method = r.get("method", self.method)
            self.policy.spent(r["timed"], r["recheck"])
            self.findings.extend(finding_from(f) for f in r.get("findings", ()))
            out.append(r.get("timing") or float(r["seconds"]))
        blocks = rep["blocks"]
        # Single blocks (the block-size calibration) are too short for the parent's
        # clock to judge against its own wake-up latency; batches are judged.
        if self._envelope and judged:
            self.accounts.append(BlockAccount(
                "batch", sum(n for _, n, _ in reqs), envelope, rep["wall"], sum(b["timed"] for b in blocks),
                sum(b["untimed"] for b in blocks), sum(b["recheck"] for b in blocks),
                rep["wall"] - sum(b["wall"] for b in blocks)
                + sum(b["checks"] + b.get("commit", 0.0) for b in blocks),
                float(rep.get("latency", 0.0))))
        return out
