"""The report's "Timing" section, from ``result.json``'s ``timing`` block alone.

The runner writes the block (``timing/figures.timing_section``: which figure judged the
claim, why it fell back where it did, and per case the kernel time and the call time
with both speedups); this module turns it into the section's lines and table, laid out
by ``templates/timing.md.j2``. Results written before kernel time existed have neither
``timer`` nor ``cases``: the section then shows the method, preset and notes only, as
it always did.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional

from ..verdict.wording import fmt_time, fmt_x
from .formatting import cell

TIMERS = {
    "kernel": "kernel time: each call's span on the GPU, from its first kernel's start to its last kernel's end, "
              "in the GPU's own record (CUPTI)",
    "events": "call time: CUDA events around each call",
    "cpu": "host clock",
}


def _share(x: Optional[float]) -> str:
    return "n/a" if x is None else f"{x:.0%}"


def _rows(cases: Mapping[str, Any]) -> List[Dict[str, str]]:
    rows = []
    for name, c in cases.items():
        for side in ("baseline", "candidate"):
            s = c.get(side) or {}
            rows.append({"case": cell(name), "side": side, "kernel": fmt_time(s.get("kernel_median")),
                         "call": fmt_time(s.get("call_median")), "outside": _share(s.get("outside_kernels")),
                         "speedup_kernel": fmt_x(c.get("kernel_speedup")) if side == "candidate" else "",
                         "speedup_call": fmt_x(c.get("call_speedup")) if side == "candidate" else ""})
    return rows


def _mix(cases: Mapping[str, Any]) -> List[str]:
    out = []
    for name, c in cases.items():
        src = c.get("sources") or {}
        if len(src) > 1:
            out.append(f"`{name}`: samples timed by " + ", ".join(f"{k} {v}" for k, v in sorted(src.items()))
                       + ("; the case is judged on call time for both sides" if c.get("judged_on") == "call" else ""))
    return out


def timing_context(timing: Mapping[str, Any]) -> Dict[str, Any]:
    """The section's figures and words (see the module docstring)."""
    cases = timing.get("cases") or {}
    has_two = any((c.get(side) or {}).get("call_median") is not None
                  for c in cases.values() for side in ("baseline", "candidate"))
    timer = timing.get("timer")
    judged = TIMERS.get(timer) if timer else None
    if judged and timing.get("fallback"):
        judged = f"{judged} ({cell(timing['fallback'])}; {timing.get('requested')} time was asked for)"
    return {
        "method": timing.get("method", "n/a"),
        "preset": timing.get("preset", "n/a"),
        "target": f"{timing.get('target_ci', 0):.1%}",
        "budget": f"{timing.get('max_seconds', 0):g} s",
        "notes": list(timing.get("notes", [])) + _mix(cases),
        "judged": judged,
        "rows": _rows(cases) if has_two else [],
    }
