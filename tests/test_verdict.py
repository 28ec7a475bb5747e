import pytest

from expkit.core.findings import Finding
from expkit.verdict.stats import Estimate, SideSummary
from expkit.verdict import EXIT_CODES, decide, judge_case, worst

S = SideSummary(1.0, 1.0, 1.0, 0.0, 100)


def est(lo, mid, hi):
    return Estimate(mid, lo, hi, 0.95, S, S)


@pytest.mark.parametrize("lo,mid,hi,expected", [
    (1.62, 1.70, 1.78, "supported"),   # whole interval above 1.7*0.95 = 1.615
    (1.615, 1.65, 1.7, "supported"),   # lower bound exactly at the bar
    (1.0, 1.2, 1.5, "refuted"),        # whole interval below the bar
    (1.5, 1.6, 1.7, "inconclusive"),   # straddles the bar
])
def test_case_rules(lo, mid, hi, expected):
    assert judge_case("c", est(lo, mid, hi), 1.7, 0.05, False).verdict == expected


def test_inconclusive_says_what_would_settle_it():
    cv = judge_case("c", est(1.5, 1.6, 1.7), 1.7, 0.05, budget_spent=True)
    assert "budget ran out" in cv.reason and "measure=rigorous" in cv.reason


def test_a_wide_interval_over_processes_asks_for_more_processes_not_more_rounds():
    from dataclasses import replace

    from expkit.verdict.stats import ProcessEstimate

    procs = tuple(ProcessEstimate(r, 1.6 + 0.05 * r, 1.55, 1.75, 40, 1e-4) for r in range(3))
    cv = judge_case("c", replace(est(1.5, 1.6, 1.7), processes=procs), 1.7, 0.05, budget_spent=False)
    assert "3 processes" in cv.reason and "measure.processes" in cv.reason and "measure longer" not in cv.reason
    agree = tuple(ProcessEstimate(r, 1.6 + 0.005 * r, 1.5, 1.7, 40, 1e-3) for r in range(3))  # within their noise
    cv = judge_case("c", replace(est(1.5, 1.6, 1.7), processes=agree), 1.7, 0.05, budget_spent=False)
    assert "interval over 3 processes is too wide" in cv.reason and "measure.processes" in cv.reason
    one = judge_case("c", est(1.5, 1.6, 1.7), 1.7, 0.05, budget_spent=False)
    assert "interval is too wide: measure longer" in one.reason


def test_invalid_overrides_a_fast_result():
    f = Finding("oracle:allclose", False, "max abs error 3", "d4097")
    v = decide([f], {"a": est(5, 6, 7)}, {"a": 1.5}, 0.1, {})
    assert v.verdict == "invalid" and v.exit_code == 3
    assert v.reasons == ("oracle:allclose [case d4097]: max abs error 3",)


def test_warnings_do_not_invalidate():
    f = Finding("occupancy", False, "drops", severity="warning")
    assert decide([f], {"a": est(5, 6, 7)}, {"a": 1.5}, 0.1, {}).verdict == "supported"


def test_aggregate_all_and_any():
    ests = {"a": est(2, 2.1, 2.2), "b": est(1.0, 1.1, 1.2)}
    claims = {"a": 1.5, "b": 1.5}
    assert decide([], ests, claims, 0.1, {}, "all").verdict == "refuted"
    assert decide([], ests, claims, 0.1, {}, "any").verdict == "supported"


def test_per_case_claims_are_used():
    ests = {"a": est(2, 2.1, 2.2), "b": est(1.0, 1.1, 1.2)}
    assert decide([], ests, {"a": 2.0, "b": 1.0}, 0.05, {}).verdict == "supported"


def test_exit_codes_and_worst():
    assert EXIT_CODES == {"supported": 0, "refuted": 1, "invalid": 3, "inconclusive": 4}
    assert worst(["supported", "inconclusive", "refuted"]) == "refuted"
    assert worst(["supported", "invalid"]) == "invalid"


def test_a_note_adds_its_reason_to_a_measured_verdict_and_changes_no_word():
    from expkit.verdict.rules import Verdict, noted

    note = Finding("identity", True, "not checked: the intended kernel was not identified", severity="warning")
    for word in ("supported", "refuted", "inconclusive"):
        v = noted(Verdict(word, ("speedup [case c]: r",)), [note])
        assert v.verdict == word and v.reasons == ("speedup [case c]: r", note.reason())
    bad = Verdict("invalid", ("oracle:allclose [case c]: wrong",))
    assert noted(bad, [note]) == bad  # an invalid verdict's reasons are its failures
