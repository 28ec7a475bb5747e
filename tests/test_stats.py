import numpy as np
import pytest

from expkit import stats


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
