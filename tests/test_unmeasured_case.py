"""Every declared case stays in the result: a case whose every round lost a side to the
telemetry's flags (a throttled clock) is listed with its reason and makes an ``all``
claim ``inconclusive``, never ``supported`` on the cases that happened to be measurable."""

from __future__ import annotations

import json
from pathlib import Path

from expkit import runner
from expkit.api.result import Result
from expkit.bench.sides import replicates as rep
from expkit.verdict.rules import INCONCLUSIVE, REFUTED, SUPPORTED, decide
from expkit.verdict.stats import Estimate, SideSummary

EXAMPLES = Path(__file__).resolve().parents[1] / "manifests" / "examples" / "cpu"
LOST = "n512-p64"


def _flag_one_case(monkeypatch):
    """Seeded fake telemetry: every sample of ``LOST`` taken at a low clock, none of the others."""

    def flags(self, name, cs):
        return [name == LOST] * len(cs.samples)

    monkeypatch.setattr(rep.Replicates, "flags", flags)


def test_a_case_every_round_of_which_was_flagged_makes_the_claim_inconclusive_and_stays_in_the_result(
        tmp_path, monkeypatch):
    _flag_one_case(monkeypatch)
    out = tmp_path / "run"
    outcome = runner.run_manifest(EXAMPLES / "honest-win.yaml", ["measure=quick"], out)
    result = json.loads((out / "result.json").read_text())
    assert result["verdict"] == INCONCLUSIVE, result["reasons"]
    assert LOST in result["measured"]["unmeasured"]
    assert "telemetry's flags" in result["measured"]["unmeasured"][LOST]
    assert any(f"[case {LOST}]: not measured" in r for r in result["reasons"]), result["reasons"]
    assert LOST not in result["measured"]["cases"] and "n256-p64" in result["measured"]["cases"]
    assert outcome.exit_code == 4
    report = (out / "report.md").read_text()
    assert f"| {LOST} | not measured | not measured | none |" in report
    assert f"`{LOST}`: not measured: every round lost a side" in report
    assert Result.from_result(result, out).unmeasured == result["measured"]["unmeasured"]


def _estimate(speedup: float) -> Estimate:
    side = SideSummary(1.0, 1.0, 1.0, 0.0, 100)
    return Estimate(speedup, speedup * 0.95, speedup * 1.05, 0.95, side, side)


def test_decide_judges_an_unmeasured_case_inconclusive_under_all_and_not_under_any():
    est = {"a": _estimate(3.0)}
    claims = {"a": 1.5, "b": 1.5}
    v = decide([], est, claims, 0.1, {}, "all", {"b": "every round lost a side"})
    assert v.verdict == INCONCLUSIVE and [c.case for c in v.cases] == ["a", "b"]
    assert "speedup [case b]: not measured: every round lost a side" in v.reasons
    assert decide([], est, claims, 0.1, {}, "all").verdict == SUPPORTED  # the old behaviour, without the case
    assert decide([], est, claims, 0.1, {}, "any", {"b": "lost"}).verdict == SUPPORTED
    slow = {"a": _estimate(0.5)}
    assert decide([], slow, claims, 0.1, {}, "all", {"b": "lost"}).verdict == REFUTED  # one refuted case refutes
