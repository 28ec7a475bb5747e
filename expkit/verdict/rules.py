"""Claim + estimates + findings -> verdict, following the verdict rule of docs/decisions.md.

A claim "speedup S with tolerance t" holds where the candidate is at least S·(1−t)
times faster. With an interval [lo, hi] on the measured speedup of a case:

* ``supported``    lo ≥ S·(1−t): the whole interval clears the bar;
* ``refuted``      hi < S·(1−t): the whole interval falls short;
* ``inconclusive`` the interval straddles the bar. This is a statement about the
  evidence, not the kernel: more samples (or a quieter machine) may settle it.

``invalid`` overrides all three: a fast wrong answer is not a speedup.

Across cases (``aggregate``): ``all`` (default) needs every case supported, and one
refuted case refutes the claim; ``any`` is supported by one supported case and
refuted only when every case is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence, Tuple

from ..core.findings import Finding
from .stats import Estimate

SUPPORTED, REFUTED, INCONCLUSIVE, INVALID = "supported", "refuted", "inconclusive", "invalid"
VERDICTS = (SUPPORTED, REFUTED, INCONCLUSIVE, INVALID)
EXIT_CODES: Mapping[str, int] = {SUPPORTED: 0, REFUTED: 1, INVALID: 3, INCONCLUSIVE: 4}
# Worst first, for suites: the exit code of a suite is its worst verdict's.
SEVERITY = (INVALID, REFUTED, INCONCLUSIVE, SUPPORTED)


@dataclass(frozen=True)
class CaseVerdict:
    case: str
    verdict: str
    claimed: float
    threshold: float
    reason: str


@dataclass(frozen=True)
class Verdict:
    verdict: str
    reasons: Tuple[str, ...]
    cases: Tuple[CaseVerdict, ...] = ()

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"unknown verdict {self.verdict!r}")

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]


def judge_case(case: str, est: Estimate, claimed: float, tolerance: float, budget_spent: bool) -> CaseVerdict:
    thr = claimed * (1 - tolerance)
    interval = f"[{est.ci_low:.3f}, {est.ci_high:.3f}]"
    if est.ci_low >= thr:
        return CaseVerdict(case, SUPPORTED, claimed, thr, f"interval {interval} is at or above {thr:.3f}")
    if est.ci_high < thr:
        return CaseVerdict(case, REFUTED, claimed, thr,
                           f"measured {est.speedup:.3f}x, interval {interval} below {thr:.3f} "
                           f"(claimed {claimed:g}x, tolerance {tolerance:.0%})")
    if est.spread_dominates:
        # The processes disagree by more than each one's own noise: longer runs narrow each
        # process's interval, not the spread between them.
        why = (f"the {len(est.processes)} processes disagree by more than the noise within each: measure in more "
               "processes (measure.processes, or measure=rigorous) or on a quieter machine")
    elif budget_spent:
        why = "the time budget ran out first: measure longer (measure=rigorous) or on a quieter machine"
    elif len(est.processes) > 1:
        # Every process met its own target: the spread between processes (and the few of
        # them the t interval rests on) is what is wide, which more rounds do not narrow.
        why = (f"the interval over {len(est.processes)} processes is too wide: measure in more processes "
               "(measure.processes, or measure=rigorous) or on a quieter machine")
    else:
        why = "the interval is too wide: measure longer (measure=rigorous) or on a quieter machine"
    return CaseVerdict(case, INCONCLUSIVE, claimed, thr, f"interval {interval} straddles {thr:.3f}; {why}")


def decide(
    findings: Sequence[Finding],
    estimates: Mapping[str, Estimate],
    claims: Mapping[str, float],
    tolerance: float,
    budget_spent: Mapping[str, bool],
    aggregate: str = "all",
    unmeasured: Mapping[str, str] = {},
) -> Verdict:
    """The overall verdict and its reasons, each reason naming the check behind it.

    Every declared case is judged: one in ``unmeasured`` (case -> why no estimate could be
    made) is ``inconclusive`` with that reason, so under ``all`` the claim cannot be
    ``supported`` on the cases that happened to be measurable."""
    bad = [f for f in findings if f.invalidates]
    if bad:
        return Verdict(INVALID, tuple(f.reason() for f in bad))
    cases = tuple(judge_case(c, estimates[c], claims[c], tolerance, budget_spent.get(c, False)) for c in estimates)
    cases += tuple(unmeasured_case(c, claims[c], tolerance, why) for c, why in unmeasured.items() if c not in estimates)
    return combine(cases, aggregate)


def unmeasured_case(case: str, claimed: float, tolerance: float, why: str) -> CaseVerdict:
    """A declared case with no estimate: ``inconclusive``, its reason kept."""
    return CaseVerdict(case, INCONCLUSIVE, claimed, claimed * (1 - tolerance), f"not measured: {why}")


def combine(cases: Sequence[CaseVerdict], aggregate: str = "all") -> Verdict:
    """The overall verdict of judged cases under ``aggregate``, with the reasons of the cases
    that decided it (every case's where it is ``supported``)."""
    cases = tuple(cases)
    if not cases:
        return Verdict(INCONCLUSIVE, ("measurement: no case was measured",))
    words = [c.verdict for c in cases]
    if aggregate == "any":
        overall = (SUPPORTED if SUPPORTED in words else REFUTED if all(w == REFUTED for w in words) else INCONCLUSIVE)
    else:
        overall = (REFUTED if REFUTED in words else SUPPORTED if all(w == SUPPORTED for w in words) else INCONCLUSIVE)
    reasons = tuple(f"speedup [case {c.case}]: {c.reason}" for c in cases if c.verdict == overall or overall == SUPPORTED)
    return Verdict(overall, reasons, cases)


def inconclusive_when(v: Verdict, fired: Sequence[Finding]) -> Verdict:
    """``supported`` becomes ``inconclusive`` when any of ``fired`` (failed warnings that
    leave the times standing but say a speedup may not be the code's) is there; their
    reasons come first. Any other verdict stands: a claim refuted or invalid stays so."""
    fired = [f for f in fired if not f.ok]
    if v.verdict != SUPPORTED or not fired:
        return v
    return Verdict(INCONCLUSIVE, tuple(f.reason() for f in fired) + tuple(v.reasons), v.cases)


def noted(v: Verdict, notes: Sequence[Finding]) -> Verdict:
    """``v`` with the reasons of ``notes`` after its own: findings that change no verdict
    but qualify what a measured one means (an intended kernel never identified). An
    ``invalid`` verdict's reasons stay the failures alone."""
    if v.verdict == INVALID or not notes:
        return v
    return Verdict(v.verdict, tuple(v.reasons) + tuple(f.reason() for f in notes), v.cases)


def worst(verdicts: Sequence[str]) -> str:
    for v in SEVERITY:
        if v in verdicts:
            return v
    return SUPPORTED
