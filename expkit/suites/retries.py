"""When an audit measures an ``inconclusive`` candidate again (:mod:`.audit`).

A candidate whose verdict is ``inconclusive`` with a measured speedup runs again, at most
``retries`` times, while the retries' worker seconds stay within ``budget``: a retry starts
only if what :meth:`Retries.predict` takes it to cost fits what is left. What the retry
changes follows from why its interval was wide (:meth:`Retries.next_step`): where the
spread between its processes is the width, which more rounds do not narrow, it runs at the
same preset in twice the processes; otherwise one preset up :data:`LADDER`. A candidate
whose every case was settled (its verdict is ``inconclusive`` for a reason no measurement
changes, such as an implausible speedup) is not measured again.

A retry's time limit is at least :data:`RETRY_MARGIN` times its predicted cost: the limit is
there to catch a hang, and a candidate whose first attempt finished is not hanging because
its retry measures more. Where the launcher cannot give a worker that long (a SLURM job's
``launcher.time_minutes``), the limit stops there, and a retry predicted to take longer does
not start.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ..manifest.settings import load_settings
from ..report import audit_report as rep
from ..verdict.stats import spread_is_the_width

#: Presets from the cheapest; an inconclusive candidate moves one step up per retry.
LADDER = ("quick", "default", "rigorous")
PROCESSES = "measure.processes"


def _key(override: str) -> str:
    return override.lstrip("+~").split("=", 1)[0]


def with_preset(overrides: Sequence[str], preset: str) -> Tuple[str, ...]:
    """``overrides`` at ``preset``: its ``measure=`` first, any other ``measure=`` dropped."""
    return (f"measure={preset}",) + tuple(o for o in overrides if _key(o) != "measure")


def next_preset(preset: str) -> Optional[str]:
    """The preset above ``preset`` on :data:`LADDER`; None at its top or off it."""
    return LADDER[LADDER.index(preset) + 1] if preset in LADDER and preset != LADDER[-1] else None


@dataclass(frozen=True)
class Step:
    """How one attempt measures: a preset of :data:`LADDER`, and the ``measure.processes`` a
    retry raised (None: what the preset and the audit's overrides say)."""

    preset: str
    processes: Optional[int] = None

    def overrides(self, base: Sequence[str]) -> Tuple[str, ...]:
        """``base`` at this step: its preset, and its processes in place of any given."""
        out = with_preset(base, self.preset)
        if self.processes is None:
            return out
        return tuple(o for o in out if _key(o) != PROCESSES) + (f"{PROCESSES}={self.processes}",)

    @property
    def label(self) -> str:
        """The step as a run folder's suffix and a report's word: ``default``, ``quick-p6``."""
        return self.preset if self.processes is None else f"{self.preset}-p{self.processes}"

    @property
    def words(self) -> str:
        """The step as the overrides it adds: ``measure=quick measure.processes=6``."""
        return f"measure={self.preset}" + (f" {PROCESSES}={self.processes}" if self.processes is not None else "")

    def record(self) -> Dict[str, Any]:
        return {"preset": self.preset, "processes": self.processes}

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> "Step":
        """The step a record names (``preset``, and ``processes`` from record schema 2 on)."""
        processes = data.get("processes")
        return cls(str(data["preset"]), int(processes) if processes is not None else None)


#: How far past its estimate a retry may run before the budget's check is wrong: the estimate
#: (:meth:`Retries.predict`) times this. On the H200 level-1 audit the three retries took
#: 0.83-1.23 times their estimate (evidence/batch-audit/kernelbench-l1-gpu/).
RETRY_MARGIN = 2.0


def _inconclusive_cases(result: Optional[Mapping[str, Any]]) -> Optional[List[Mapping[str, Any]]]:
    """The measured cases judged ``inconclusive``; None where the result keeps no cases, or a
    case without its verdict."""
    cases = list((((result or {}).get("measured") or {}).get("cases") or {}).values())
    if not cases or any(c.get("verdict") is None for c in cases):
        return None
    return [c for c in cases if c.get("verdict") == "inconclusive"]


def processes_of(result: Optional[Mapping[str, Any]]) -> Optional[int]:
    """How many processes the result's cases were measured in (the most of any); None if it does not say."""
    counts = [int(c.get("processes") or 1)
              for c in (((result or {}).get("measured") or {}).get("cases") or {}).values()]
    return max(counts) if counts else None


class Retries:
    """Which inconclusive attempts run again: at most ``retries`` each, predicted cost within ``budget``."""

    def __init__(self, overrides: Sequence[str], retries: int, budget: Optional[float]) -> None:
        self.overrides, self.retries, self.budget = tuple(overrides), int(retries), budget
        self.spent = 0.0
        self.committed: Dict[str, float] = {}
        #: Why an inconclusive verdict that :meth:`decide` made final was not measured again.
        self.kept: Dict[str, str] = {}
        #: Each due retry's time limit where it is above the audit's own (:meth:`bound_by`).
        self.time_limits: Dict[str, float] = {}
        self.limit: float = 0.0
        self.ceiling: Optional[float] = None
        self._measure: Dict[str, Any] = {}

    def bound_by(self, limit: float, ceiling: Optional[float]) -> None:
        """The audit's time limit on an attempt (0: none), and the longest the launcher can give
        one (None: no such limit)."""
        self.limit, self.ceiling = float(limit or 0.0), ceiling

    def _settings(self, preset: str) -> Any:
        if preset not in self._measure:
            self._measure[preset] = load_settings(list(with_preset(self.overrides, preset))).measure
        return self._measure[preset]

    def _cap(self, preset: str) -> float:
        return float(self._settings(preset).max_seconds)

    def next_step(self, result: Optional[Mapping[str, Any]], step: Step) -> Optional[Step]:
        """What an inconclusive attempt at ``step`` runs at next; None where nothing more settles it.

        Twice the processes at the same preset where, in every inconclusive case, the spread
        between processes is the width (:func:`~expkit.verdict.stats.spread_is_the_width`):
        a Student t interval over 6 processes is about 0.42 times as wide as over 3 from the
        same spread (t's quantile falls from 4.30 to 2.57 and the square root of the count
        rises). Otherwise the next preset, keeping any processes a retry raised. None where
        the result keeps cases and none of them is inconclusive."""
        cases = _inconclusive_cases(result)
        if cases is not None and not cases:
            return None
        if cases and all(spread_is_the_width(c) for c in cases):
            return Step(step.preset, 2 * max(int(c.get("processes") or 1) for c in cases))
        nxt = next_preset(step.preset)
        return Step(nxt, step.processes) if nxt is not None else None

    def predict(self, result: Optional[Mapping[str, Any]], seconds: float, step: Step, nxt: Step) -> float:
        """What a retry at ``nxt`` is taken to cost, from the attempt at ``step`` that took ``seconds``.

        In more processes at the same preset: the attempt's seconds times the ratio of the
        processes (its measurement, worker starts included, grows with them; each process's
        own target loosens as they grow, so its rounds do not).

        One preset up: at most the attempt's seconds times the ratio of the presets'
        ``measure.max_seconds`` (the most its measurement may grow). Where the attempt says
        how many rounds each process measured, :data:`RETRY_MARGIN` times an estimate, if
        smaller: the measurement grows to the ``min_rounds`` ``nxt`` asks of a process, the
        rest of the attempt stays as it was."""
        if nxt.preset == step.preset:
            had = processes_of(result) or step.processes or int(self._settings(step.preset).processes)
            return seconds * max(1.0, (nxt.processes or had) / max(had, 1))
        bound = seconds * max(1.0, self._cap(nxt.preset) / max(self._cap(step.preset), 1e-9))
        growth = self._growth(result, nxt.preset)
        measuring = float((((result or {}).get("stages") or {}).get("measure")) or 0.0)
        if growth is None or not 0.0 < measuring <= seconds:
            return bound
        return min(bound, RETRY_MARGIN * (seconds - measuring + measuring * growth))

    def _growth(self, result: Optional[Mapping[str, Any]], nxt: str) -> Optional[float]:
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

    def decide(self, name: str, result: Optional[Dict[str, Any]], attempt: int, step: Step,
               seconds: float) -> Optional[Step]:
        """The step to run ``name`` at next, or None: its verdict is final. Where an
        ``inconclusive`` verdict is final, :attr:`kept` says why it was not measured again."""
        self.kept.pop(name, None)
        if result is None or result.get("verdict") != "inconclusive":
            return None
        if not rep.is_correct(result):
            return self._keep(name, "no speedup was measured, which more measurement does not change")
        if attempt > self.retries:
            return self._keep(name, f"measured {attempt} time(s), the most --retries {self.retries} allows")
        nxt = self.next_step(result, step)
        if nxt is None:
            if _inconclusive_cases(result) != []:
                return self._keep(name, f"its interval is not the processes' spread, and {step.preset} is the "
                                        "last preset")
            first = str(next(iter(result.get("reasons") or []), "") or "")
            return self._keep(name, "every case was settled, and more measurement does not change why it is "
                                    "inconclusive" + (f": {first[:160]}" if first else ""))
        predicted = self.predict(result, seconds, step, nxt)
        left = None if self.budget is None else self.budget - self.spent - sum(self.committed.values())
        if left is not None and predicted > left:
            return self._keep(name, f"a retry at {nxt.words} was predicted at {predicted:.0f} s, with "
                                    f"{max(left, 0):.0f} s of the --budget {self.budget:g} s left")
        if self.ceiling is not None and predicted > self.ceiling:
            return self._keep(name, f"a retry at {nxt.words} was predicted at {predicted:.0f} s, longer than the "
                                    f"launcher can give a worker ({self.ceiling:.0f} s)")
        if self.limit > 0 and RETRY_MARGIN * predicted > self.limit:
            self.time_limits[name] = min(RETRY_MARGIN * predicted, self.ceiling or float("inf"))
        self.committed[name] = predicted
        return nxt

    def _keep(self, name: str, why: str) -> None:
        self.kept[name] = why
        return None

    def finished(self, name: str, attempt: int, seconds: float) -> None:
        if attempt > 1:
            self.spent += seconds
            self.committed.pop(name, None)
            self.time_limits.pop(name, None)
