"""When an audit measures an ``inconclusive`` candidate again (:mod:`.audit`).

A candidate whose verdict is ``inconclusive`` with a measured speedup runs again one preset
up :data:`LADDER`, at most ``retries`` times, while the retries' worker seconds stay within
``budget``: a retry starts only if what :meth:`Retries.predict` takes it to cost fits what is
left.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence, Tuple

from ..manifest.settings import load_settings
from ..report import audit_report as rep

#: Presets from the cheapest; an inconclusive candidate moves one step up per retry.
LADDER = ("quick", "default", "rigorous")


def with_preset(overrides: Sequence[str], preset: str) -> Tuple[str, ...]:
    """``overrides`` at ``preset``: its ``measure=`` first, any other ``measure=`` dropped."""
    return (f"measure={preset}",) + tuple(o for o in overrides if not o.lstrip("+~").startswith("measure="))


def next_preset(preset: str) -> Optional[str]:
    """The preset above ``preset`` on :data:`LADDER`; None at its top or off it."""
    return LADDER[LADDER.index(preset) + 1] if preset in LADDER and preset != LADDER[-1] else None


#: How far past its estimate a retry may run before the budget's check is wrong: the estimate
#: (:meth:`Retries.predict`) times this. On the H200 level-1 audit the three retries took
#: 0.83-1.23 times their estimate (evidence/batch-audit/kernelbench-l1-gpu/).
RETRY_MARGIN = 2.0


class Retries:
    """Which inconclusive attempts run again: at most ``retries`` each, predicted cost within ``budget``."""

    def __init__(self, overrides: Sequence[str], retries: int, budget: Optional[float]) -> None:
        self.overrides, self.retries, self.budget = tuple(overrides), int(retries), budget
        self.spent = 0.0
        self.committed: Dict[str, float] = {}
        self._measure: Dict[str, Any] = {}

    def _settings(self, preset: str) -> Any:
        if preset not in self._measure:
            self._measure[preset] = load_settings(list(with_preset(self.overrides, preset))).measure
        return self._measure[preset]

    def _cap(self, preset: str) -> float:
        return float(self._settings(preset).max_seconds)

    def predict(self, result: Optional[Dict[str, Any]], seconds: float, preset: str, nxt: str) -> float:
        """What a retry at ``nxt`` is taken to cost, from the attempt at ``preset`` that took ``seconds``.

        At most that attempt's seconds times the ratio of the presets' ``measure.max_seconds``
        (the most its measurement may grow). Where the attempt says how many rounds each
        process measured, :data:`RETRY_MARGIN` times an estimate, if smaller: the measurement
        grows to the ``min_rounds`` ``nxt`` asks of a process, the rest of the attempt stays as
        it was."""
        bound = seconds * max(1.0, self._cap(nxt) / max(self._cap(preset), 1e-9))
        growth = self._growth(result, nxt)
        measuring = float((((result or {}).get("stages") or {}).get("measure")) or 0.0)
        if growth is None or not 0.0 < measuring <= seconds:
            return bound
        return min(bound, RETRY_MARGIN * (seconds - measuring + measuring * growth))

    def _growth(self, result: Optional[Dict[str, Any]], nxt: str) -> Optional[float]:
        """How many times its rounds the process with the fewest must measure at ``nxt``; None
        where a case does not say how many rounds each process measured."""
        need = int(self._settings(nxt).min_rounds)
        growth = 1.0
        for case in (((result or {}).get("measured") or {}).get("cases") or {}).values():
            try:
                rounds = [int(p["rounds"]) for p in case.get("per_process") or []]
            except (KeyError, TypeError, ValueError):
                return None
            if not rounds or min(rounds) < 1:
                return None
            growth = max(growth, need / min(rounds))
        return growth

    def decide(self, name: str, result: Optional[Dict[str, Any]], attempt: int, preset: str,
               seconds: float) -> Optional[str]:
        """The preset to run ``name`` at next, or None: its verdict is final."""
        if result is None or result.get("verdict") != "inconclusive" or not rep.is_correct(result):
            return None
        nxt = next_preset(preset)
        if nxt is None or attempt > self.retries:
            return None
        predicted = self.predict(result, seconds, preset, nxt)
        if self.budget is not None and self.spent + sum(self.committed.values()) + predicted > self.budget:
            return None
        self.committed[name] = predicted
        return nxt

    def finished(self, name: str, attempt: int, seconds: float) -> None:
        if attempt > 1:
            self.spent += seconds
            self.committed.pop(name, None)
