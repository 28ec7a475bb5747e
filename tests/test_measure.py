import random

import pytest

from expkit import measure, stats
from expkit.settings import MeasureSettings
from expkit.timing import PerfCounterTimer, calibrate

from fakes import FakeClock, FakeOp, FakeTimer

FAST = MeasureSettings(warmup_seconds=0.01, min_rounds=10, min_seconds=0.05, max_seconds=5.0, target_ci=0.01,
                       min_block_seconds=0.001, bootstrap=500)


def run(timer, clock, base_s, cand_s, settings=FAST, seed=0):
    b, c = FakeOp(clock, base_s), FakeOp(clock, cand_s)
    return measure.measure_case("c", b, c, timer, settings, rng=random.Random(seed), clock=clock)


def test_stops_at_target_with_the_true_ratio():
    clock = FakeClock()
    cs = run(FakeTimer(clock, seed=1, sigma=0.01), clock, 2e-5, 1e-5)
    assert cs.stopped == measure.STOP_TARGET
    est = stats.estimate(cs.times("baseline"), cs.times("candidate"))
    assert est.ci_low <= 2.0 <= est.ci_high
    assert est.relative_half_width <= 0.01


def test_budget_ends_noisy_run_and_says_so():
    clock = FakeClock()
    s = MeasureSettings(warmup_seconds=0.01, min_rounds=10, min_seconds=0.01, max_seconds=0.2, target_ci=0.001,
                        min_block_seconds=0.001, bootstrap=200)
    cs = run(FakeTimer(clock, seed=2, sigma=0.3), clock, 2e-5, 1e-5, s)
    assert cs.stopped == measure.STOP_BUDGET and cs.budget_spent
    assert cs.timed_seconds >= 0.2


def test_order_is_randomised_per_round():
    clock = FakeClock()
    cs = run(FakeTimer(clock, seed=3), clock, 2e-5, 1e-5)
    firsts = [s.side for s in cs.samples if s.position == 0]
    assert 0.2 < firsts.count("baseline") / len(firsts) < 0.8


def test_interleaving_cancels_linear_drift():
    # 20%/s slow-down: sequential timing (all baseline, then all candidate) would be
    # biased; interleaved rounds keep the ratio close to the truth.
    clock = FakeClock()
    cs = run(FakeTimer(clock, seed=4, sigma=0.005, drift=0.2), clock, 2e-5, 1e-5)
    est = stats.estimate(cs.times("baseline"), cs.times("candidate"))
    assert est.speedup == pytest.approx(2.0, rel=0.03)


def test_outliers_do_not_move_the_estimate():
    clock = FakeClock()
    cs = run(FakeTimer(clock, seed=5, sigma=0.01, outlier_rate=0.05, outlier_factor=5.0), clock, 3e-5, 1e-5)
    est = stats.estimate(cs.times("baseline"), cs.times("candidate"))
    assert est.speedup == pytest.approx(3.0, rel=0.02)


def test_block_size_scales_with_op_time():
    clock = FakeClock()
    timer = FakeTimer(clock, sigma=0.0)
    assert calibrate(timer, FakeOp(clock, 1e-6), 1e-3) >= 1000
    assert calibrate(timer, FakeOp(clock, 1e-2), 1e-3) == 1


def test_perf_counter_timer_divides_by_number():
    ticks = iter([0.0, 1.0])
    t = PerfCounterTimer(clock=lambda: next(ticks))
    calls = []
    assert t.sample(lambda: calls.append(1), 4) == 0.25 and len(calls) == 4


class BatchTimer(FakeTimer):
    """A FakeTimer that also takes whole batches (like defences.SessionTimer)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.batches: list = []

    def sample_batch(self, plan):
        self.batches.append(len(plan))
        return [self.sample(fn, n) for fn, n in plan]


def test_a_batching_timer_gets_the_rounds_between_checks_in_one_request():
    clock = FakeClock()
    timer = BatchTimer(clock, seed=6, sigma=0.01)
    cs = run(timer, clock, 2e-5, 1e-5)
    rounds = max(s.round for s in cs.samples) + 1
    assert len(cs.samples) == 2 * rounds and sum(timer.batches) == 2 * rounds
    assert timer.batches[:2] == [2, 2 * (FAST.min_rounds - 1)]  # one round to size them, then up to the check
    assert len(timer.batches) < rounds / 2                   # far fewer requests than blocks
    est = stats.estimate(cs.times("baseline"), cs.times("candidate"))
    assert est.ci_low <= 2.0 <= est.ci_high
    spans = [(s.t_start, s.t_end) for s in cs.samples]
    assert all(a <= b for a, b in spans) and all(b1 <= a2 + 1e-12 for (_, b1), (a2, _) in zip(spans, spans[1:]))


def test_batches_do_not_overshoot_the_budget_by_more_than_a_round():
    clock = FakeClock()
    s = MeasureSettings(warmup_seconds=0.01, min_rounds=50, min_seconds=0.01, max_seconds=0.2, target_ci=0.0001,
                        min_block_seconds=0.001, bootstrap=200)
    cs = run(BatchTimer(clock, seed=7, sigma=0.3), clock, 2e-5, 1e-5, s)
    assert cs.stopped == measure.STOP_BUDGET
    per_round = cs.timed_seconds / (max(x.round for x in cs.samples) + 1)
    assert cs.timed_seconds <= s.max_seconds + 2 * per_round
