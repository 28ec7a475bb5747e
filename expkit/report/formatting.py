"""What every rendered artefact shares: the template environment, table cells, the
formats of money and device time, and the hint that says what would settle an
inconclusive case. The run report, the session report, the comparison and the CI
summary all render through these, so the same figure reads the same everywhere."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Optional

import jinja2

from ..verdict.stats import spread_is_the_width
from ..verdict.wording import fmt_time, fmt_x


def templates_dir() -> Path:
    """The Jinja templates, shipped beside this module (``expkit/report/templates``)."""
    return Path(__file__).resolve().parent / "templates"


# More than this many times the samples is not "measure longer": the estimate sits too near the bar.
_HOPELESS_FACTOR = 100.0


def template_env() -> jinja2.Environment:
    """The Jinja environment every expkit template renders in (strict: a missing key is a bug)."""
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )


def cell(text: Any) -> str:
    """Table cells cannot hold pipes or newlines in GitHub markdown."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def fmt_usd(x: Optional[float]) -> str:
    if x is None or x != x:
        return "unknown"
    sign = "−" if x < 0 else ""
    a = abs(x)
    if a >= 100:
        return f"{sign}${a:,.0f}"
    if a >= 1 or a == 0:
        return f"{sign}${a:.2f}"
    return f"{sign}${a:.2g}"


def fmt_duration(seconds: Optional[float]) -> str:
    """Device time at a human scale: ms and µs below a second, minutes and hours above two minutes."""
    if seconds is None or seconds != seconds:
        return "n/a"
    a = abs(seconds)
    sign = "−" if seconds < 0 else ""
    if a < 120:
        return (sign + fmt_time(a)) if a else "0 s"
    if a < 2 * 3600:
        return f"{sign}{a / 60:.3g} min"
    return f"{sign}{a / 3600:,.3g} h" if a < 1e6 * 3600 else f"{sign}{a / 3600:.3g} h"


def settle_hint(case: Mapping[str, Any]) -> Optional[str]:
    """What would settle an inconclusive case, or None if its interval already settles it.

    The interval ``[lo, hi]`` straddles the bar ``b``. To settle, the half-width on the side
    of the bar must shrink from ``s - lo`` to ``s - b`` (or from ``hi - s`` to ``b - s``), a
    factor ``k``. If the point estimate stays where it is and the width falls as ``1/sqrt(n)``
    (the usual rate, approximately true for a bootstrap interval of a median), that takes
    ``k**2`` times the samples, and so about ``k**2`` times the timed work. Both assumptions
    can fail (the estimate moves as samples come in; correlated samples narrow slower), so
    the figure is a guide to the order of magnitude, and the text says so.
    """
    try:
        s, lo, hi, b = (float(case[k]) for k in ("speedup", "ci_low", "ci_high", "threshold"))
    except (KeyError, TypeError, ValueError):
        return None
    if lo >= b or hi < b:
        return None
    timed = float(case.get("timed_seconds") or 0)
    spread = spread_is_the_width(case)
    if spread == "disagree":
        return (f"its {int(case['processes'])} processes disagree by more than the noise within each, so measuring "
                f"longer would not narrow the interval over them: measure in more processes "
                f"(`measure.processes={2 * int(case['processes'])}`) or on a quieter machine")
    if spread == "each reached":
        return (f"every one of its {int(case['processes'])} processes reached its own target, so more samples in "
                f"each would not narrow the interval over them: measure in more processes "
                f"(`measure.processes={2 * int(case['processes'])}`) or on a quieter machine")
    if s == b:
        return (f"the estimate {fmt_x(s)} sits on the bar {fmt_x(b)}: no number of samples settles it; "
                "the claim is at the edge of its tolerance")
    k = (s - lo) / (s - b) if s > b else (hi - s) / (b - s)
    factor = k * k
    side = "clear" if s > b else "fall short of"
    if factor > _HOPELESS_FACTOR:
        return (f"the estimate {fmt_x(s)} is too close to the bar {fmt_x(b)} to {side} it by measuring longer "
                f"(about {factor:,.0f}× the samples); measure on a quieter machine or revisit the tolerance")
    need = math.ceil(round(max(timed * factor, 1.0), 6))  # round first: 3.0 * 4.000000001 is 12 s, not 13
    return (f"about {factor:.1f}× the samples would let the interval {side} the bar {fmt_x(b)}, if the "
            f"estimate {fmt_x(s)} holds and the interval narrows as 1/√n: try "
            f"`measure.max_seconds={need}` (this run timed {timed:.1f} s per case)")
