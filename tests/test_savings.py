"""What a speedup is worth: the arithmetic, its range and its sign."""

import pytest

from expkit.verdict.savings import case_saving, savings


def case(tb, s, lo, hi):
    return {"baseline": {"median": tb}, "speedup": s, "ci_low": lo, "ci_high": hi}


def test_saving_per_call_million_and_day():
    # 10 ms baseline, 2x faster: 5 ms a call; [1.6x, 2.5x] -> [3.75 ms, 6 ms].
    out = case_saving(case(0.010, 2.0, 1.6, 2.5), usd_per_hour=3.6, calls_per_day=1e6)
    assert out["seconds_per_call"] == pytest.approx({"estimate": 0.005, "low": 0.00375, "high": 0.006})
    assert out["seconds_per_million_calls"]["estimate"] == pytest.approx(5000.0)
    # 5000 s at $3.60/h = $5.00 per million calls; a million calls a day is the same figure a day.
    assert out["usd_per_million_calls"]["estimate"] == pytest.approx(5.0)
    assert out["usd_per_day"] == pytest.approx(out["usd_per_million_calls"])
    assert out["seconds_per_day"]["high"] == pytest.approx(6000.0)


def test_a_slower_candidate_is_a_negative_saving_and_unknown_price_stays_unknown():
    out = case_saving(case(0.010, 0.5, 0.4, 0.6), usd_per_hour=None)
    assert out["seconds_per_call"]["estimate"] == pytest.approx(-0.010)
    assert out["usd_per_million_calls"] is None and out["usd_per_day"] is None and out["seconds_per_day"] is None


def test_an_interval_including_one_gives_a_range_including_zero():
    out = case_saving(case(0.010, 1.05, 0.95, 1.15), usd_per_hour=1.0)
    r = out["seconds_per_call"]
    assert r["low"] < 0 < r["high"]


def test_unmeasured_cases_are_skipped():
    out = savings({"a": case(0.01, 2.0, 1.9, 2.1), "b": {"speedup": None}}, {"usd_per_hour": 2.0,
                  "price_source": "list"}, {"a": 10.0})
    assert list(out["cases"]) == ["a"] and out["usd_per_hour"] == 2.0 and out["price_source"] == "list"
    assert out["cases"]["a"]["calls_per_day"] == 10.0
