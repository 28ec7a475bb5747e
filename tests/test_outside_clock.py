"""The parent's clock and the late pick, with seeded fakes (issue #49).

A candidate's worker reports its own timed seconds, its call count and which outputs it
committed; the candidate's code shares that worker's interpreter, so each figure is the
candidate's to change. These tests drive the parent's side alone: the outside clock
(:mod:`expkit.bench.defences.outside_clock`) against requests whose figures were moved, and the
late pick (:meth:`expkit.bench.sides.case_sides.CaseSides._judge_block`) against commitments
that skip calls or hold fewer outputs than fit."""

from __future__ import annotations

import random
from types import SimpleNamespace

from expkit.bench.sides.case_sides import CaseSides
from expkit.bench.defences.envelope import RecheckPolicy
from expkit.bench.defences.outside_clock import RequestClock, clock_figures, clock_findings
from expkit.manifest.settings import DefenceSettings


def requests(side: str, n: int, rng: random.Random, *, timed: float = 0.004, calls: int = 16,
             harness_per_call: float = 2e-6, moved: float = 0.0, burst: float = 0.006) -> list:
    """``n`` requests of one side on a loaded host: a fixed cost, and a wake-up burst in a
    third of them. ``moved``: the share of the timed seconds the reply no longer reports."""
    out = []
    for _ in range(n):
        lag = 0.0008 + (burst * rng.random() if rng.random() < 0.33 else 0.0002 * rng.random())
        envelope = timed + calls * harness_per_call + lag
        out.append(RequestClock(side, envelope, timed * (1 - moved), calls, calls * harness_per_call
                                + timed * moved))
    return out


def test_honest_sides_on_a_loaded_host_raise_nothing():
    for seed in range(20):
        rng = random.Random(seed)
        rows = requests("baseline", 30, rng) + requests("candidate", 30, rng, timed=0.002, calls=32)
        assert clock_findings("c", rows) == [], (seed, clock_figures(rows))


def test_time_moved_out_of_the_reported_timed_part_is_invalid_with_both_figures():
    rng = random.Random(1)
    rows = requests("baseline", 30, rng) + requests("candidate", 30, rng, moved=0.43)
    (f,) = clock_findings("c", rows)
    assert f.check == "timer" and f.invalidates and f.figure > f.threshold
    # both figures: what the worker reported and what the parent's clock left unexplained
    assert "reported 0.00228 s of timed calls" in f.message and "more unexplained than the baseline's" in f.message


def test_the_candidates_own_account_of_its_harness_work_is_not_believed():
    """The moved seconds are reported as harness work: the floor comes from the baseline."""
    rng = random.Random(2)
    rows = requests("baseline", 30, rng) + requests("candidate", 30, rng, moved=0.5)
    figs = clock_figures(rows)
    assert abs(figs["floor_per_call_s"] - 2e-6) < 1e-9  # the baseline's, not the candidate's 2e-6 + 0.002/16
    assert clock_findings("c", rows)


def _leaves_behind(side: str, n: int, rng: random.Random, *, per_call_timed: float, behind: float = 0.0,
                   moved: float = 0.0) -> list:
    """Requests of 64 calls with the harness at 8.2 us a call (the CI host's): ``behind``
    seconds a call of the side's own work left outside the spans (its pool's bookkeeping),
    which its worker reports as harness work; ``moved``: the share of the timed seconds the
    reply no longer reports."""
    calls, harness = 64, 8.2e-6
    timed = calls * per_call_timed
    out = []
    for _ in range(n):
        lag = 0.0008 + 0.0002 * rng.random()
        out.append(RequestClock(side, timed + calls * (harness + behind) + lag, timed * (1 - moved), calls,
                                calls * (harness + behind) + timed * moved))
    return out


def test_an_honest_call_that_leaves_its_own_threads_work_behind_it_raises_nothing():
    """The shape of a CI false alarm (``honest_own_pool``): 64 calls of 35 us a request, each
    leaving 12 us of its pool's bookkeeping outside its span, 0.77 ms a request against a
    margin of 0.63 ms without the allowance a call."""
    for seed in range(10):
        rng = random.Random(seed)
        rows = (_leaves_behind("baseline", 30, rng, per_call_timed=16e-6)
                + _leaves_behind("candidate", 30, rng, per_call_timed=35e-6, behind=12e-6))
        assert clock_findings("c", rows) == [], (seed, clock_figures(rows))


def test_half_of_each_short_call_moved_out_of_its_span_is_still_invalid():
    """The allowance a call is a few microseconds: half of each 100 us call moved out of
    the timed figure is 50 us a call, and ``invalid``."""
    rng = random.Random(4)
    rows = (_leaves_behind("baseline", 30, rng, per_call_timed=100e-6)
            + _leaves_behind("candidate", 30, rng, per_call_timed=100e-6, moved=0.5))
    (f,) = clock_findings("c", rows)
    assert f.invalidates and f.figure > f.threshold


