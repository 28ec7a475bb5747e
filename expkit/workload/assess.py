"""The parent's half of the workload comparison: raw samples in, estimate, prediction and verdict out.

:func:`expkit.bench.sides.workload_pair.collect_pair` asks each side's worker for its
workload's outputs, profile, evidence and timed blocks, and returns plain data; :func:`judge` runs where the verdict
is made and turns the raw samples into an estimate, a prediction and a comparison. Like
the kernel's, the workload's statistics are the parent's own. When the claim names the
workload (``end_to_end.claim``), its interval is judged like a case
(``verdict.judge_case``) and :func:`expkit.verdict.pipeline.end_to_end` lets a refuted workload
refute the run.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Dict, Mapping, Optional, Tuple

from ..core.findings import WARNING, Finding
from ..verdict import stats
from ..verdict.rules import judge_case
from .prediction import Agreement, Interval, Prediction, compare, predict


def _finding(d: Mapping[str, Any]) -> Finding:
    names = Finding.__dataclass_fields__
    return Finding(**{k: v for k, v in d.items() if k in names})


@dataclass(frozen=True)
class EndToEndResult:
    """Everything the report says about the workload; ``skipped`` says why it was not measured."""

    name: str
    case: Optional[str]
    skipped: Optional[str] = None
    estimate: Any = None
    method: str = ""
    stopped: str = ""
    samples: Mapping[str, Tuple[float, ...]] = field(default_factory=dict)
    prediction: Optional[Prediction] = None
    agreement: Optional[Agreement] = None
    judged: Any = None
    claim: Optional[float] = None
    tolerance: Optional[float] = None
    findings: Tuple[Finding, ...] = ()
    evidence: Mapping[str, Any] = field(default_factory=dict)

    @property
    def refutes(self) -> bool:
        return self.judged is not None and self.judged.verdict == "refuted"

    def to_dict(self) -> Dict[str, Any]:
        """The ``end_to_end`` block of result.json (see "Outputs" in docs/manifest.md)."""

        def iv(i: Optional[Interval]) -> Optional[Dict[str, float]]:
            return None if i is None else {"value": i.value, "low": i.low, "high": i.high}

        est = self.estimate
        measured = None
        if est is not None:
            measured = {"speedup": est.speedup, "ci_low": est.ci_low, "ci_high": est.ci_high,
                        "confidence": est.confidence, "baseline": asdict(est.baseline),
                        "candidate": asdict(est.candidate), "warnings": list(est.warnings),
                        "method": self.method, "stopped": self.stopped}
        pred = None
        if self.prediction is not None:
            pr = self.prediction
            pred = {"speedup": iv(pr.speedup), "share": iv(pr.share), "share_source": pr.share_source,
                    "micro": iv(pr.micro), "formula": "1 / ((1 - f) + f / s)"}
        ev = dict(self.evidence)
        return {
            "name": self.name,
            "case": self.case,
            "skipped": self.skipped,
            "claim": self.claim,
            "tolerance": self.tolerance,
            "measured": measured,
            "samples": {k: list(v) for k, v in self.samples.items()},
            "prediction": pred,
            "agreement": None if self.agreement is None else {"label": self.agreement.label,
                                                              "short": self.agreement.short,
                                                              "detail": self.agreement.detail},
            "judged": None if self.judged is None else {"verdict": self.judged.verdict,
                                                        "threshold": self.judged.threshold,
                                                        "reason": self.judged.reason},
            "refutes": self.refutes,
            "baseline": ev.get("baseline"),
            "candidate": ev.get("candidate"),
            "grown": ev.get("grown", []),
            "late_compilation": ev.get("late_compilation"),
        }


def judge(lm: Any, collected: Optional[Mapping[str, Any]], estimates: Mapping[str, Any], settings: Any, *,
          seed: int = 0, skip: Optional[str] = None) -> EndToEndResult:
    """The workload's estimate, the micro result's prediction, their comparison and, where
    the claim names the workload, its judgement (see the module docstring).

    ``collected`` is what :func:`collect` returned; ``skip`` (a reason) records the block
    without it, e.g. when the run was invalid before the workload was reached."""
    m = lm.manifest
    e2e = m.end_to_end
    case = e2e.case or (m.cases[0].name if m.cases else None)
    tolerance = e2e.tolerance if e2e.tolerance is not None else m.claim.tolerance
    base = dict(name=e2e.name, case=case, claim=e2e.claim, tolerance=tolerance)
    if skip is not None or collected is None:
        return EndToEndResult(**base, skipped=skip or "not run")
    findings = [_finding(f) for f in collected.get("findings", ())]
    evidence = collected.get("evidence") or {}
    if collected.get("skipped"):
        return EndToEndResult(**base, skipped=collected["skipped"], findings=tuple(findings), evidence=evidence)
    b, c = list(collected["samples"]["baseline"]), list(collected["samples"]["candidate"])
    est = stats.estimate(b, c, confidence=settings.measure.confidence, resamples=settings.measure.bootstrap,
                         seed=seed % (2**32))
    measured = Interval(est.speedup, est.ci_low, est.ci_high)
    where = f"workload {e2e.name}"
    prediction = agreement = None
    micro = estimates.get(case) if case is not None else None
    if micro is not None:
        sh = collected.get("share")
        share = Interval(sh["value"], sh["low"], sh["high"]) if sh else None
        prediction = predict(Interval(micro.speedup, micro.ci_low, micro.ci_high), share)
        agreement = compare(prediction, measured)
        if agreement.short:
            findings.append(Finding("end_to_end:prediction", False, f"{agreement.label}: {agreement.detail}", where,
                                    severity=WARNING, figure=est.speedup, threshold=prediction.speedup.low))
    judged = None
    if e2e.claim is not None:
        judged = judge_case(e2e.name, est, e2e.claim, tolerance, bool(collected.get("budget_spent")))
    return EndToEndResult(**base, estimate=est, method=collected.get("method", ""),
                          stopped=collected.get("stopped", ""), samples={"baseline": tuple(b), "candidate": tuple(c)},
                          prediction=prediction, agreement=agreement, judged=judged, findings=tuple(findings),
                          evidence=evidence)
