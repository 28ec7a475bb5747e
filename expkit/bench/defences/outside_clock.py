"""The parent's clock bounds a side's own figure (check ``timer``): nothing taken on its word.

A worker reports how long its calls took (``timed``) and how long the harness's work
around them took (``untimed``, ``commit``, ``checks``). The candidate's code runs in its
worker's interpreter, so those figures are the candidate's to change: a reply can carry
a smaller ``timed`` and a larger ``untimed``, and work can be moved out of the timed
spans into the harness's own. The parent, where no candidate code runs, times every
block request from send to reply (its *envelope*, all of the request's work inside).

The floor is calibrated without the candidate: the baseline's worker runs the same
harness around calls on inputs of the same shapes (the digests too, the outputs having
the baseline's shapes), so its own account of the harness's work a call (everything its
calls' spans and their commitments took beyond the timed seconds) is what each candidate
call may cost beyond its timed span. The floor is that account's lower quartile over the
baseline's requests, and both sides' requests are read through it; each request's *gap* is

    envelope - reported timed - calls x the floor,

the request's checks, the channel, the wake-ups, and whatever harness work a call took
beyond the floor. An honest candidate's gaps are the baseline's. Both sides are read
alike, so seconds a loaded host took from either worker inside the harness's work stay in
that side's gaps, where the quartile leaves them out; a mean floor spread the baseline's
over every call and took them off every candidate gap, room for time a reply no longer
reports. The floor is read at the gaps' quantile because a baseline of hundreds of short
calls a request multiplies the floor's distance from its own requests' harness seconds
hundreds of times: read at the mean, that made an honest candidate ``invalid`` on a
loaded 2-core host (``evidence/usability/busy-host-suite/``).

Wake-ups come in bursts on a loaded host and only ever add time, while time a reply hides
in every request is missing from its least delayed ones too, so the two sides are compared
by the lower quartiles (``QUANTILE``) of their gaps (a median let a third of requests with bursts decide
it in seeded fakes): a candidate whose gap exceeds the baseline's by more than

    max(CLOCK_ABS_S, CLOCK_REL x its median timed seconds a request)
    + HARNESS_REL x its median calibrated harness seconds a request
    + CALL_ABS_S x its median calls a request

reported less time than the parent's clock allows, and the run is ``invalid`` with both
figures in the reason. The last two terms are what honest code leaves outside its spans
that the baseline's calibration cannot hold. The harness term: an honest candidate's garbage
and its effect on the caches land in the harness's part. The per-call term: an honest call
that hands its work to a thread of its own, or writes to a file, leaves that thread's
bookkeeping or the file's behind it on every call, a few microseconds whatever the call's
length. The most an honest run needed beyond the other terms was 6.8 us a call (a
candidate that fills an output buffer of its own, beside two busy processes); the clock
cheats of the adversarial suite would need 80 us a call or more to pass
(``evidence/defences/outside-clock-per-call/``). So the clock resolves what was moved out
of calls that dominate their requests, not out of calls no longer than the harness's work
around them plus the per-call allowance (``evidence/defences/adaptive-cheats.md``).

The lower quartile sees time hidden in every request, not time hidden in most: a reply
that tells the truth in a third of its requests and hides time in the rest leaves its
lower quartile honest, while the median of its reported times, which the speedup is made
of, moves. So the medians of the two sides' gaps are compared too, with the same margin.
A median moves with a loaded host's bursts where they hit half the requests or more, so
the medians must differ by more than the margin and by more than the baseline's own gaps
spread (their interquartile range). Where that spread is within the margin (a host steady
enough to tell), the run is ``invalid``; where it is wider, a warning, which leaves the
times standing and makes a ``supported`` verdict ``inconclusive``: the parent's clock could
not confirm most of the candidate's requests.

Only where a side's figure is host time (a CPU run): a GPU timer's figure is the
device's, which host time does not bound from below (a launch-bound call's host time
exceeds its kernels' by design).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Dict, List, Sequence

from ...core.findings import WARNING, Finding

TIMER = "timer"
#: Requests a side needs before its gap's quartile means anything.
MIN_REQUESTS = 6
#: The quantile of each side's gaps that is compared.
QUANTILE = 0.25
#: How far the candidate's gaps (lower quartile, median) may exceed the baseline's: at least this many
#: seconds, and this fraction of its median timed seconds a request.
CLOCK_ABS_S = 0.0005
CLOCK_REL = 0.2
HARNESS_REL = 0.25
#: Seconds a call an honest candidate may leave outside its timed span (its own threads' or
#: files' bookkeeping), on top of the other terms.
CALL_ABS_S = 8e-6


@dataclass(frozen=True)
class RequestClock:
    """One block request as the parent timed it (``envelope``) and its worker reported it."""

    side: str
    envelope: float
    timed: float
    calls: int
    harness: float  # the calls' spans and commitments beyond ``timed``, as this worker reported them


def _quantile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (linear between order statistics)."""
    xs = sorted(values)
    at = q * (len(xs) - 1)
    lo = int(at)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (at - lo)


