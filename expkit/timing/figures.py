"""Both figures of a measured case -- kernel time and call time -- and what they say together.

A GPU run with kernel time (``measure.timer=kernel``) judges the claim on each call's
kernel span (the GPU's own record) and keeps the call's CUDA-event time beside it in
every sample (``timing/measure.py``). :func:`timing_section` summarises them per case
for ``result.json``'s ``timing`` section; :func:`timing_findings` turns them into
warnings for the report. Neither changes a verdict.

**launch-bound.** When a side's median call time exceeds its median kernel time by
more than :data:`LAUNCH_BOUND_SHARE` of the call, the finding says what share of the
call lies outside its kernels, and the speedup in both figures. Why a quarter: with
the stream held, what separates a call's events from its kernels is the event pair's
own cost, the launch latency before the first kernel and any gap the GPU waits in
inside the call. For ops under ~100 us on an H200 the events read +3.2 to +3.6 us a
call above CUPTI's kernel durations cold and +0.9 to +1.1 us warm (docs/decisions.md,
"CUDA events' bias"). A quarter of the call is then
crossed by kernels shorter than about 11 us cold (3.6 / (10.8 + 3.6)), or by a call
whose GPU idles inside it; there the speedup a caller sees differs from the kernel's
by more than the claim's default tolerance -- a 1.5x kernel speedup of a 10 us
baseline is 1.32x in call time. Above the threshold the kernel-time verdict stands, and the
reader is told how much of the call it leaves out.

**One figure per case** (:func:`judged`). A speedup is a ratio of two medians, so both
must be of the same figure. A block whose kernel time could not be used (no record for
a call, the recorder's clock in doubt) fell back to its call time; if any block of a
case did, on either side, the whole case is judged on call time -- CUDA events for
every sample, as expkit judged before kernel time existed -- rather than on a mix
that would favour whichever side fell back less (a baseline that always fell back
would inflate the speedup). Blocks that fell back to the host's wall time (foreign
work on the GPU) keep it in either case: it is an upper bound no figure undercuts.
Samples.csv keeps every sample's own figures; the estimate is made on :func:`judged`.

**kernel-time.** A case judged on call time that way, or whose calls ran kernels on
another stream or device than the harness's, gets a warning that counts the samples.
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from typing import Any, Dict, List, Mapping, Optional, Sequence

from ..core.findings import WARNING, Finding
from .measure import SIDES, CaseSamples, Sample

LAUNCH_BOUND = "launch-bound"
KERNEL_TIME = "kernel-time"
#: Share of a call outside its kernels above which a side is called launch-bound (see above).
LAUNCH_BOUND_SHARE = 0.25
FLAG_WORDS = {
    "other-stream": "ran kernels on another stream than the harness's (included in its kernel time)",
    "other-device": "ran kernels on another device (included in its kernel time)",
    "other-thread": "ran kernels another thread launched during the call, autograd's backward for one "
                    "(included in its kernel time)",
    "foreign": "shared the GPU with work of no call and no harness launch (timed by the host's wall time instead)",
    "unrecorded": "had a call with no GPU record (timed by its call time instead)",
    "no-hold-record": "had no record of the harness's own hold (timed by its call time instead)",
    "clock-mismatch": "had the recorder's clock disagree with CUDA events (timed by its call time instead)",
    "recorder-error": "lost the recorder to an error (timed by its call time instead)",
    "clock-from-hold": "took the recorder's ticks from the harness's hold, CUPTI's own clock reading having disagreed",
}
#: Flags that say something about the block but cost it nothing.
INFORMATIONAL = ("other-stream", "other-device", "other-thread", "clock-from-hold")


def fell_back(cs: CaseSamples) -> int:
    """Samples of a kernel-time case whose kernel time could not be used (source ``events``)."""
    if not any(s.source == "kernel" for s in cs.samples):
        return 0
    return sum(1 for s in cs.samples if s.source == "events")


def judged(cs: CaseSamples) -> CaseSamples:
    """The case with every sample's ``seconds`` on one figure, for the estimate (see the
    module docstring): unchanged when no sample fell back; else call time for all
    (host wall time kept where a block fell back to it)."""
    if not fell_back(cs):
        return cs
    return replace(cs, samples=tuple(replace(s, seconds=s.call_seconds, source="events")
                                     if s.source == "kernel" and s.call_seconds is not None else s
                                     for s in cs.samples))


def _median(xs: Sequence[float]) -> Optional[float]:
    return float(statistics.median(xs)) if xs else None


def _kept(cs: CaseSamples, keep: Optional[Sequence[bool]]) -> List[Sample]:
    return list(cs.samples) if keep is None else [s for s, k in zip(cs.samples, keep) if k]


def _side(samples: Sequence[Sample]) -> Dict[str, Any]:
    kernel = [s.seconds for s in samples if s.source == "kernel"]
    calls = [s.call_seconds for s in samples if s.call_seconds is not None]
    k, c = _median(kernel), _median([float(x) for x in calls])
    share = (1.0 - k / c) if (k is not None and c) else None
    return {"median": _median([s.seconds for s in samples]), "kernel_median": k, "call_median": c,
            "outside_kernels": share}


def case_figures(cs: CaseSamples, keep: Optional[Sequence[bool]] = None) -> Dict[str, Any]:
    """One case's two figures: per side the medians of the verdict's figure, of the
    kernel time (samples whose source is ``kernel``) and of the call time, the share
    of the call outside the kernels; both speedups; how many samples had each source
    and each flag; ``judged_on``: ``kernel``, or ``call`` when :func:`judged` put the
    case on call time (None for a case without kernel time). ``keep`` leaves samples
    out (the telemetry's flags)."""
    kept = _kept(cs, keep)
    sides = {side: _side([s for s in kept if s.side == side]) for side in SIDES}

    def ratio(key: str) -> Optional[float]:
        b, c = sides["baseline"][key], sides["candidate"][key]
        return b / c if b is not None and c else None

    sources: Dict[str, int] = {}
    flags: Dict[str, int] = {}
    for s in kept:
        if s.source:
            sources[s.source] = sources.get(s.source, 0) + 1
        for f in filter(None, s.flags.split(";")):
            flags[f] = flags.get(f, 0) + 1
    figure = None
    if sources.get("kernel"):
        figure = "call" if sources.get("events") else "kernel"
    return {**sides, "kernel_speedup": ratio("kernel_median"), "call_speedup": ratio("call_median"),
            "sources": sources, "flags": flags, "judged_on": figure}


def timing_section(measured: Mapping[str, CaseSamples],
                   keep: Optional[Mapping[str, Sequence[bool]]] = None) -> Dict[str, Any]:
    """The kernel-time part of ``result.json``'s ``timing``: which figure judged the
    claim (``timer``: ``kernel``, ``events`` or ``cpu``; ``requested``; ``fallback``: why
    not what was asked, else empty) and :func:`case_figures` per case."""
    info = next((cs.info for cs in measured.values() if cs.info is not None), None)
    if info is not None:
        out: Dict[str, Any] = {"timer": info.kind, "requested": info.requested, "fallback": info.fallback}
    else:  # a timer that does not say: what its samples say, if anything
        sources = {s.source for cs in measured.values() for s in cs.samples if s.source}
        kind = next((k for k in ("kernel", "events", "cpu") if k in sources), None)
        out = {"timer": kind, "requested": None, "fallback": ""}
    out["cases"] = {name: case_figures(cs, (keep or {}).get(name)) for name, cs in measured.items()}
    return out


def _us(x: float) -> str:
    return f"{x * 1e6:.3g} us"


def timing_findings(measured: Mapping[str, CaseSamples],
                    keep: Optional[Mapping[str, Sequence[bool]]] = None) -> List[Finding]:
    """Warnings from the two figures (see the module docstring); never a verdict change."""
    out: List[Finding] = []
    for name, cs in measured.items():
        fig = case_figures(cs, (keep or {}).get(name))
        bound = [(side, fig[side]) for side in SIDES
                 if fig[side]["outside_kernels"] is not None and fig[side]["outside_kernels"] > LAUNCH_BOUND_SHARE]
        if bound:
            parts = [f"{side}: {_us(f['call_median'] - f['kernel_median'])} of each {_us(f['call_median'])} call "
                     f"({f['outside_kernels']:.0%}) is outside its kernels" for side, f in bound]
            sp = ""
            if fig["kernel_speedup"] is not None and fig["call_speedup"] is not None:
                sp = (f"; the speedup is {fig['kernel_speedup']:.3g}x in kernel time (the verdict's figure) and "
                      f"{fig['call_speedup']:.3g}x in call time")
            out.append(Finding(LAUNCH_BOUND, False, "; ".join(parts) + " (launch latency, gaps and the CUDA events' "
                               "own cost: what a caller that launches one call at a time also pays)" + sp, name,
                               severity=WARNING, figure=max(f["outside_kernels"] for _, f in bound),
                               threshold=LAUNCH_BOUND_SHARE))
        total = sum(fig["sources"].values())
        if fig["judged_on"] == "call":
            why = [FLAG_WORDS[k] for k in fig["flags"] if k in FLAG_WORDS and k not in INFORMATIONAL]
            out.append(Finding(KERNEL_TIME, False, f"judged on call time (CUDA events) for both sides: "
                               f"{fig['sources'].get('events', 0)} of {total} samples could not use their kernel time"
                               + (" (blocks that " + "; ".join(why) + ")" if why else ""), name, severity=WARNING))
        if fig["sources"].get("envelope"):
            out.append(Finding(KERNEL_TIME, False, f"{fig['sources']['envelope']} of {total} samples "
                               f"{FLAG_WORDS['foreign']}", name, severity=WARNING))
        notes = [f"{v} of {total} samples {FLAG_WORDS[k]}" for k, v in fig["flags"].items()
                 if k in ("other-stream", "other-device", "other-thread")]
        if notes:
            out.append(Finding(KERNEL_TIME, False, "; ".join(notes), name, severity=WARNING))
    return out