def test_a_few_requests_say_nothing():
    rng = random.Random(3)
    rows = requests("baseline", 4, rng) + requests("candidate", 4, rng, moved=0.9)
    assert clock_findings("c", rows) == [] and "excess_s" not in clock_figures(rows)


class _Endpoint:
    def __init__(self, replies):
        self.replies, self.asked = replies, []

    def request(self, op, **kw):
        self.asked.append((op, kw))
        return self.replies(op, kw)


def _sides(reveal, recheck_findings=()):
    cs = object.__new__(CaseSides)
    cs.case = "c"
    cs.freeze = None
    cs._fits = None
    cs.commit_counts = {"blocks": 0, "reservoir": 0, "calls": 0, "held": 0}
    cs.timer = SimpleNamespace(policy=RecheckPolicy(DefenceSettings(min_rechecks=10), random.Random(0)))
    cand = _Endpoint(lambda op, kw: reveal(kw) if op == "reveal" else {})
    base = _Endpoint(lambda op, kw: {"findings": list(recheck_findings)})
    cs.pair = SimpleNamespace(c=cand, b=base)
    return cs, cand, base


def _commits(calls, held=None, digest="d"):
    held = calls if held is None else held
    return {"seed": 5, "calls": calls, "held": held, "fits": 100, "kept": [[i, digest] for i in range(held)]}


def test_picks_are_made_after_the_reply_among_the_committed_calls_and_rechecked_with_the_block_seed():
    cs, cand, base = _sides(lambda kw: {"outputs": ["o"], "structure": None})
    rep = {"wall": 0.01, "findings": []}
    cs._judge_block(rep, 0, 8, seed=1234, commits=_commits(8))
    reveals = [kw for op, kw in cand.asked if op == "reveal"]
    rechecks = [kw for op, kw in base.asked if op == "recheck"]
    assert len(reveals) == 2 and all(0 <= kw["call"] < 8 and kw["block"] == 0 for kw in reveals)
    assert [kw["call"] for kw in rechecks] == [kw["call"] for kw in reveals]
    assert all(kw["seed"] == 1234 and kw["kept"]["digest"] == "d" and kw["kept"]["seed"] == 5 for kw in rechecks)
    assert rep["findings"] == [] and rep["recheck"] > 0


def test_a_block_that_committed_fewer_calls_than_asked_is_caught():
    cs, _, _ = _sides(lambda kw: {"outputs": ["o"], "structure": None})
    rep = {"wall": 0.01, "findings": []}
    cs._judge_block(rep, 0, 16, seed=1, commits=_commits(8))
    assert [f["check"] for f in rep["findings"]] == ["recheck"] and "asked for 16 calls committed 8" in \
        rep["findings"][0]["message"]


def test_a_worker_that_holds_fewer_outputs_than_the_baselines_fit_is_caught():
    cs, _, _ = _sides(lambda kw: {"outputs": ["o"], "structure": None})
    cs._fits = 32
    rep = {"wall": 0.01, "findings": []}
    cs._judge_block(rep, 0, 16, seed=1, commits=_commits(16, held=4))
    assert any("held 4 outputs" in f["message"] for f in rep["findings"])
    # the memory plan's reservoir, where the baseline's worker holds no more either, is no finding
    cs2, _, _ = _sides(lambda kw: {"outputs": ["o"], "structure": None})
    cs2._fits = 4
    rep2 = {"wall": 0.01, "findings": []}
    cs2._judge_block(rep2, 0, 16, seed=1, commits=_commits(16, held=4))
    assert rep2["findings"] == [] and cs2.commit_counts["reservoir"] == 1


def test_a_picked_call_the_worker_cannot_show_is_caught():
    cs, _, base = _sides(lambda kw: {"missing": True})
    rep = {"wall": 0.01, "findings": []}
    cs._judge_block(rep, 0, 8, seed=1, commits=_commits(8))
    assert rep["findings"] and all(f["check"] == "recheck" for f in rep["findings"])
    assert not [op for op, _ in base.asked if op == "recheck"]


def test_a_baseline_of_many_short_calls_a_request_raises_no_alarm_against_fewer_longer_calls():
    """A baseline of hundreds of calls a request whose harness work a call varies from request
    to request (a loaded host): read through the mean floor, its gaps swung by the floor's
    error times its calls and an honest candidate of fewer, longer calls was ``invalid``
    (``evidence/usability/busy-host-suite/``). Read at the gaps' quantile, the floor holds."""
    for seed in range(20):
        rng = random.Random(seed)
        rows = []
        for _ in range(40):
            per_call = 20e-6 * (0.6 + 0.8 * rng.random())
            rows.append(RequestClock("baseline", 0.0028 + 512 * per_call + 0.0008, 0.0028, 512, 512 * per_call))
            rows.append(RequestClock("candidate", 0.003 + 64 * 20e-6 * (0.6 + 0.8 * rng.random()) + 0.0008,
                                     0.003, 64, 64 * 20e-6))
        assert clock_findings("c", rows) == [], (seed, clock_figures(rows))


