import numpy as np
import pytest

from expkit.verdict import stats


def test_ratio_of_medians_and_interval_cover_the_truth():
    rng = np.random.default_rng(1)
    base = 2.0e-3 * rng.lognormal(0, 0.02, 200)
    cand = 1.0e-3 * rng.lognormal(0, 0.02, 200)
    est = stats.estimate(base, cand, seed=3)
    assert est.speedup == pytest.approx(2.0, rel=0.01)
    assert est.ci_low < 2.0 < est.ci_high
    assert est.relative_half_width < 0.01
    assert not est.warnings


def test_interval_is_reproducible_from_the_seed():
    rng = np.random.default_rng(2)
    b, c = rng.lognormal(0, 0.1, 50), rng.lognormal(0, 0.1, 50)
    assert stats.estimate(b, c, seed=7) == stats.estimate(b, c, seed=7)


def test_few_and_noisy_samples_carry_warnings():
    est = stats.estimate([1.0, 1.5, 1.0, 2.0, 1.1], [1.0, 1.0, 1.1, 1.0, 1.0], seed=0)
    assert any("only 5 samples" in w for w in est.warnings)
    assert any("baseline times are noisy" in w for w in est.warnings)


def test_outliers_move_the_median_little():
    base = [1.0] * 95 + [50.0] * 5
    cand = [0.5] * 100
    assert stats.estimate(base, cand, seed=0).speedup == pytest.approx(2.0)


def test_identical_sides_interval_includes_one():
    rng = np.random.default_rng(5)
    x = rng.lognormal(0, 0.05, 100)
    y = rng.lognormal(0, 0.05, 100)
    assert stats.estimate(x, y, seed=0).includes_one


@pytest.mark.parametrize("bad", [[], [0.0], [-1.0]])
def test_rejects_empty_or_non_positive(bad):
    with pytest.raises(ValueError):
        stats.estimate(bad, [1.0])


# --- rounds, pairs and processes (estimate_rounds) -------------------------------------

def rounds(rep, base, cand):
    return stats.Rounds(rep, tuple(base), tuple(cand))


def test_pair_rounds_keeps_pairs_and_drops_rounds_missing_a_side():
    rows = [(0, 0, "baseline", 2.0), (0, 0, "candidate", 1.0), (0, 1, "candidate", 1.1),
            (1, 0, "candidate", 1.0), (1, 0, "baseline", 2.2)]
    got = stats.pair_rounds(rows)
    assert got == (stats.Rounds(0, (2.0,), (1.0,), dropped=1), stats.Rounds(1, (2.2,), (1.0,)))
    with pytest.raises(ValueError, match="two baseline"):
        stats.pair_rounds([(0, 0, "baseline", 1.0), (0, 0, "baseline", 1.0)])


def test_one_process_is_the_ratio_of_medians_with_a_paired_bootstrap_and_says_so():
    rng = np.random.default_rng(11)
    b, c = 2.0 * rng.lognormal(0, 0.02, 200), rng.lognormal(0, 0.02, 200)
    est = stats.estimate_rounds([rounds(0, b, c)], seed=1)
    assert est.speedup == pytest.approx(np.median(b) / np.median(c))
    assert est.ci_low < 2.0 < est.ci_high and est.method == stats.PAIRED
    assert "one process" in est.method and not any("process" in w for w in est.warnings)
    assert est.record()["processes"] == 1 and est.record()["process_spread"] is None
    assert stats.estimate_rounds([rounds(0, b, c)], seed=1) == est  # reproducible from the seed


def test_pairing_cancels_noise_the_two_sides_of_a_round_shared():
    # Every round has its own machine state (25% sd), shared by both sides; each side adds 1% of its own.
    rng = np.random.default_rng(12)
    shared = rng.lognormal(0, 0.25, 300)
    b, c = 1.5 * shared * rng.lognormal(0, 0.01, 300), shared * rng.lognormal(0, 0.01, 300)
    paired = stats.estimate_rounds([rounds(0, b, c)], seed=0)
    independent = stats.estimate(b, c, seed=0)
    assert paired.ci_low <= 1.5 <= paired.ci_high
    assert paired.relative_half_width < independent.relative_half_width / 3


def test_several_processes_use_student_t_over_the_per_process_ratios():
    rng = np.random.default_rng(13)
    procs, ratios = [], []
    for p, f in enumerate((1.00, 1.02, 0.99, 1.03, 0.98)):  # a process effect of ~2%, noise within of 0.1%
        b, c = 1.3 * f * rng.lognormal(0, 0.001, 100), rng.lognormal(0, 0.001, 100)
        procs.append(rounds(p, b, c))
        ratios.append(np.log(np.median(b) / np.median(c)))
    est = stats.estimate_rounds(procs, seed=0)
    from scipy.stats import t

    half = t.ppf(0.975, 4) * np.std(ratios, ddof=1) / np.sqrt(5)
    assert est.speedup == pytest.approx(np.exp(np.mean(ratios)))
    assert (est.ci_low, est.ci_high) == pytest.approx((np.exp(np.mean(ratios) - half), np.exp(np.mean(ratios) + half)))
    assert est.method.startswith(stats.STUDENT) and "5 processes" in est.method
    assert est.baseline.median / est.candidate.median == pytest.approx(est.speedup)
    rec = est.record()
    assert rec["processes"] == 5 and len(rec["per_process"]) == 5
    assert rec["process_spread"] == pytest.approx((max(np.exp(ratios)) - min(np.exp(ratios))) / est.speedup)
    assert not any("one process" in w for w in est.warnings)