def _per_call_floor(rows: Sequence[RequestClock]) -> float:
    """The baseline's harness seconds a call, at the gaps' quantile over its requests."""
    per_call = [r.harness / r.calls for r in rows if r.calls > 0]
    return _quantile(per_call, QUANTILE) if per_call else 0.0


def margin(timed: float, harness: float, calls: float) -> float:
    """Seconds a request by which the candidate's gap may exceed the baseline's, from its median
    timed seconds, calibrated harness seconds and calls a request (the module docstring)."""
    return max(CLOCK_ABS_S, CLOCK_REL * timed) + HARNESS_REL * harness + CALL_ABS_S * calls


def clock_figures(rows: Sequence[RequestClock]) -> Dict[str, Any]:
    """The parent's reading of a case's requests (for the evidence and the check)."""
    base = [r for r in rows if r.side == "baseline"]
    cand = [r for r in rows if r.side == "candidate"]
    floor = _per_call_floor(base)
    gaps = {side: [r.envelope - r.timed - r.calls * floor for r in rs] for side, rs in (("baseline", base),
                                                                                       ("candidate", cand))}
    out: Dict[str, Any] = {"requests": {"baseline": len(base), "candidate": len(cand)},
                           "floor_per_call_s": floor}
    if len(base) >= MIN_REQUESTS and len(cand) >= MIN_REQUESTS:
        out["gap_s"] = {s: _quantile(g, QUANTILE) for s, g in gaps.items()}
        out["candidate_median_timed_s"] = statistics.median(r.timed for r in cand)
        out["excess_s"] = out["gap_s"]["candidate"] - out["gap_s"]["baseline"]
        out["candidate_median_harness_s"] = statistics.median(r.calls * floor for r in cand)
        out["candidate_median_calls"] = statistics.median(r.calls for r in cand)
        out["allowed_s"] = margin(out["candidate_median_timed_s"], out["candidate_median_harness_s"],
                                  out["candidate_median_calls"])
        out["median_excess_s"] = _quantile(gaps["candidate"], 0.5) - _quantile(gaps["baseline"], 0.5)
        out["baseline_spread_s"] = _quantile(gaps["baseline"], 0.75) - _quantile(gaps["baseline"], 0.25)
    return out


def clock_findings(case: str, rows: Sequence[RequestClock]) -> List[Finding]:
    """``invalid`` where the candidate's reported time is below what the parent's clock allows,
    in every request (lower quartiles) or in most (medians, on a host steady enough to tell);
    a warning where most requests could not be confirmed on a host that is not."""
    f = clock_figures(rows)
    if "excess_s" not in f:
        return []
    if f["excess_s"] <= f["allowed_s"]:
        return _majority(case, f)
    cand = f["candidate_median_timed_s"]
    msg = (f"the candidate's worker reported {cand:.4g} s of timed calls a request (median), but the parent's clock "
           f"left {f['excess_s']:.4g} s a request more unexplained than the baseline's (lower quartiles of the gaps "
           f"{f['gap_s']['candidate']:.4g} s against {f['gap_s']['baseline']:.4g} s, after {f['floor_per_call_s'] * 1e6:.3g} us a call of "
           f"harness work calibrated on the baseline; allowed {f['allowed_s']:.4g} s): time was moved out of the "
           "timed calls or the worker's figures were changed")
    return [Finding(TIMER, False, msg, case, figure=f["excess_s"], threshold=f["allowed_s"])]


def _majority(case: str, f: Dict[str, Any]) -> List[Finding]:
    """The medians' check: time hidden in most requests, not all."""
    if f["median_excess_s"] <= max(f["allowed_s"], f["baseline_spread_s"]):
        return []
    steady = f["baseline_spread_s"] <= f["allowed_s"]
    msg = (f"in most of the candidate's requests the parent's clock left more time unexplained than in the "
           f"baseline's: medians of the gaps {f['median_excess_s']:.4g} s a request apart (allowed "
           f"{f['allowed_s']:.4g} s; lower quartiles {f['excess_s']:.4g} s apart), the baseline's gaps spread "
           f"{f['baseline_spread_s']:.4g} s (interquartile)")
    if steady:
        return [Finding(TIMER, False, msg + ": time was moved out of the timed calls of most requests, or the "
                        "worker's figures were changed in them", case, figure=f["median_excess_s"],
                        threshold=f["allowed_s"])]
    return [Finding(TIMER, False, msg + ", wider than the margin on this loaded host: the reported times of most "
                    "requests could not be confirmed, so the speedup is not taken as earned", case, severity=WARNING,
                    figure=f["median_excess_s"], threshold=f["allowed_s"])]
