"""Kernel time and call time side by side: the result's figures and the launch-bound warning."""

from __future__ import annotations

import pytest

from expkit.timing.figures import LAUNCH_BOUND, LAUNCH_BOUND_SHARE, case_figures, timing_findings, timing_section
from expkit.timing.measure import CaseSamples, Sample
from expkit.timing.timer import TimerInfo

US = 1e-6
KERNEL = TimerInfo("kernel", "kernel")


def case(kernel_b, call_b, kernel_c, call_c, n=10, info=KERNEL, source="kernel", flags="", name="c"):
    s = []
    for r in range(n):
        s.append(Sample(name, "baseline", r, 0, 100, kernel_b, 0, 1, call_seconds=call_b, source=source, flags=flags))
        s.append(Sample(name, "candidate", r, 1, 100, kernel_c, 0, 1, call_seconds=call_c, source=source,
                        flags=flags))
    return CaseSamples(name, tuple(s), "target interval reached", 1.0, 2.0, "m", info)


def test_both_figures_and_both_speedups():
    fig = case_figures(case(4.4 * US, 7.6 * US, 3.4 * US, 6.6 * US))
    assert fig["kernel_speedup"] == pytest.approx(4.4 / 3.4)
    assert fig["call_speedup"] == pytest.approx(7.6 / 6.6)
    assert fig["baseline"]["outside_kernels"] == pytest.approx(1 - 4.4 / 7.6)
    assert fig["sources"] == {"kernel": 20} and fig["flags"] == {}


def test_launch_bound_is_a_warning_above_the_threshold_only():
    small = timing_findings({"c": case(4.4 * US, 7.6 * US, 3.4 * US, 6.6 * US)})
    assert [f.check for f in small] == [LAUNCH_BOUND]
    f = small[0]
    assert f.severity == "warning" and not f.invalidates and f.threshold == LAUNCH_BOUND_SHARE
    assert "candidate" in f.message and "baseline" in f.message and "1.29x in kernel time" in f.message
    big = timing_findings({"c": case(205 * US, 208 * US, 104 * US, 107 * US)})
    assert big == []


def test_samples_that_fell_back_are_counted():
    cs = case(10 * US, 13 * US, 5 * US, 8 * US)
    fell = CaseSamples("c", cs.samples[:10] + tuple(
        Sample("c", x.side, x.round, x.position, x.number, x.call_seconds, 0, 1, call_seconds=x.call_seconds,
               source="events", flags="unrecorded") for x in cs.samples[10:]), cs.stopped, 1.0, 2.0, "m", KERNEL)
    found = [f for f in timing_findings({"c": fell}) if f.check == "kernel-time"]
    assert len(found) == 1 and "10 of 20 samples could not use their kernel time" in found[0].message
    fig = case_figures(fell)
    assert fig["sources"] == {"kernel": 10, "events": 10} and fig["flags"] == {"unrecorded": 10}


def test_other_streams_are_reported():
    found = timing_findings({"c": case(100 * US, 101 * US, 50 * US, 51 * US, flags="other-stream")})
    assert [f.check for f in found] == ["kernel-time"] and "another stream" in found[0].message


def test_timing_section_names_the_timer_and_why_it_fell_back():
    sec = timing_section({"c": case(10 * US, 10 * US, 5 * US, 5 * US)})
    assert sec["timer"] == "kernel" and sec["fallback"] == "" and "c" in sec["cases"]
    fb = TimerInfo("events", "kernel", "CUPTI unavailable: no module named cupti")
    sec = timing_section({"c": case(10 * US, 10 * US, 5 * US, 5 * US, info=fb, source="events")})
    assert sec["timer"] == "events" and sec["requested"] == "kernel" and sec["fallback"].startswith("CUPTI")
    # A timer that does not say: inferred from the samples.
    sec = timing_section({"c": case(10 * US, 10 * US, 5 * US, 5 * US, info=None)})
    assert sec["timer"] == "kernel" and sec["requested"] is None


def test_cpu_cases_have_no_second_figure():
    s = tuple(Sample("c", side, 0, i, 10, 1e-3, 0, 1) for i, side in enumerate(("baseline", "candidate")))
    cs = CaseSamples("c", s, "x", 1.0, 1.0, "cpu", TimerInfo("cpu", "kernel"))
    fig = case_figures(cs)
    assert fig["kernel_speedup"] is None and fig["call_speedup"] is None
    assert timing_findings({"c": cs}) == []
    assert timing_section({"c": cs})["timer"] == "cpu"


def test_keep_leaves_flagged_samples_out():
    cs = case(10 * US, 10 * US, 5 * US, 5 * US)
    keep = [True] * (len(cs.samples) - 2) + [False, False]
    assert sum(case_figures(cs, keep)["sources"].values()) == len(cs.samples) - 2


def test_a_case_where_any_block_fell_back_is_judged_on_call_time_for_both_sides():
    from expkit.timing.figures import judged

    cs = case(10 * US, 13 * US, 5 * US, 8 * US)
    assert judged(cs) is cs  # every sample kernel time: unchanged
    # The baseline's blocks fall back (events): a kernel-time candidate against an
    # events baseline would inflate the speedup; both sides go to call time.
    mixed = CaseSamples("c", tuple(
        Sample("c", x.side, x.round, x.position, x.number, x.call_seconds, 0, 1, call_seconds=x.call_seconds,
               source="events", flags="unrecorded") if x.side == "baseline" else x for x in cs.samples),
        cs.stopped, 1.0, 2.0, "m", KERNEL)
    j = judged(mixed)
    assert all(s.source == "events" for s in j.samples)
    assert [s.seconds for s in j.samples if s.side == "candidate"] == [8 * US] * 10
    assert case_figures(mixed)["judged_on"] == "call" and case_figures(cs)["judged_on"] == "kernel"
    (f,) = [f for f in timing_findings({"c": mixed}) if f.check == "kernel-time"]
    assert f.message.startswith("judged on call time (CUDA events) for both sides: 10 of 20")
    # The host's wall time (foreign work) is kept: an upper bound.
    env = CaseSamples("c", mixed.samples[:-1] + (Sample("c", "candidate", 9, 1, 100, 50 * US, 0, 1,
                                                         call_seconds=8 * US, source="envelope", flags="foreign"),),
                      cs.stopped, 1.0, 2.0, "m", KERNEL)
    assert judged(env).samples[-1].seconds == 50 * US