def test_processes_that_agree_exactly_still_get_the_noise_within_them():
    rng = np.random.default_rng(14)
    b, c = 1.3 * rng.lognormal(0, 0.02, 60), rng.lognormal(0, 0.02, 60)
    est = stats.estimate_rounds([rounds(p, b, c) for p in range(4)], seed=0)  # identical copies: s = 0
    assert est.process_sd == 0.0
    one = stats.within_process(rounds(0, b, c), seed=0)
    assert est.relative_half_width == pytest.approx(1.96 * np.sqrt(one.log_variance / 4), rel=0.1)


def test_processes_that_disagree_beyond_their_own_noise_say_more_processes_would_settle_it():
    """A 20% process effect over 0.1% noise within: the spread dominates, and the verdict's
    reason asks for processes, not time, even where the budget also ran out; processes
    that agree to within their noise do not."""
    from expkit.verdict.rules import judge_case

    rng = np.random.default_rng(16)
    apart = [rounds(p, f * rng.lognormal(0, 0.001, 60), rng.lognormal(0, 0.001, 60))
             for p, f in enumerate((0.8, 1.0, 1.25))]
    est = stats.estimate_rounds(apart, seed=0)
    assert est.spread_dominates
    why = judge_case("c", est, 1.0, 0.05, budget_spent=True).reason
    assert "disagree by more than the noise within each" in why and "measure.processes" in why
    together = [rounds(p, rng.lognormal(0, 0.05, 60), rng.lognormal(0, 0.05, 60)) for p in range(3)]
    close = stats.estimate_rounds(together, seed=0)
    assert not close.spread_dominates
    at_the_bar = close.speedup / 0.95  # an interval that straddles the bar, so the reason says why
    assert "time budget ran out" in judge_case("c", close, at_the_bar, 0.05, budget_spent=True).reason
    assert not stats.estimate_rounds(apart[:1], seed=0).spread_dominates  # one process: no spread to judge


def test_two_processes_warn_that_the_interval_is_wide():
    rng = np.random.default_rng(15)
    procs = [rounds(p, rng.lognormal(0, 0.01, 30), rng.lognormal(0, 0.01, 30)) for p in range(2)]
    assert any("two processes" in w for w in stats.estimate_rounds(procs).warnings)


def test_each_process_target_accounts_for_the_t_quantile():
    assert stats.process_target(0.01, 0.95, 1) == 0.01
    from scipy.stats import norm, t

    assert stats.process_target(0.01, 0.95, 5) == pytest.approx(0.01 * np.sqrt(5) * norm.ppf(0.975) / t.ppf(0.975, 4))


def test_rounds_reject_non_positive_and_empty():
    with pytest.raises(ValueError):
        stats.estimate_rounds([rounds(0, [], [])])
    with pytest.raises(ValueError):
        stats.estimate_rounds([rounds(0, [1.0, 0.0], [1.0, 1.0])])


# --- the run's headline figure over its cases (issue 51) -------------------------------------------------------


def _case(speedup, lo, hi):
    side = stats.SideSummary(1.0, 1.0, 1.0, 0.0, 10)
    return stats.Estimate(speedup, lo, hi, 0.95, side, side)


def test_overall_is_the_geometric_mean_of_the_cases_and_of_their_bounds():
    o = stats.overall([_case(2.0, 1.8, 2.2), _case(0.5, 0.45, 0.55)], 0.95)
    assert o["speedup"] == pytest.approx(1.0) and o["cases"] == 2 and o["confidence"] == 0.95
    assert (o["ci_low"], o["ci_high"]) == (pytest.approx((1.8 * 0.45) ** 0.5), pytest.approx((2.2 * 0.55) ** 0.5))
    one = _case(1.5, 1.4, 1.6)
    assert stats.overall([one], 0.95) == {"speedup": pytest.approx(1.5), "ci_low": pytest.approx(1.4),
                                          "ci_high": pytest.approx(1.6), "confidence": 0.95, "cases": 1}
    assert stats.overall([], 0.95) is None


def test_where_the_cases_agree_the_overall_interval_covers_every_cases_figure():
    """The property that makes the interval honest as a summary: cases whose figures lie in
    each other's intervals are never all excluded by their mean's interval (nor is any one)."""
    rng = np.random.default_rng(51)
    tried = 0
    while tried < 2000:
        k = int(rng.integers(2, 6))
        logs = rng.normal(0.3, 0.05, k)
        lows, highs = rng.uniform(0.001, 0.2, k), rng.uniform(0.001, 0.2, k)
        if not all(logs[i] - lows[i] <= logs[j] <= logs[i] + highs[i] for i in range(k) for j in range(k)):
            continue  # the cases disagree: not this property's business
        tried += 1
        o = stats.overall([_case(*np.exp([m, m - lo, m + hi])) for m, lo, hi in zip(logs, lows, highs)], 0.95)
        for m in logs:
            assert o["ci_low"] * (1 - 1e-12) <= np.exp(m) <= o["ci_high"] * (1 + 1e-12), (logs, lows, highs, o)


def test_where_the_cases_differ_beyond_their_intervals_the_mean_may_exclude_each():
    """The stored v1-honest-win run: 121x and 27.8x, each interval far from the other's.
    Their mean's interval excludes both, as an interval of a mean of unlike cases should; the
    report says what the figure is (tests/golden/report-v1-honest-win.md)."""
    o = stats.overall([_case(121.1, 49.9, 139.3), _case(27.8, 24.8, 32.9)], 0.95)
    assert 32.9 < o["ci_low"] < o["speedup"] < o["ci_high"] < 121.1
