"""Kernel time from activity records: the recorder's parsing and the span logic, over fixtures.

The fixtures in ``fixtures/cupti/`` are activity buffers as CUPTI hands them to the
recorder's callback (kernel, memcpy, memset, runtime-API and external-correlation
records), with the tags the timer pushed and what each scenario must give. Those named
in their ``provenance`` as synthesised follow CUPTI's documented record layout;
``scripts/record_cupti_fixtures.py`` records real ones on a GPU (``recorded_*.json``),
which are held to the properties of their scenario instead of exact figures.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from expkit.timing import kernel_time as kt
from expkit.timing.cupti_recorder import KindCodes, join, parse, tagged_calls

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "cupti"
CODES = KindCodes(kernel=10, memcpy=1, memset=2, external=39, ours=5, runtime=5, driver=4)
KIND_CODES = {"CONCURRENT_KERNEL": 10, "MEMCPY": 1, "MEMSET": 2, "EXTERNAL_CORRELATION": 39, "RUNTIME": 5,
              "DRIVER": 4}
EXT_KINDS = {"CUSTOM0": 3, "CUSTOM1": 4, "CUSTOM2": 5}


def load(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def recorded(fx: dict, ticks_per_second: float | None = None) -> kt.Recorded:
    """The fixture's buffer through the recorder's own parsing and join."""
    acts = []
    for a in fx["activity"]:
        d = dict(a)
        d["kind"] = KIND_CODES[d["kind"]]
        if "external_kind" in d:
            d["external_kind"] = EXT_KINDS[d["external_kind"]]
        acts.append(SimpleNamespace(**d))
    raw: list = []
    ext: dict = {}
    api: dict = {}
    parse(acts, CODES, raw, ext, names=True, api=api)
    return kt.Recorded(join(raw, ext, fx["base"], api), ticks_per_second or fx["ticks_per_second"],
                       tagged=tagged_calls(ext, fx["base"], api))


def chunks(fx: dict, key: str = "chunks") -> list[kt.ChunkTags]:
    return [kt.ChunkTags(**c) for c in fx.get(key, fx["chunks"])]


SYNTHESISED = sorted(p.stem for p in FIXTURES.glob("*.json") if not p.stem.startswith("recorded_"))


@pytest.mark.parametrize("name", SYNTHESISED)
def test_spans_and_flags_of_each_synthesised_scenario(name):
    fx = load(name)
    kb = kt.block_kernel_time(recorded(fx), chunks(fx), chunks(fx, "attempted"), fx["event_holds_s"])
    want = fx["expect"]
    got = [None if c is None else round(c * 1e6, 3) for c in kb.calls]
    assert got == want["calls_us"]
    assert list(kb.flags) == want["flags"]
    assert kb.usable == (not {"unrecorded", "no-hold-record", "clock-mismatch"} & set(want["flags"]))
    per_chunk = kt.attribute(recorded(fx), chunks(fx), chunks(fx, "attempted"))
    assert sum(c.foreign for c in per_chunk) == want.get("foreign", 0)
    assert all(c.hold_seconds == pytest.approx(want["hold_us"] * 1e-6, abs=1e-9) for c in per_chunk)


def test_harness_work_is_excluded_by_tag_not_by_name():
    # The calls' kernels are named spin_kernel, like the hold; the flushes run between
    # them. Each call's span is its own kernel, never the flush or the hold.
    fx = load("single_kernel")
    kb = kt.block_kernel_time(recorded(fx), chunks(fx), (), fx["event_holds_s"])
    assert all(c < 5e-6 for c in kb.calls)  # a flush is 30 us, the hold 200 us


def test_other_tools_external_ids_are_ignored():
    # Kineto's CUSTOM0 ids sit on the same launches; only our kind is read.
    fx = load("single_kernel")
    raw: list = []
    ext: dict = {}
    acts = [SimpleNamespace(**{**a, "kind": KIND_CODES[a["kind"]],
                               **({"external_kind": EXT_KINDS[a["external_kind"]]} if "external_kind" in a else {})})
            for a in fx["activity"]]
    parse(acts, CODES, raw, ext, names=False)
    assert all(fx["base"] <= x < fx["base"] + (1 << 32) for x in ext.values())
    assert all(r[6] == "" for r in raw)  # no names unless asked for
    assert sum(1 for a in fx["activity"] if a["kind"] == "RUNTIME") > 0 and len(raw) == 7


def test_another_threads_launch_counts_only_inside_a_calls_brackets():
    # other_thread.json: the backward kernel of call 0 (correlation 105) sits between
    # the call's launch (104) and its closing event (106). Numbered after the closing
    # event instead (between 106 and the harness's 107), the call had returned: foreign.
    fx = load("other_thread")
    kb = kt.block_kernel_time(recorded(fx), chunks(fx), (), fx["event_holds_s"])
    assert kb.usable and kb.flags == ("other-thread",)
    late = json.loads(json.dumps(fx))
    for a in late["activity"]:
        a["correlation_id"] *= 10
        if a["correlation_id"] == 1050:
            a["correlation_id"] = 1065
    kb = kt.block_kernel_time(recorded(late), chunks(late), (), late["event_holds_s"])
    assert "foreign" in kb.flags and "other-thread" in kb.flags  # call 1's own backward is still its own
    assert kb.calls[0] == pytest.approx(10e-6)


def untagged(correlation: int = 0, launched: int = 0) -> kt.GpuRecord:
    return kt.GpuRecord("kernel", None, 1, 2, 7, 0, "", correlation, launched)


@pytest.mark.parametrize("by_time", [False, True])
def test_the_brackets_of_warm_calls_and_of_harness_work(by_time):
    c = kt.ChunkTags(hold=0, harness=1, first_call=2, calls=3)
    # 10 hold, 20 call 2, 30 call 3, 40 call 4 (its closing event at 45), 50 hold of the next chunk:
    # as correlation ids, or (by_time) as host start times with correlation ids in another order
    points = ((10, 0), (20, 2), (30, 3), (40, 4), (45, 4), (50, 99))
    tagged = tuple((1000 - p, tag, p) if by_time else (p, tag, 0) for p, tag in points)
    owner = kt._bracketing_call(tagged, [c], ())

    def at(p: int) -> kt.GpuRecord:
        return untagged(launched=p, correlation=7) if by_time else untagged(correlation=p)

    assert owner(at(25)) == 2  # between a call and the next call of its chunk (warm): the earlier call's
    assert owner(at(42)) == 4  # inside the last call's brackets
    assert owner(at(15)) is None  # after the hold, before any call: nobody's
    assert owner(at(47)) is None  # after the last call closed
    assert owner(at(30)) is None and owner(at(0)) is None and owner(at(60)) is None
    assert kt._bracketing_call((), [c], ())(at(25)) is None


def test_host_times_place_a_launch_that_correlation_order_would_call_foreign():
    fx = load("other_thread_by_host_time")
    kb = kt.block_kernel_time(recorded(fx), chunks(fx), (), fx["event_holds_s"])
    assert kb.usable and kb.flags == ("other-thread",)
    blind = json.loads(json.dumps(fx))  # the same records without the API calls' times
    for a in blind["activity"]:
        a.pop("start") if a["kind"] in ("RUNTIME", "DRIVER") else None
    kb = kt.block_kernel_time(recorded(blind), chunks(blind), (), blind["event_holds_s"])
    assert "foreign" in kb.flags


def test_side_stream_cannot_shorten_a_call():
    fx = load("side_stream")
    kb = kt.block_kernel_time(recorded(fx), chunks(fx), (), fx["event_holds_s"])
    assert kb.usable and "other-stream" in kb.flags
    assert min(kb.calls) >= 500e-6


def test_ticks_of_another_clock_are_caught_and_measured_again():
    fx = load("tsc_ticks")
    # The recorder believed in nanoseconds; the hold's record then disagrees with its events.
    wrong = recorded(fx, ticks_per_second=1e9)
    asked = []

    def recalibrate() -> float:
        asked.append(1)
        return fx["ticks_per_second"]

    kb = kt.block_kernel_time(wrong, chunks(fx), (), fx["event_holds_s"], recalibrate)
    assert asked == [1] and kb.usable and kb.ticks_per_second == 2.1e9
    assert kb.calls[0] == pytest.approx(205.221e-6, rel=1e-6)
    # Measured again and still wrong: the block is not trusted.
    kb = kt.block_kernel_time(wrong, chunks(fx), (), fx["event_holds_s"], lambda: 1e9)
    assert not kb.usable and "clock-mismatch" in kb.flags
    # Without a way to measure again.
    assert "clock-mismatch" in kt.block_kernel_time(wrong, chunks(fx), (), fx["event_holds_s"]).flags


def test_a_missing_hold_record_makes_the_block_untrusted():
    fx = load("single_kernel")
    rec = recorded(fx)
    no_hold = kt.Recorded(tuple(r for r in rec.records if r.tag != 0), rec.ticks_per_second)
    kb = kt.block_kernel_time(no_hold, chunks(fx), (), fx["event_holds_s"])
    assert "no-hold-record" in kb.flags and not kb.usable


def test_hold_agrees_allows_the_events_own_latency_only():
    assert kt.hold_agrees(200e-6, 203e-6)
    assert not kt.hold_agrees(200e-6, 420e-6)
    assert not kt.hold_agrees(None, 200e-6)


def test_tag_counter_never_reuses_tags_within_a_block():
    t = kt.TagCounter()
    a, b = t.chunk(3), t.chunk(2)
    assert set(a.tags()).isdisjoint(b.tags())
    assert list(a.call_tags()) == [2, 3, 4] and b.hold == 5
    t.reset()
    assert t.chunk(1).hold == 0


def test_join_keeps_only_this_recorders_ids():
    base = 1 << 40
    raw = [(0, 1, 10, 20, 7, 0, ""), (0, 2, 30, 40, 7, 0, ""), (1, 3, 50, 60, 7, 0, "")]
    recs = join(raw, {1: base + 5, 2: base + (1 << 32), 3: base - 1}, base)
    assert [r.tag for r in recs] == [5, None, None]
    assert [r.kind for r in recs] == ["kernel", "kernel", "memcpy"]


def test_recorder_is_unavailable_without_cupti(monkeypatch):
    from expkit.timing import cupti_recorder

    monkeypatch.setitem(sys.modules, "cupti", None)
    with pytest.raises(kt.RecorderUnavailable, match="cupti"):
        cupti_recorder.open_recorder()


# -- real recordings (scripts/record_cupti_fixtures.py on a GPU) --------------------------------
RECORDED = sorted(p.stem for p in FIXTURES.glob("recorded_*.json"))


@pytest.mark.parametrize("name", RECORDED or [pytest.param("none", marks=pytest.mark.skip(
    reason="no GPU recording committed yet: run scripts/record_cupti_fixtures.py on a GPU"))])
def test_recorded_scenarios_hold_their_properties(name):
    fx = load(name)
    kb = kt.block_kernel_time(recorded(fx), chunks(fx), chunks(fx, "attempted"), fx["event_holds_s"])
    p = fx["expect"]
    assert list(kb.flags) == p["flags"], kb.flags
    if p.get("min_call_us") is not None:
        assert all(c is not None and c * 1e6 >= p["min_call_us"] for c in kb.calls), kb.calls
    if p.get("max_call_us") is not None:
        assert all(c is not None and c * 1e6 <= p["max_call_us"] for c in kb.calls), kb.calls
    if p.get("foreign") is not None:
        assert sum(c.foreign for c in kt.attribute(recorded(fx), chunks(fx))) >= p["foreign"]


def test_ticks_taken_from_long_holds_when_measuring_again_does_not_help():
    # A recorder whose own clock reading cannot see the tick change (it keeps saying
    # 1 ns): holds of 2 ms, timed by their events, give the ticks instead.
    tps_true = 2.1e9
    t = lambda us: int((us * 1e-6 + 1.0) * tps_true)  # noqa: E731
    recs = [kt.GpuRecord("kernel", 0, t(0), t(2000), 7, 0), kt.GpuRecord("kernel", 2, t(2010), t(2015), 7, 0),
            kt.GpuRecord("kernel", 4, t(3000), t(5000), 7, 0), kt.GpuRecord("kernel", 6, t(5010), t(5017), 7, 0)]
    chunks = [kt.ChunkTags(0, 1, 2, 1), kt.ChunkTags(4, 5, 6, 1)]
    kb = kt.block_kernel_time(kt.Recorded(tuple(recs), 1e9), chunks, (), [2002e-6, 2003e-6], lambda: 1e9)
    assert kb.usable and "clock-from-hold" in kb.flags
    assert kb.ticks_per_second == pytest.approx(tps_true, rel=0.002)
    assert kb.calls[0] == pytest.approx(5e-6, rel=0.002) and kb.calls[1] == pytest.approx(7e-6, rel=0.002)
    # Short holds cannot set the ticks: the block stays untrusted.
    kb = kt.block_kernel_time(kt.Recorded(tuple(recs), 1e9), chunks, (), [5e-4, 5e-4], lambda: 1e9)
    assert not kb.usable and "clock-mismatch" in kb.flags
    # Holds that disagree with each other by more than the events allow stay untrusted too.
    kb = kt.block_kernel_time(kt.Recorded(tuple(recs), 1e9), chunks, (), [2002e-6, 2600e-6], lambda: 1e9)
    assert not kb.usable and "clock-mismatch" in kb.flags
