import random

import pytest

from expkit.timing import measure
from expkit.verdict import stats
from expkit.manifest.settings import MeasureSettings
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
    """A FakeTimer that also takes whole batches (like bench.defences.envelope.SessionTimer)."""

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


def test_a_batch_pairs_each_round_s_blocks_next_to_each_other_in_a_random_order():
    # Each round's two blocks are timed one right after the other, so that they share the
    # machine's noise and its ratio cancels it. Runs of several rounds a side (fewer
    # requests between workers) made honest runs at `default` time two to four times as
    # much (docs/defence-cost.md).
    clock = FakeClock()
    timer = BatchTimer(clock, seed=4, sigma=0.005, drift=0.2)
    cs = run(timer, clock, 2e-5, 1e-5)
    assert max(timer.batches) > 2  # batches of several rounds were planned
    order = [(s.round, s.side) for s in cs.samples]
    assert [r for r, _ in order] == sorted(r for r, _ in order)
    assert all(order[i][0] == order[i + 1][0] != order[i - 1][0] for i in range(2, len(order), 2))
    firsts = [s.side for s in cs.samples if s.position == 0]
    assert 0.2 < firsts.count("baseline") / len(firsts) < 0.8
    est = stats.estimate(cs.times("baseline"), cs.times("candidate"))
    assert est.speedup == pytest.approx(2.0, rel=0.03)


class TwoFigureTimer(FakeTimer):
    """A FakeTimer that also reports a call time 3 us above the kernel time, as the
    CUDA timer with a kernel-time recorder does; ``batched`` answers in dicts, as
    a worker's blocks cross the channel."""

    def __init__(self, clock, batched=False, **kw):
        super().__init__(clock, **kw)
        self.last_timing = None
        self.info = {"kind": "kernel", "requested": "kernel", "fallback": ""}
        if batched:
            self.sample_batch = lambda plan: [self._timing(fn, n).to_dict() for fn, n in plan]

    def _timing(self, fn, number):
        from expkit.timing.timer import BlockTiming

        k = FakeTimer.sample(self, fn, number)
        return BlockTiming(k, "kernel", k + 3e-6, k, ("other-stream",) if number % 2 else ())

    def sample(self, fn, number):
        self.last_timing = self._timing(fn, number)
        return self.last_timing.seconds


@pytest.mark.parametrize("batched", [False, True])
def test_samples_keep_both_figures_and_the_timers_info(batched):
    clock = FakeClock()
    cs = run(TwoFigureTimer(clock, batched=batched, seed=7), clock, 2e-5, 1e-5)
    assert cs.samples and all(s.source == "kernel" for s in cs.samples)
    assert all(s.call_seconds == pytest.approx(s.seconds + 3e-6) for s in cs.samples)
    assert {s.flags for s in cs.samples} <= {"", "other-stream"}
    assert cs.info is not None and cs.info.kind == "kernel"


def test_a_timer_with_one_figure_leaves_the_second_empty():
    clock = FakeClock()
    cs = run(FakeTimer(clock, seed=8), clock, 2e-5, 1e-5)
    assert all(s.call_seconds is None and s.source == "" and s.flags == "" for s in cs.samples)
    assert cs.info is None


# --- several processes: measure_replicated -------------------------------------------------

from dataclasses import replace as _replace  # noqa: E402

from fakes import FakeReplicate  # noqa: E402

REPL = _replace(FAST, processes=3, max_seconds=3.0)


def replicated(settings, cases=("a", "b"), process_sd=0.0, sigma=0.01, seed=0, fail=None, open_fails_at=None):
    clock, log = FakeClock(), []

    def open_replicate(r):
        if r == open_fails_at:
            raise OSError("worker did not start")
        return FakeReplicate(clock, r, 2e-5, 1e-5, process_sd=process_sd, sigma=sigma, seed=seed, log=log,
                             fail_on=(fail or {}).get(r, ""))

    got = measure.measure_replicated(list(cases), open_replicate, settings, rng=random.Random(seed), clock=clock)
    return got, log


def test_replicates_measure_every_case_in_turn_and_always_close():
    got, log = replicated(REPL)
    assert log == [entry for r in range(3) for entry in
                   (f"open {r}", f"sides {r} a", f"finish {r} a", f"sides {r} b", f"finish {r} b", f"close {r}")]
    for name in ("a", "b"):
        cs = got.cases[name]
        assert cs.processes == 3 and {s.replicate for s in cs.samples} == {0, 1, 2}
        est = measure.case_estimate(cs, confidence=0.95, resamples=500, seed=0)
        assert len(est.processes) == 3 and est.ci_low <= 2.0 <= est.ci_high
    assert not got.errors and got.processes == 3


