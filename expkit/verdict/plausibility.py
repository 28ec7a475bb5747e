"""Plausibility: speedups nobody should believe without a second look.

A supported speedup above ``max_plausible_speedup`` (10x unless the manifest's
``expect.max_plausible_speedup`` says more) or a candidate time below what the declared
``flops``/``bytes`` allow on the device (:mod:`.roofline`) turns the verdict into
``inconclusive`` (check name ``plausibility``). Both rules read only the estimates, the
manifest and the catalog, so they sit with the verdict rules: the bench that times the
code has no say in them.
"""

from __future__ import annotations

from typing import Any, Collection, List, Mapping, Optional, Sequence

from ..core.findings import WARNING, Finding
from ..manifest.settings import DefenceSettings
from . import roofline
from .rules import inconclusive_when

PLAUSIBILITY = "plausibility"


def plausibility(manifest: Any, estimates: Mapping[str, Any], gpu_name: Optional[str],
                 d: DefenceSettings, busy: Collection[str] = ()) -> List[Finding]:
    """Speedups nobody should believe without a second look (``WARNING`` findings).

    Two rules, each named in its message: the point estimate above the plausible
    factor (the manifest's ``expect.max_plausible_speedup``, else ``d``'s), and, where
    the case declares ``flops``/``bytes``, a candidate median time that would put it
    above the device's catalog peak (compute, DRAM bandwidth or the roofline of the
    two; ``roofline.side_rates``). The factor can be acknowledged in the manifest;
    the roofline cannot (fix the declared work or the catalog instead).

    ``busy``: the cases timed while other work held the host's cores (a ``contention``
    warning). There the likelier cause of a factor above the plausible is a side slowed by
    the wait, and the message says so: with two busy processes on the 2-core CPU machine and
    two threads allowed, a baseline on torch's pool of two measured 54.5x and 57.8x slower
    than one-thread candidates (evidence/README.md)."""
    out: List[Finding] = []
    limit = getattr(manifest.expect, "max_plausible_speedup", None)
    source = "expect.max_plausible_speedup" if limit else "defences.max_plausible_speedup"
    limit = limit or d.max_plausible_speedup
    for case in manifest.cases:
        est = estimates.get(case.name)
        if est is None:
            continue
        if est.speedup > limit:
            why = ("the host was busy while it was timed (the contention warnings), and a wait for cores can slow "
                   "one side far more than the other, a pool of threads most; measure on a quiet machine"
                   if case.name in busy else
                   "look for a replayed result, skipped work or an unfair baseline before believing it")
            out.append(Finding(PLAUSIBILITY, False,
                               f"measured {est.speedup:.3g}x is above the plausible factor {limit:g}x ({source}): "
                               f"{why}; if the factor is expected, say so with expect.max_plausible_speedup",
                               case.name, severity=WARNING, figure=est.speedup, threshold=limit))
        flops, nbytes = getattr(case, "flops", None), getattr(case, "bytes", None)
        if flops is None and nbytes is None:
            continue
        try:
            work = roofline.Work(flops, nbytes, getattr(case, "precision", None))
            peaks = roofline.peaks_for(gpu_name, work.precision)
            rates = roofline.side_rates(work, est.candidate.median, peaks)
        except Exception:  # a broken catalog never fails a run; the factor rule still applies
            continue
        over = {k: rates[k] for k in ("compute_fraction", "memory_fraction", "roofline_fraction")
                if rates.get(k) is not None and rates[k] > 1}
        if over:
            what = ", ".join(f"{k.replace('_', ' ')} {v:.2f}" for k, v in over.items())
            out.append(Finding(PLAUSIBILITY, False,
                               f"the candidate's {est.candidate.median:.3g} s per call would beat the device's peak "
                               f"for the declared work ({what}): the declared flops/bytes or the timing is wrong",
                               case.name, severity=WARNING, figure=max(over.values()), threshold=1.0))
    return out


def apply_plausibility(v: Any, found: Sequence[Finding]) -> Any:
    """``supported`` becomes ``inconclusive`` when any plausibility check fired."""
    return inconclusive_when(v, [f for f in found if f.check == PLAUSIBILITY])
