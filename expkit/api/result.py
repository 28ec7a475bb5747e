"""What :func:`expkit.run` returns and :func:`expkit.load` reads: :class:`Result`.

A :class:`~expkit.report.result.RunResult` (the run's one typed, immutable value, the
one its ``result.json`` stores) together with where the run lives: its folder and its
report. A result returned at the end of :func:`expkit.run` and one read back later by
:func:`expkit.load` are the same value. ``__repr__`` and ``_repr_markdown_`` (what a
notebook shows) print a short summary: verdict, reasons, one line or row per case, the
report's path.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, List, Mapping, Optional, Tuple

from ..report import store
from ..report.result import CaseResult, Overall, RunResult, SideTime

__all__ = ["SideTime", "CaseResult", "Overall", "Result"]


@dataclass(frozen=True)
class Result:
    """A finished run, as stored in its folder (see the module docstring).

    ``record`` is the run's whole result; the fields beside it are read from it.
    ``exit_code`` is what ``expkit run`` exits with for this verdict (0 supported,
    1 refuted, 3 invalid, 4 inconclusive). ``cases`` holds the cases that were measured,
    in the manifest's order; an ``invalid`` run stopped by its preflight has none.
    ``unmeasured``: each declared case with no estimate, and why (it makes an ``all``
    claim ``inconclusive``).
    """

    record: RunResult
    run_dir: Path

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def verdict(self) -> str:
        return self.record.verdict

    @property
    def reasons(self) -> Tuple[str, ...]:
        return self.record.reasons

    @property
    def exit_code(self) -> int:
        return self.record.exit_code

    @property
    def cases(self) -> Tuple[CaseResult, ...]:
        return self.record.cases

    @property
    def overall(self) -> Optional[Overall]:
        return self.record.overall

    @property
    def unmeasured(self) -> Mapping[str, str]:
        return self.record.unmeasured

    @property
    def wall_seconds(self) -> Optional[float]:
        return self.record.wall_seconds

    @property
    def seed(self) -> Optional[int]:
        return self.record.seed

    @property
    def report(self) -> Path:
        return self.run_dir / store.REPORT

    @property
    def ok(self) -> bool:
        """True when the claim is supported."""
        return self.record.ok

    def case(self, name: str) -> CaseResult:
        return self.record.case(name)

    @classmethod
    def from_result(cls, result: Mapping[str, Any], run_dir: Path) -> "Result":
        """From a run's result: a :class:`RunResult`, or a ``result.json`` document of any
        version (upgraded first)."""
        return cls(store.upgrade(result, Path(run_dir) / store.RESULT), Path(run_dir))

    # -- display --------------------------------------------------------------------------
    def summary_lines(self) -> List[str]:
        """The short summary both reprs print: verdict, reasons, one line per case, the report."""
        lines = [f"{self.verdict.upper()}: {self.name} (exit {self.exit_code})"]
        lines += [f"  - {r}" for r in self.reasons[:5]]
        for c in self.cases:
            lines.append(f"  {c.name}: {_speedup_text(c)}")
        lines += [f"  {name}: not measured: {why}" for name, why in self.unmeasured.items()]
        lines.append(f"  report: {self.report}")
        return lines

    def __repr__(self) -> str:
        return "\n".join(self.summary_lines())

    def _repr_markdown_(self) -> str:
        out = [f"**{self.verdict.upper()}**: {self.name} (exit {self.exit_code})", ""]
        out += [f"- {r}" for r in self.reasons[:5]]
        if self.cases:
            out += ["", "| case | speedup | interval | claimed | bar | judged on | baseline per call | "
                        "candidate per call | verdict |", "|---|---|---|---|---|---|---|---|---|"]
            for c in self.cases:
                bar = "—" if c.threshold is None else f"{c.threshold:.3g}×"
                out.append(f"| {c.name} | {c.speedup:.3g}× | [{c.ci_low:.3g}, {c.ci_high:.3g}] "
                           f"({c.confidence:.0%}) | {c.claimed:.3g}× | {bar} | {c.judged_on} time | "
                           f"{_seconds(c.baseline.median_s)} | {_seconds(c.candidate.median_s)} | {c.verdict or '—'} |")
        out += [f"- `{name}`: not measured: {why}" for name, why in self.unmeasured.items()]
        out += ["", f"report: `{self.report}`"]
        return "\n".join(out)

def _speedup_text(c: CaseResult) -> str:
    bar = "" if c.threshold is None else f", bar {c.threshold:.3g}x"
    other = ""
    if c.judged_on == "kernel" and c.call_speedup is not None:
        other = f"; {c.call_speedup:.3g}x in call time"
    return (f"{c.speedup:.3g}x [{c.ci_low:.3g}, {c.ci_high:.3g}] (claimed {c.claimed:.3g}x{bar}; "
            f"{_seconds(c.baseline.median_s)} -> {_seconds(c.candidate.median_s)} per call in {c.judged_on} time"
            f"{other})")


def _seconds(s: float) -> str:
    if not math.isfinite(s):
        return str(s)
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if s >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s / 1e-9:.3g} ns"
