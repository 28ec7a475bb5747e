"""The ``load`` rule (verdict/load.py): a verdict the host's load could explain is not given."""

import pytest

from expkit.verdict import decide
from expkit.verdict.load import LOAD, apply_load, load_findings
from expkit.verdict.stats import Estimate, SideSummary

S = SideSummary(1.0, 1.0, 1.0, 0.0, 100)


def est(lo, mid, hi):
    return Estimate(mid, lo, hi, 0.95, S, S)


def side(waited_ms, blocks_ms=100.0, threads=1):
    return {"waited_ms": waited_ms, "blocks_ms": blocks_ms, "case_threads_ran": threads}


def judged(estimates, resources, busy=("c",), claim=1.5, tolerance=0.2, aggregate="all"):
    v = decide([], estimates, {c: claim for c in estimates}, tolerance, {}, aggregate)
    found = load_findings(v, estimates, resources, busy)
    return v, found, apply_load(v, found, aggregate)


def test_a_supported_case_that_the_baselines_larger_wait_explains_becomes_inconclusive():
    """Baseline waited 58%, candidate 36%: taking the waits out scales the speedup by 0.42/0.64."""
    before, (f,), after = judged({"c": est(1.33, 2.0, 3.0)}, {"c": {"baseline": side(58.0), "candidate": side(36.0)}})
    assert before.verdict == "supported" and after.verdict == "inconclusive"
    assert f.check == LOAD and f.case == "c" and not f.invalidates and f.severity == "warning"
    assert f.figure == pytest.approx(0.42 / 0.64, abs=1e-4)
    assert "waited for a CPU for 58%" in f.message and "candidate's for 36%" in f.message
    assert "[0.873, 1.969]" in f.message and "straddles 1.200" in f.message
    assert after.reasons[0].startswith("load [case c]: ") and "host's load could explain it" in after.reasons[1]
    assert after.cases[0].verdict == "inconclusive"


def test_a_refuted_case_that_the_candidates_larger_wait_explains_becomes_inconclusive():
    """An honest claim must not be refuted because the load fell on the candidate's side."""
    before, (f,), after = judged({"c": est(0.9, 1.0, 1.1)}, {"c": {"baseline": side(0.0), "candidate": side(50.0)}})
    assert before.verdict == "refuted" and after.verdict == "inconclusive"
    assert "[1.800, 2.200]" in f.message and "is at or above 1.200" in f.message


@pytest.mark.parametrize("lo,mid,hi", [(1.4, 1.5, 1.6), (0.5, 0.6, 0.7)])
def test_load_that_fell_on_both_sides_alike_changes_nothing(lo, mid, hi):
    before, found, after = judged({"c": est(lo, mid, hi)}, {"c": {"baseline": side(40.0), "candidate": side(41.0)}})
    assert found == [] and after == before


def test_a_verdict_that_holds_with_the_waits_taken_out_stands():
    before, found, after = judged({"c": est(2.0, 2.2, 2.4)}, {"c": {"baseline": side(30.0), "candidate": side(10.0)}})
    assert before.verdict == "supported" and found == [] and after == before  # 2.0 x 0.7/0.9 = 1.56 >= 1.2


@pytest.mark.parametrize("lo,mid,hi,was", [(1.33, 2.0, 9.3, "supported"), (0.1, 0.24, 0.44, "refuted")])
def test_a_side_on_more_than_one_thread_on_a_busy_host_gets_no_verdict(lo, mid, hi, was):
    """One thread's wait stalls its pool's others by more than it records: nothing to scale by."""
    res = {"c": {"baseline": side(20.0, threads=2), "candidate": side(20.0, threads=2)}}
    before, (f,), after = judged({"c": est(lo, mid, hi)}, res)
    assert before.verdict == was and after.verdict == "inconclusive"
    assert f.message.startswith("the baseline on 2 threads and the candidate on 2 threads, timed on a host where")
    assert f"whether it is {was} or the host's load" in f.message and "measure.cpu_threads=1" in f.message
    assert f.figure == 2.0 and f.threshold == 1.0


def test_a_quiet_case_is_not_judged_again():
    res = {"c": {"baseline": side(58.0, threads=2), "candidate": side(0.0)}}
    before, found, after = judged({"c": est(1.33, 2.0, 3.0)}, res, busy=())
    assert found == [] and after == before


def test_an_inconclusive_case_and_an_invalid_run_stand():
    res = {"c": {"baseline": side(58.0, threads=2), "candidate": side(0.0)}}
    before, found, after = judged({"c": est(1.0, 1.5, 2.0)}, res)
    assert before.verdict == "inconclusive" and found == [] and after == before
    from expkit.core.findings import Finding

    bad = decide([Finding("output", False, "a subclass")], {"c": est(1.33, 2.0, 3.0)}, {"c": 1.5}, 0.2, {})
    assert load_findings(bad, {"c": est(1.33, 2.0, 3.0)}, res, ("c",)) == [] and apply_load(bad, []) == bad


def test_the_overall_verdict_is_combined_again_under_the_manifests_aggregate():
    estimates = {"a": est(1.33, 2.0, 3.0), "b": est(1.5, 1.6, 1.7)}
    res = {"a": {"baseline": side(58.0), "candidate": side(36.0)}}
    _, (f,), after = judged(estimates, res, busy=("a",), aggregate="any")
    assert f.case == "a" and after.verdict == "supported"  # b alone supports it under "any"
    _, _, after = judged(estimates, res, busy=("a",), aggregate="all")
    assert after.verdict == "inconclusive" and [c.verdict for c in after.cases] == ["inconclusive", "supported"]
