"""The value a run ends as: :class:`Result`, with its cases and their times.

Made from a run's stored ``result.json`` alone (:meth:`Result.from_result`), so that a
result returned at the end of :func:`expkit.run` and one read back later by
:func:`expkit.load` are the same value. ``__repr__`` and ``_repr_markdown_`` (what a
notebook shows) print a short summary: verdict, reasons, one line or row per case, the
report's path.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, List, Mapping, Optional, Tuple

__all__ = ["SideTime", "CaseResult", "Overall", "Result"]


@dataclass(frozen=True)
class SideTime:
    """One side's time per call in one case: the median with its interval, and the sample count."""

    median_s: float
    ci_low_s: float
    ci_high_s: float
    n: int

    def __post_init__(self) -> None:
        if self.n < 0:
            raise ValueError(f"SideTime: n must be >= 0, got {self.n}")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "SideTime":
        return cls(float(d["median"]), float(d["ci_low"]), float(d["ci_high"]), int(d["n"]))


@dataclass(frozen=True)
class CaseResult:
    """One case: the speedup's estimate and interval against the claim, and both sides' times.

    ``baseline`` and ``candidate`` are the figure the verdict was judged on, with their
    intervals: ``judged_on`` says which -- ``kernel`` (the GPU's own record of each
    call's kernels, ``measure.timer=kernel``) or ``call`` (the whole call: CUDA events on
    a GPU, the host's clock on a CPU). Beside it, each side's median **kernel time** and
    **call time**, ``None`` where the run did not measure that figure (no kernel time on
    a CPU, with ``measure.timer=events`` or without cupti-python), and the speedup in
    each figure (``result.json``'s ``timing.cases``, see ``timing/figures.py``).
    """

    name: str
    verdict: Optional[str]
    speedup: float
    ci_low: float
    ci_high: float
    confidence: float
    claimed: float
    threshold: Optional[float]
    baseline: SideTime
    candidate: SideTime
    judged_on: str = "call"
    baseline_kernel_s: Optional[float] = None
    candidate_kernel_s: Optional[float] = None
    baseline_call_s: Optional[float] = None
    candidate_call_s: Optional[float] = None
    kernel_speedup: Optional[float] = None
    call_speedup: Optional[float] = None
    warnings: Tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.ci_low <= self.ci_high:
            raise ValueError(f"CaseResult {self.name}: ci_low {self.ci_low} > ci_high {self.ci_high}")
        if self.judged_on not in ("kernel", "call"):
            raise ValueError(f"CaseResult {self.name}: judged_on must be kernel or call, got {self.judged_on!r}")

    @classmethod
    def from_dict(cls, name: str, d: Mapping[str, Any], figures: Optional[Mapping[str, Any]] = None) -> "CaseResult":
        """From ``result.json``'s ``measured.cases[name]`` and, where stored, ``timing.cases[name]``."""
        f = figures or {}
        judged = "kernel" if f.get("judged_on") == "kernel" else "call"
        baseline, candidate = SideTime.from_dict(d["baseline"]), SideTime.from_dict(d["candidate"])

        def side(key: str, name_: str, own: SideTime) -> Optional[float]:
            v = (f.get(name_) or {}).get(key)
            if v is None and key == "call_median" and judged == "call":
                return own.median_s  # the verdict's figure is the call time
            return None if v is None else float(v)

        def ratio(b: Optional[float], c: Optional[float]) -> Optional[float]:
            return b / c if b is not None and c else None

        bk, ck = side("kernel_median", "baseline", baseline), side("kernel_median", "candidate", candidate)
        bc, cc = side("call_median", "baseline", baseline), side("call_median", "candidate", candidate)
        return cls(
            name=name, verdict=d.get("verdict"), speedup=float(d["speedup"]), ci_low=float(d["ci_low"]),
            ci_high=float(d["ci_high"]), confidence=float(d["confidence"]), claimed=float(d["claimed"]),
            threshold=None if d.get("threshold") is None else float(d["threshold"]),
            baseline=baseline, candidate=candidate, judged_on=judged,
            baseline_kernel_s=bk, candidate_kernel_s=ck, baseline_call_s=bc, candidate_call_s=cc,
            kernel_speedup=ratio(bk, ck), call_speedup=ratio(bc, cc), warnings=tuple(d.get("warnings") or ()),
        )


@dataclass(frozen=True)
class Overall:
    """Geometric mean of the cases' speedups, with their bounds combined the same way."""

    speedup: float
    ci_low: float
    ci_high: float
    confidence: float
    cases: int


@dataclass(frozen=True)
class Result:
    """A finished run, as stored in its folder: what :func:`run` returns and :func:`load` reads.

    ``exit_code`` is what ``expkit run`` exits with for this verdict (0 supported,
    1 refuted, 3 invalid, 4 inconclusive). ``cases`` holds the cases that were measured,
    in the manifest's order; an ``invalid`` run stopped by its preflight has none.
    ``unmeasured``: each declared case with no estimate, and why (it makes an ``all``
    claim ``inconclusive``).
    """

    name: str
    verdict: str
    reasons: Tuple[str, ...]
    exit_code: int
    cases: Tuple[CaseResult, ...]
    overall: Optional[Overall]
    run_dir: Path
    report: Path
    wall_seconds: Optional[float] = None
    seed: Optional[int] = None
    unmeasured: Mapping[str, str] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        from ..verdict.rules import EXIT_CODES

        if self.verdict not in EXIT_CODES:
            raise ValueError(f"Result: unknown verdict {self.verdict!r} (one of {', '.join(EXIT_CODES)})")

    @property
    def ok(self) -> bool:
        """True when the claim is supported."""
        return self.verdict == "supported"

    def case(self, name: str) -> CaseResult:
        for c in self.cases:
            if c.name == name:
                return c
        raise KeyError(f"{self.name}: no measured case {name!r} (measured: {', '.join(c.name for c in self.cases)})")

    @classmethod
    def from_result(cls, result: Mapping[str, Any], run_dir: Path) -> "Result":
        """Build from a ``result.json`` dict (schema 2; older ones upgraded by ``report.store.load_result``)."""
        from ..report import store
        from ..verdict.rules import EXIT_CODES

        measured = result.get("measured") or {}
        figures = (result.get("timing") or {}).get("cases") or {}
        cases = tuple(CaseResult.from_dict(n, d, figures.get(n)) for n, d in (measured.get("cases") or {}).items())
        o = measured.get("overall")
        overall = Overall(float(o["speedup"]), float(o["ci_low"]), float(o["ci_high"]), float(o["confidence"]),
                          int(o["cases"])) if o else None
        run_dir = Path(run_dir)
        return cls(name=str(result["name"]), verdict=str(result["verdict"]), reasons=tuple(result.get("reasons") or ()),
                   exit_code=EXIT_CODES[result["verdict"]], cases=cases, overall=overall, run_dir=run_dir,
                   report=run_dir / store.REPORT, wall_seconds=result.get("wall_seconds"), seed=result.get("seed"),
                   unmeasured=dict(measured.get("unmeasured") or {}))

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
