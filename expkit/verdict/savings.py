"""What a measured speedup is worth: device time and dollars saved per million calls.

Per case the candidate saves ``t_b - t_c`` seconds a call, where ``t_b`` and ``t_c`` are
the baseline's and the candidate's median per-call times. Written with the measured speedup
``s = t_b / t_c`` that is ``t_b * (1 - 1/s)``, and the range given beside it comes from the
speedup's interval ``[lo, hi]`` with ``t_b`` held at its median. That is an approximation:
the baseline median's own uncertainty is left out, so the range is what the speedup interval
implies, not a full interval on the saving. Where the speedup interval includes 1 the range
includes 0, and the report says "no measurable saving" (the verdict rule, docs/decisions.md).

Dollars are the device time at the run's price per hour (``cost.usd_per_hour``: the dated
price list of ``conf/prices/``, or the user's override), billed per second with no minimum,
for one device. A CPU run is priced at zero unless the user sets a price, so its saving is
given in device time only. Where the manifest declares how often a case is called
(``calls_per_day``), the saving per day is the saving per call times that rate; nobody
measured the rate here, so the report calls it declared.

Every function is pure over values stored in ``result.json``, so a result written before
these fields existed gets the same figures when it is upgraded (see ``report/store.py``).
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional

PER_MILLION = 1_000_000


def _range(per_call: float, lo: float, hi: float, scale: float) -> Dict[str, float]:
    return {"estimate": per_call * scale, "low": lo * scale, "high": hi * scale}


def case_saving(case: Mapping[str, Any], usd_per_hour: Optional[float],
                calls_per_day: Optional[float] = None) -> Optional[Dict[str, Any]]:
    """Saving of one measured case (``result["measured"]["cases"][name]``), or None if unmeasured.

    Positive figures are savings, negative ones added cost (a slower candidate).
    """
    try:
        t_b = float(case["baseline"]["median"])
        s, lo, hi = float(case["speedup"]), float(case["ci_low"]), float(case["ci_high"])
    except (KeyError, TypeError, ValueError):
        return None
    if not (t_b > 0 and s > 0 and lo > 0 and hi > 0):
        return None
    per_call = t_b * (1 - 1 / s)
    # A higher speedup saves more, so the interval's low end gives the low saving.
    low, high = t_b * (1 - 1 / lo), t_b * (1 - 1 / hi)
    out: Dict[str, Any] = {
        "seconds_per_call": _range(per_call, low, high, 1.0),
        "seconds_per_million_calls": _range(per_call, low, high, PER_MILLION),
        "usd_per_million_calls": None,
        "calls_per_day": calls_per_day,
        "seconds_per_day": None,
        "usd_per_day": None,
    }
    if usd_per_hour is not None:
        out["usd_per_million_calls"] = _range(per_call, low, high, PER_MILLION * usd_per_hour / 3600)
    if calls_per_day is not None:
        out["seconds_per_day"] = _range(per_call, low, high, calls_per_day)
        if usd_per_hour is not None:
            out["usd_per_day"] = _range(per_call, low, high, calls_per_day * usd_per_hour / 3600)
    return out


def savings(cases: Mapping[str, Mapping[str, Any]], cost: Mapping[str, Any],
            calls_per_day: Mapping[str, Optional[float]]) -> Dict[str, Any]:
    """The ``savings`` block of ``result.json`` (schema 2) for every measured case.

    ``cost`` is the run's ``cost`` block (its ``usd_per_hour`` may be None: price unknown);
    ``calls_per_day`` maps case names to their declared rate (missing or None: not declared).
    """
    rate = cost.get("usd_per_hour")
    note = cost.get("price_source") or cost.get("note") or ""
    per_case = {}
    for name, c in cases.items():
        s = case_saving(c, rate, calls_per_day.get(name))
        if s is not None:
            per_case[name] = s
    return {"usd_per_hour": rate, "price_source": note, "cases": per_case}
