"""The verdict's rules in order (verdict/pipeline.py): each a pure function of what was found."""

from types import SimpleNamespace

from expkit.core.findings import WARNING, Finding
from expkit.manifest.settings import DefenceSettings
from expkit.verdict.pipeline import RULES, Evidence, end_to_end, judge
from expkit.verdict.rules import CaseVerdict
from expkit.verdict.stats import Estimate, SideSummary

S = SideSummary(1.0, 1.0, 1.0, 0.0, 100)


def est(lo, mid, hi):
    return Estimate(mid, lo, hi, 0.95, S, S)


def manifest(case="c"):
    return SimpleNamespace(expect=SimpleNamespace(max_plausible_speedup=None), cases=[SimpleNamespace(name=case)])


def evidence(**kw):
    base = dict(findings=(), estimates={"c": est(1.8, 2.0, 2.2)}, claims={"c": 1.5}, tolerance=0.05)
    base.update(kw)
    return Evidence(**base)


NOTE = Finding("identity", True, "not checked: the intended kernel was not identified", severity=WARNING)


def test_the_rules_apply_in_the_documented_order():
    assert [name for name, _ in RULES] == ["decide", "load", "share", "plausibility", "end_to_end", "identity"]


def test_a_claim_well_inside_its_interval_is_supported_with_nothing_added():
    v, added = judge(evidence())
    assert v.verdict == "supported" and added == ()


def test_judging_twice_gives_the_same_verdict_and_findings():
    ev = evidence(estimates={"c": est(11.0, 12.0, 13.0)}, manifest=manifest(), defences=DefenceSettings(),
                  unidentified=NOTE)
    assert judge(ev) == judge(ev)


def test_an_implausible_factor_is_inconclusive_its_warning_first_and_the_identity_note_last():
    ev = evidence(estimates={"c": est(11.0, 12.0, 13.0)}, manifest=manifest(), defences=DefenceSettings(),
                  unidentified=NOTE)
    v, added = judge(ev)
    assert v.verdict == "inconclusive"
    assert [f.check for f in added] == ["plausibility", "identity"]
    assert v.reasons[0].startswith("plausibility") and v.reasons[-1].startswith("identity")


def test_the_plausibility_rule_is_skipped_with_the_defences_off():
    v, added = judge(evidence(estimates={"c": est(11.0, 12.0, 13.0)}, manifest=manifest(), defences=None))
    assert v.verdict == "supported" and added == ()


def test_a_share_warning_withholds_supported_but_not_refuted():
    share = (Finding("share", False, "more threads on a busy host", "c", severity=WARNING),)
    assert judge(evidence(shared=share))[0].verdict == "inconclusive"
    assert judge(evidence(shared=share, estimates={"c": est(0.9, 1.0, 1.1)}))[0].verdict == "refuted"


def test_a_failed_check_is_invalid_and_the_later_rules_leave_it_so():
    bad = (Finding("recheck", False, "a timed call's output differs", "c"),)
    workload = SimpleNamespace(judged=CaseVerdict("w", "refuted", 1.2, 1.1, "measured 0.9x"), agreement=None,
                               name="loop")
    v, added = judge(evidence(findings=bad, end_to_end=workload, unidentified=NOTE))
    assert v.verdict == "invalid" and v.reasons == (bad[0].reason(),)
    assert [f.check for f in added] == ["identity"]  # listed among the findings, not a reason of invalid


def test_a_refuted_workload_refutes_a_supported_kernel_and_leads_the_reasons():
    workload = SimpleNamespace(judged=CaseVerdict("w", "refuted", 1.2, 1.1, "measured 0.9x"), agreement=None,
                               name="loop")
    v, _ = judge(evidence(end_to_end=workload))
    assert v.verdict == "refuted" and v.reasons[0].startswith("end_to_end [workload loop]")
    assert end_to_end(v, SimpleNamespace(judged=None)) is v  # no claim on the workload: unchanged