def _harness_bursts(side: str, n: int, rng: random.Random, *, timed: float = 0.004, calls: int = 16,
                    moved: float = 0.0) -> list:
    """Requests on a host busier than its cores: a third of them preempted inside the harness's
    own work around the calls (a digest, a commitment), which the worker reports as harness
    seconds. ``moved``: the share of the timed seconds the reply no longer reports."""
    out = []
    for _ in range(n):
        stolen = 0.004 + 0.008 * rng.random() if rng.random() < 0.33 else 0.0
        harness = calls * 2e-6 + stolen
        lag = 0.0008 + 0.0002 * rng.random()
        out.append(RequestClock(side, timed + harness + lag, timed * (1 - moved), calls, harness + timed * moved))
    return out


def test_time_the_baseline_lost_inside_its_harness_work_does_not_hide_moved_time():
    """Seconds a loaded host took from a third of the baseline's requests inside the harness's
    work: read as a mean floor they were taken off every candidate request's gap, the
    burst-free ones the lower quartile compares included, and a reply that dropped half its
    timed seconds passed (``evidence/defences/outside-clock-load/floor-under-load.md``)."""
    for seed in range(20):
        rng = random.Random(seed)
        rows = _harness_bursts("baseline", 30, rng) + _harness_bursts("candidate", 30, rng, moved=0.5)
        assert clock_findings("c", rows), (seed, clock_figures(rows))


def _majority_forged(side: str, n: int, rng: random.Random, *, timed: float = 0.004, calls: int = 16,
                     share: float = 0.0, burst: float = 0.0) -> list:
    """Requests of which ``share`` (spread evenly) report half their timed seconds; ``burst``:
    the largest wake-up burst, in a third of the requests."""
    out = []
    for i in range(1, n + 1):
        forged = int(i * share) > int((i - 1) * share)
        lag = 0.0008 + 0.0002 * rng.random() + (burst * rng.random() if rng.random() < 0.33 else 0.0)
        out.append(RequestClock(side, timed + calls * 2e-6 + lag, timed / 2 if forged else timed, calls, calls * 2e-6))
    return out


def test_time_hidden_in_most_requests_but_not_all_is_invalid_on_a_steady_host():
    """Seven requests in ten forged: the lower quartile of the gaps is the honest three's,
    the median is not."""
    for seed in range(20):
        rng = random.Random(seed)
        rows = _majority_forged("baseline", 30, rng) + _majority_forged("candidate", 30, rng, share=0.7)
        figs = clock_figures(rows)
        (f,) = clock_findings("c", rows)
        assert figs["excess_s"] <= figs["allowed_s"], figs  # the quartile alone would pass it
        assert f.invalidates and "in most of the candidate's requests" in f.message, (seed, figs)


def test_most_requests_unconfirmed_on_a_loaded_host_is_a_warning_not_an_alarm():
    """Where the baseline's own gaps spread wider than the margin, a median shift beyond that
    spread is a warning (``supported`` becomes ``inconclusive``), never ``invalid``."""
    rng = random.Random(4)
    base = [RequestClock("baseline", 0.004 + 0.0008 + (0.003 if i % 2 else 0.0), 0.004, 16, 16 * 2e-6)
            for i in range(30)]
    cand = _majority_forged("candidate", 30, rng, timed=0.02, share=0.7)
    (f,) = clock_findings("c", base + cand)
    assert f.severity == "warning" and not f.ok and not f.invalidates
    assert "could not be confirmed" in f.message


def test_honest_sides_preempted_inside_their_harness_work_raise_nothing():
    for seed in range(20):
        rng = random.Random(seed)
        rows = _harness_bursts("baseline", 30, rng) + _harness_bursts("candidate", 30, rng, timed=0.002, calls=32)
        assert clock_findings("c", rows) == [], (seed, clock_figures(rows))


def test_the_clocks_warning_makes_a_supported_run_inconclusive(tmp_path, monkeypatch):
    """The runner hands the clock's warning to the verdict's rules with the ``share`` warnings:
    a ``supported`` run becomes ``inconclusive``, the clock's reason first."""
    from pathlib import Path

    from expkit import runner
    from expkit.bench.sides.replicates import Replicates
    from expkit.core.findings import Finding

    warned = Finding("timer", False, "the reported times of most requests could not be confirmed", "n256-p64",
                     severity="warning")
    monkeypatch.setattr(Replicates, "clock_findings", lambda self: [warned])
    example = Path(__file__).resolve().parent.parent / "manifests" / "examples" / "cpu" / "honest-win.yaml"
    out = runner.run_manifest(example, ["measure=quick"], tmp_path / "run")
    assert out.verdict == "inconclusive", out.result["reasons"]
    assert out.result["reasons"][0].startswith("timer [case n256-p64]: the reported times"), out.result["reasons"]