def test_blocks_are_calibrated_once_a_case_and_later_replicates_time_as_many_calls(monkeypatch):
    calls = []
    real = measure.calibrate

    def counted(timer, fn, min_block_seconds):
        calls.append(min_block_seconds)
        return real(timer, fn, min_block_seconds)

    monkeypatch.setattr(measure, "calibrate", counted)
    got, _ = replicated(REPL)
    assert len(calls) == 2 * 2  # two sides of two cases, in the first replicate only
    for cs in got.cases.values():
        for side in measure.SIDES:
            first = {x.number for x in cs.samples if x.side == side and x.replicate == 0}
            assert len(first) == 1 and {x.number for x in cs.samples if x.side == side} == first
        assert cs.processes == 3


def test_each_process_gets_its_share_of_the_budget():
    s = _replace(REPL, target_ci=1e-6, max_seconds=0.6)  # unreachable target: every process spends its share
    got, _ = replicated(s, cases=("a",), sigma=0.2)
    cs = got.cases["a"]
    assert cs.stopped == measure.STOP_BUDGET and cs.budget_spent
    for r in range(3):
        mine = [x for x in cs.samples if x.replicate == r]
        timed = sum(x.seconds * x.number for x in mine)
        per_round = timed / (max(x.round for x in mine) + 1)
        assert 0.2 <= timed <= 0.2 + 2 * per_round  # max_seconds / 3, overshoot at most a round


def test_a_process_effect_widens_the_interval_to_cover_the_truth():
    # 3% process effect on each side, 1% noise within: one process's interval mostly does
    # not cover the truth. Ten seeded runs, so that the rates are read, not one draw.
    s = _replace(REPL, processes=5, max_seconds=5.0)
    covered = one_covered = 0
    ratios = []
    for seed in range(10):
        got, _ = replicated(s, cases=("a",), process_sd=0.03, seed=seed)
        cs = got.cases["a"]
        est = measure.case_estimate(cs, confidence=0.95, resamples=500, seed=0)
        one = measure.case_estimate(_replace(cs, samples=tuple(x for x in cs.samples if x.replicate == 0)),
                                    confidence=0.95, resamples=500, seed=0)
        covered += est.ci_low <= 2.0 <= est.ci_high
        one_covered += one.ci_low <= 2.0 <= one.ci_high
        ratios.append(est.relative_half_width / one.relative_half_width)
        assert est.process_spread > 0.02
        # every process met its own target; the spread between them did not fit the total target,
        # which is no time budget spent: more time would not narrow it
        assert cs.stopped == measure.STOP_SPREAD and not cs.budget_spent
    assert covered >= 9 and one_covered <= 5
    assert sorted(ratios)[5] > 3


def test_one_process_through_the_replicate_loop_is_the_single_process_loop():
    got, log = replicated(_replace(FAST, processes=1), cases=("a",))
    cs = got.cases["a"]
    assert cs.stopped == measure.STOP_TARGET and cs.processes == 1
    assert log == ["open 0", "sides 0 a", "finish 0 a", "close 0"]
    est = measure.case_estimate(cs, confidence=0.95, resamples=500, seed=0)
    assert est.relative_half_width <= 0.011 and est.method == stats.PAIRED


def test_a_case_that_raises_is_left_out_and_the_others_go_on():
    got, log = replicated(REPL, fail={1: "a"})
    assert set(got.cases) == {"b"} and "broke in replicate 1" in str(got.errors["a"])
    assert "sides 2 a" not in log and [e for e in log if e.startswith("close")] == ["close 0", "close 1", "close 2"]
    assert got.cases["b"].processes == 3


def test_a_replicate_that_cannot_open_ends_the_loop_with_the_error_for_every_case():
    got, log = replicated(REPL, open_fails_at=1)
    assert not got.cases and set(got.errors) == {"a", "b"}
    assert all("did not start" in str(e) for e in got.errors.values())
    assert log[-1] == "close 0"


def test_rounds_respect_telemetry_flags_and_drop_the_round_whole():
    got, _ = replicated(REPL, cases=("a",))
    cs = got.cases["a"]
    keep = [not (s.replicate == 0 and s.round == 0 and s.side == "baseline") for s in cs.samples]
    r0 = cs.rounds(keep)[0]
    assert r0.dropped == 1 and len(r0.baseline) == len(r0.candidate)


@pytest.mark.parametrize("bad", [0, -1])
def test_processes_below_one_is_a_config_error_that_names_the_key(bad):
    from expkit.core.errors import ConfigError

    with pytest.raises(ConfigError, match="measure.processes"):
        MeasureSettings(processes=bad)
