"""The words a report may use for a number, by the evidence behind it (docs/decisions.md).

* "demonstrated" only with a measured interval behind it; "asserted" for a claimed
  figure nobody measured here (or that the run could not measure). A speedup measured
  where the run never identified the kernel the claim is about (no ``expect.must_run``)
  is "measured for the candidate as called", not demonstrated for that kernel.
* "faster" or "slower" only where the whole interval is on one side of 1; where it
  includes 1, "no measurable difference".
"""

from __future__ import annotations

from typing import Optional


def fmt_x(x: Optional[float]) -> str:
    if x is None or x != x:
        return "n/a"
    return f"{x:.3g}×" if x < 10 else f"{x:.1f}×"


def direction(lo: float, hi: float) -> str:
    if lo > 1.0:
        return "faster"
    if hi < 1.0:
        return "slower"
    return "no measurable difference"


def speed_phrase(speedup: float, lo: float, hi: float, confidence: float) -> str:
    """E.g. "1.52× faster (95% interval 1.49×–1.55×)"."""
    word = direction(lo, hi)
    interval = f"{confidence:.0%} interval {fmt_x(lo)}–{fmt_x(hi)}"
    if word == "faster":
        return f"{fmt_x(speedup)} faster ({interval})"
    if word == "slower":
        return f"{fmt_x(1 / speedup)} slower, a speedup of {fmt_x(speedup)} ({interval})"
    return f"no measurable difference: {fmt_x(speedup)} ({interval} includes 1×)"


def fmt_num(x: Optional[float]) -> str:
    """A count or figure to three significant digits; from 1000 up, whole with thousands separators."""
    if x is None:
        return "n/a"
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:,.0f}"


def fmt_time(seconds: Optional[float]) -> str:
    if seconds is None or seconds != seconds:
        return "n/a"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
        if abs(seconds) >= scale:
            return f"{seconds / scale:.4g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


#: What a run with no ``expect.must_run`` says about the kernel (``checks/expectations.py``'s
#: ``unidentified``): the speedup is measured for the candidate as called, and nothing
#: shows that it is the intended kernel's.
UNIDENTIFIED = "the intended kernel was not identified"
NOT_CHECKED = "not checked: "


def unidentified(result: dict) -> bool:
    """Whether the run never identified the kernel the claim is about (no ``expect.must_run``)."""
    return any(c.get("check") == "identity" and str(c.get("message", "")).startswith(NOT_CHECKED + UNIDENTIFIED)
               for c in result.get("checks") or [])


def of_cases(result: dict) -> str:
    """What the headline figure is, where the run measured more than one case: ``, the
    geometric mean of its 2 cases (27.8× to 121×)``; nothing for one case (the figure is
    the case's own). See ``verdict/stats.py``'s ``overall``."""
    figures = [c["speedup"] for c in ((result.get("measured") or {}).get("cases") or {}).values()
               if c.get("speedup") is not None]
    if len(figures) < 2:
        return ""
    return f", the geometric mean of its {len(figures)} cases ({fmt_x(min(figures))} to {fmt_x(max(figures))})"


def overall_definition(result: dict) -> str:
    """The report's line saying what the headline figure is and what its interval covers
    (empty for one case)."""
    overall = (result.get("measured") or {}).get("overall") or {}
    n = int(overall.get("cases") or 0)
    if n < 2:
        return ""
    aggregate = (result.get("claim") or {}).get("aggregate") or "all"
    rule = "every case supported" if aggregate == "all" else "one case supported"
    return (f"The headline figure is the geometric mean of the {n} cases' speedups, each case weighing the same; "
            "its interval is the geometric mean of their bounds, an interval for these cases together that allows "
            "for their errors moving together (wider than for independent errors). Where the cases differ by more "
            "than their intervals it lies between them and may exclude each case's own figure. The verdict does not "
            f"read it: each case is judged against its bar, and the claim needs {rule} (aggregate `{aggregate}`).")


def headline(result: dict) -> str:
    """The one sentence a reader can quote; the first line of every report."""
    verdict = result["verdict"]
    claim = result["claim"]
    said = f"{fmt_x(claim['speedup'])}"
    who = []
    if claim.get("source"):
        who.append(claim["source"])
    if claim.get("claimed_on"):
        who.append(f"on {claim['claimed_on']}")
    src = f" ({', '.join(who)})" if who else ""
    overall = result.get("measured", {}).get("overall")
    where = result.get("environment", {}).get("where", "this machine")
    if verdict == "invalid":
        first = result["reasons"][0] if result["reasons"] else "a check failed"
        return (f"**INVALID**: the claimed {said} speedup{src} is asserted, not demonstrated: "
                f"{first}.")
    if not overall:
        first = result["reasons"][0] if result["reasons"] else "no case was measured"
        return (f"**INCONCLUSIVE**: the claimed {said} speedup{src} is neither demonstrated nor refuted on "
                f"{where}: nothing was measured ({first}).")
    phrase = speed_phrase(overall["speedup"], overall["ci_low"], overall["ci_high"], overall["confidence"])
    phrase += of_cases(result)
    if verdict == "supported" and unidentified(result):
        # The interval is behind the candidate's speedup, nothing behind the kernel's.
        return (f"**SUPPORTED** for the candidate as called: the claimed {said} speedup{src} is measured on {where}, "
                f"but not demonstrated for the intended kernel, which was never identified (the manifest names no "
                f"`expect.must_run`): measured {phrase}.")
    if verdict == "supported":
        return (f"**SUPPORTED**: the claimed {said} speedup{src} is demonstrated on {where}: "
                f"measured {phrase}.")
    e2e = result.get("end_to_end") or {}
    micro_refuted = any(c.get("verdict") == "refuted" for c in (result.get("measured", {}).get("cases") or {}).values())
    if verdict == "refuted" and e2e.get("refutes") and e2e.get("measured") and not micro_refuted:
        # Refuted by the workload the claim names (expkit.workload), not by the kernel's own timing.
        m = e2e["measured"]
        return (f"**REFUTED**: the claimed {said} speedup{src} does not carry over to the workload "
                f"`{e2e.get('name')}` it is for, on {where}: the kernel alone measured {phrase}; the workload runs "
                f"{speed_phrase(m['speedup'], m['ci_low'], m['ci_high'], m.get('confidence', 0.95))}.")
    if verdict == "refuted":
        return (f"**REFUTED**: the claimed {said} speedup{src} is not borne out on {where}: "
                f"measured {phrase}.")
    first = result["reasons"][0] if result.get("reasons") else ""
    lost = result.get("measured", {}).get("unmeasured") or {}
    if lost:
        # A declared case with no estimate (result.json 5): the claim rests on every case.
        name, why = next(iter(lost.items()))
        more = f" (and {len(lost) - 1} more)" if len(lost) > 1 else ""
        return (f"**INCONCLUSIVE**: the claimed {said} speedup{src} is neither demonstrated nor refuted on "
                f"{where}: the measured cases ran {phrase}, but case `{name}`{more} could not be measured: {why}.")
    if first and not first.startswith("speedup ["):
        # Made inconclusive by a warning (share, load, plausibility, the workload), whatever the
        # interval: the reason comes first, and the interval may clear or miss the bar.
        return (f"**INCONCLUSIVE**: the claimed {said} speedup{src} is neither demonstrated nor refuted on "
                f"{where}: measured {phrase}, but {first}.")
    return (f"**INCONCLUSIVE**: the claimed {said} speedup{src} is neither demonstrated nor refuted on "
            f"{where}: measured {phrase}, and the interval straddles the claim's bar.")
