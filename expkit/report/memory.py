"""The report's "Harness memory" section: the memory plan and what each side measured.

From ``result.json``'s ``memory`` (the plan of ``bench/sides/memory_plan.py`` and, since
result.json 4, ``measured`` from ``bench/sides/ledger.py``). The plan is a projection from one
plain call's bytes; the measured peaks are each side's worker's own, largest over the
run's pairs of workers: on a GPU torch's allocator (tensors, and what it held from the
device), on the host the resident set. Neither counts the CUDA context (about half a
GiB a process) nor the parent.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional

from .formatting import cell, fmt_duration

GiB = float(1 << 30)
#: What a timed block's held bytes are, in words (``bench/sides/memory_plan.py`` and
#: ``bench/defences/commit.py``: a block keeps up to 0.5 GiB of outputs for the recheck's pick).
BLOCK_HELD = "the input sets, the copies the plan keeps, and up to 0.50 GiB of outputs committed for the recheck's pick"
#: The requests that judge (``bench/sides/judge.py``), and what they make of their own.
CHECKING = frozenset({"judge", "recheck", "expect"})
CHECKS_OWN = "the checks' tensors, the float64 reference among them"

#: The longest requests shown per side.
LONGEST = 3


def _gib(n: Optional[float]) -> str:
    return "n/a" if n is None else f"{n / GiB:.2f} GiB"


def _peak(p: Mapping[str, Any], key: str) -> str:
    got = p.get(key)
    return "n/a" if not got else f"{_gib(got['bytes'])} (`{got['request']}`)"


def _plan_line(mem: Mapping[str, Any]) -> Optional[str]:
    if mem.get("input_sets") is None:
        return None
    if mem.get("plain_peak_bytes") is None:
        return f"{mem['input_sets']} input set(s); not sized against a plain call."
    held = [name for key, name in (("hold_previous", "the previous trial's tensors"),
                                   ("keep_pristine", "a pristine copy of a rechecked call's inputs"),
                                   ("clone_for_baseline", "the baseline's own copy of a trial's inputs"))
            if mem.get(key)]
    line = (f"One plain call of the baseline peaked at {_gib(mem['plain_peak_bytes'])} above its start; the plan "
            f"projects {_gib(mem.get('projected_bytes'))} for both workers against a budget of "
            f"{_gib(mem.get('budget_bytes'))}")
    if mem.get("free_bytes"):
        line += f" ({_gib(mem['free_bytes'])} free)"
    where = "on the host" if mem.get("reference") == "host" else "beside the code under test"
    line += (f"; {mem['input_sets']} input set(s), the float64 reference {where}"
             f"; held: {', '.join(held) if held else 'no extra copies'}.")
    return line


def _over_budget(role: str, side: Mapping[str, Any], budget: Optional[int]) -> Optional[str]:
    """Where a side's device tensors peaked above the plan's budget: what was held when that
    request began (left alive by the requests before it) and what the request itself added."""
    peak = (side.get("peaks") or {}).get("peak_allocated")
    if not budget or not peak or peak["bytes"] <= budget:
        return None
    req = (side.get("requests") or {}).get(peak["request"]) or {}
    held = req.get("held_allocated")
    line = (f"The {role}'s worker went over the budget: {_gib(peak['bytes'])} of tensors in `{peak['request']}`, "
            f"{_gib(peak['bytes'] - budget)} above {_gib(budget)}")
    if held is None:
        return line + "."
    what = BLOCK_HELD if peak["request"] == "block" else "what the requests before it left alive"
    own = f" ({CHECKS_OWN})" if peak["request"] in CHECKING else ""
    return line + (f": {_gib(held)} was held when the request began ({what}), "
                   f"{_gib(max(0, peak['bytes'] - held))} was the request's own{own}.")


def memory_context(result: Mapping[str, Any]) -> Optional[Dict[str, Any]]:
    """The section's rows, or None where the run stored no memory figures."""
    mem = result.get("memory")
    if not mem:
        return None
    rows: List[Dict[str, str]] = []
    over: List[str] = []
    for role, side in (mem.get("measured") or {}).items():
        line = _over_budget(role, side, mem.get("budget_bytes"))
        if line is not None:
            over.append(line)
        reqs = side.get("requests") or {}
        longest = sorted(reqs.items(), key=lambda kv: -(kv[1].get("seconds") or 0))[:LONGEST]
        rows.append({"side": role,
                     "allocated": _peak(side.get("peaks") or {}, "peak_allocated"),
                     "reserved": _peak(side.get("peaks") or {}, "peak_reserved"),
                     "rss": _peak(side.get("peaks") or {}, "peak_rss"),
                     "longest": ", ".join(f"`{op}` {fmt_duration(r.get('seconds') or 0)} ({r.get('count')}x)"
                                          for op, r in longest)})
    return {"plan": _plan_line(mem), "notes": [cell(n) for n in mem.get("notes") or []], "rows": rows,
            "over": over, "measured": mem.get("measured") is not None}
