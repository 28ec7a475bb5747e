"""The per-call launch check: every timed call launches what the profiled call launched.

Seeded fakes stand in for the GPU: the CUDA timer's ``FakeGpu`` and ``FakeRecorder``
(tests/test_cuda_timer.py) give records with names and launch shapes, the fake
``cupti`` module of tests/test_cupti_kinds.py the recorder's own callbacks. The parent's
side (:class:`expkit.bench.sides.launches.LaunchCheck`) is fed block summaries as a worker
sends them."""

from __future__ import annotations

import types

import pytest

from expkit.bench.sides.launches import LAUNCHES, LaunchCheck, describe, launches_at_end, missing
from expkit.bench.sides.side import BASELINE, CANDIDATE
from expkit.bench.defences.tamper import TAMPER
from expkit.timing import kernel_time as kt
from expkit.timing.cupti_recorder import CuptiRecorder, join, parse
from expkit.timing.kernel_time import call_launches, launch_summary

from test_cuda_timer import US, FakeGpu, FakeRecorder, make  # noqa: E402
from test_cupti_kinds import fake  # noqa: F401,E402  (the fixture)

GEMM = "void gemm_kernel<float, 128>(float const*, float*, int)"
RELU = "void at::native::vectorized_elementwise_kernel<4, relu>(int, relu)"
PROFILED = ((GEMM, (8, 8, 1), (256, 1, 1)), (RELU, (64, 1, 1), (128, 1, 1)))


def summary(*calls):
    return launch_summary([tuple(c) for c in calls])


# -- the rule ---------------------------------------------------------------------------------
def test_the_same_launches_leave_nothing_missing():
    assert missing(PROFILED, PROFILED) == []
    assert missing(PROFILED, tuple(reversed(PROFILED))) == []  # order is not compared


def test_a_kernel_left_out_is_missing():
    assert missing(PROFILED, PROFILED[:1]) == [PROFILED[1]]
    assert missing(PROFILED, ()) == list(PROFILED)


def test_a_smaller_grid_is_missing_and_a_larger_one_is_not():
    smaller = ((GEMM, (4, 8, 1), (256, 1, 1)), PROFILED[1])
    larger = ((GEMM, (16, 8, 1), (256, 1, 1)), PROFILED[1])
    assert missing(PROFILED, smaller) == [PROFILED[0]]
    assert missing(PROFILED, larger) == []


def test_a_different_kernel_of_the_same_shape_does_not_stand_in():
    other = (("void other_kernel(float*)", (8, 8, 1), (256, 1, 1)), PROFILED[1])
    assert missing(PROFILED, other) == [PROFILED[0]]


def test_names_match_by_their_unqualified_name_where_spellings_differ():
    spelled = (("gemm_kernel<float, 128>(float const*, float*, int)", (8, 8, 1), (256, 1, 1)), PROFILED[1])
    assert missing(PROFILED, spelled) == []


def test_the_description_names_each_kernel_and_its_shape():
    text = describe(PROFILED)
    assert text.startswith("2 kernel(s): gemm_kernel grid [8, 8, 1] block [256, 1, 1]")
    assert describe(()) == "no kernel"


# -- the parent's check over block summaries ---------------------------------------------------
def test_a_timed_call_with_fewer_kernels_is_invalid_naming_the_call_and_both_lists():
    check = LaunchCheck("c", PROFILED)
    found = check.block(CANDIDATE, summary(PROFILED, PROFILED, PROFILED[:1], PROFILED))
    assert len(found) == 1 and found[0].check == LAUNCHES and not found[0].ok
    msg = found[0].message
    assert "timed call 3" in msg and "1 kernel(s): gemm_kernel" in msg and "2 kernel(s)" in msg
    assert "vectorized_elementwise_kernel grid [64, 1, 1]" in msg
    # once a case; the counts go on
    assert check.block(CANDIDATE, summary(PROFILED[:1])) == []
    assert check.evidence()["short"] == 2 and check.evidence()["calls"] == 5


def test_honest_blocks_raise_nothing_and_the_baseline_is_not_judged():
    check = LaunchCheck("c", PROFILED)
    assert check.block(CANDIDATE, summary(PROFILED, PROFILED + PROFILED[:1])) == []
    assert check.block(BASELINE, summary(())) == []
    assert check.findings() == []


def test_an_altered_recorder_is_tamper():
    check = LaunchCheck("c", PROFILED)
    found = check.block(CANDIDATE, {**summary(PROFILED), "altered": "replaced or added: _callbacks"})
    assert [f.check for f in found] == [TAMPER] and "_callbacks" in found[0].message


def test_a_recorder_stopped_in_the_candidates_blocks_alone_is_invalid_at_the_cases_end():
    check = LaunchCheck("c", PROFILED)
    check.block(BASELINE, summary(()))
    check.block(CANDIDATE, {"altered": "", "missing": "no record of the timer's own hold kernel"})
    check.block(CANDIDATE, summary(PROFILED))
    (f,) = check.findings()
    assert f.check == LAUNCHES and not f.ok and "1 of the candidate's 2" in f.message
    both = LaunchCheck("c", PROFILED)  # both sides lost it: the machine's, not the candidate's
    both.block(BASELINE, {"missing": "x"})
    both.block(CANDIDATE, {"missing": "x"})
    assert both.findings() == []


def test_where_the_check_cannot_be_made_an_ok_finding_says_why():
    pair = types.SimpleNamespace(device="cuda", evidence={})
    (f,) = launches_at_end(LaunchCheck("c", PROFILED), pair)  # blocks timed by events: no summary at all
    assert f.ok and "not available" in f.message and "CUDA events alone" in f.message
    (g,) = launches_at_end(LaunchCheck("c", None), pair)
    assert g.ok and "identity check" in g.message
    assert launches_at_end(LaunchCheck("c", None), types.SimpleNamespace(device="cpu", evidence={})) == []


# -- the worker's side: each call's kernels from the record ------------------------------------
def _records(*per_call):
    """Records of one chunk: hold (tag 0), a flush under the harness tag (1), then calls."""
    recs = [kt.GpuRecord("kernel", 0, 100, 200, 7, 0, "spin"), kt.GpuRecord("kernel", 1, 210, 220, 7, 0, "flush")]
    t = 300
    for i, launches in enumerate(per_call):
        for name, grid, block in launches:
            recs.append(kt.GpuRecord("kernel", 2 + i, t, t + 5, 7, 0, name, 0, 0, grid, block))
            t += 10
        recs.append(kt.GpuRecord("memset", 2 + i, t, t + 1, 7, 0))  # copies and sets are not compared
    return kt.Recorded(tuple(recs))


def test_each_calls_kernels_come_from_its_own_tag_without_the_harness_work():
    chunk = kt.ChunkTags(0, 1, 2, 3)
    calls = call_launches(_records(PROFILED, PROFILED[:1], ()), [chunk])
    assert calls == [PROFILED, PROFILED[:1], ()]
    s = launch_summary(calls)
    assert len(s["kernels"]) == 2 and len(s["sequences"]) == 3 and s["calls"] == [0, 1, 2]


def test_recorded_names_are_spelled_as_the_profiler_spells_them():
    chunk = kt.ChunkTags(0, 1, 2, 1)
    mangled = (("_Zgemm", (8, 8, 1), (256, 1, 1)),)
    calls = call_launches(_records(mangled), [chunk], demangle=lambda n: GEMM if n == "_Zgemm" else n)
    assert calls == [((GEMM, (8, 8, 1), (256, 1, 1)),)]


def test_the_cuda_timer_leaves_each_calls_launches_beside_its_time():
    gpu = FakeGpu()
    t = make(gpu, cold=True, recorder=FakeRecorder(gpu))
    n = [0]

    def op():
        n[0] += 1
        gpu.enqueue("main", 5 * US, gpu.launch_s)
        if n[0] % 2:
            gpu.enqueue("main", 5 * US, gpu.launch_s)  # odd calls launch a second kernel

    t.sample(op, 4)
    got = t.last_launches
    assert got is not None and got["altered"] == ""
    per_call = [len(got["sequences"][i]) for i in got["calls"]]
    assert per_call == [2, 1, 2, 1]


def test_without_a_record_of_its_hold_the_timer_says_the_record_is_missing():
    gpu = FakeGpu()
    t = make(gpu, cold=True, recorder=FakeRecorder(gpu, silent=True))
    t.sample(gpu.op(warm_s=5 * US), 2)
    assert "missing" in t.last_launches and "calls" not in t.last_launches


def test_the_timer_without_a_recorder_leaves_no_launches():
    gpu = FakeGpu()
    t = make(gpu, cold=True)
    t.sample(gpu.op(warm_s=5 * US), 2)
    assert t.last_launches is None


# -- the recorder: its callbacks bound at construction, its state sealed ------------------------
def test_kernel_records_carry_their_grid_and_block():
    rec = types.SimpleNamespace(kind=1, correlation_id=3, start=1, end=2, stream_id=7, device_id=0, name="k",
                                grid_x=4, grid_y=2, grid_z=1, block_x=128, block_y=1, block_z=1)
    codes = types.SimpleNamespace(kernel=1, memcpy=2, memset=3, external=4, ours=9, runtime=5, driver=6)
    raw: list = []
    parse([rec], codes, raw, {}, True)
    (r,) = join(raw, {}, 0)
    assert (r.name, r.grid, r.block) == ("k", (4, 2, 1), (128, 1, 1))


def test_a_replaced_callback_or_parser_does_not_reach_the_record(fake, monkeypatch):
    from expkit.timing import cupti_recorder

    rec = CuptiRecorder(names=True)
    assert CuptiRecorder.altered(rec) == ""
    rec._completed = lambda activities: None  # what a candidate that found it through gc would do
    monkeypatch.setattr(cupti_recorder, "parse", lambda *a, **k: None)
    rec.start()
    fake.kernel(corr=5)
    got = rec.stop()
    assert len(got.records) == 1  # CUPTI still hands its buffers to the callbacks made at construction
    assert "_completed" in CuptiRecorder.altered(rec)


@pytest.mark.parametrize("what", ["_callbacks", "_raw", "stop"])
def test_the_seal_names_what_was_replaced_on_the_instance(fake, what):
    rec = CuptiRecorder(names=True)
    setattr(rec, what, (lambda *a: None) if what != "_raw" else [])
    assert what in CuptiRecorder.altered(rec)


def test_the_seal_names_a_method_replaced_on_the_class(fake, monkeypatch):
    rec = CuptiRecorder(names=True)
    monkeypatch.setattr(CuptiRecorder, "pop", lambda self: None)
    assert "CuptiRecorder.pop" in CuptiRecorder.altered(rec)


def test_a_block_replys_launches_are_taken_out_and_judged_as_its_findings():
    from expkit.bench.sides.launches import launch_findings

    check = LaunchCheck("c", PROFILED)
    rep = {"seconds": 1e-3, "findings": [], "launches": summary(PROFILED[:1])}
    got = launch_findings(check, CANDIDATE, rep)
    assert "launches" not in rep  # the summary does not travel on into the timing account
    assert [(f["check"], f["ok"], f["case"]) for f in got] == [(LAUNCHES, False, "c")]
    assert launch_findings(check, CANDIDATE, {"findings": []}) == []  # a CPU block: no summary


def test_a_later_replicates_counts_join_the_runs():
    from expkit.bench.sides.launches import add_launches

    first = {LAUNCHES: {"c": {"profiled": 2, "calls": 10, "short": 0, "blocks": {CANDIDATE: 2}, "unrecorded": {}}}}
    later = {LAUNCHES: {"c": {"profiled": 2, "calls": 6, "short": 1, "blocks": {CANDIDATE: 1}, "unrecorded": {}}}}
    add_launches(first, later, "c")
    add_launches(first, {}, "c")
    assert first[LAUNCHES]["c"] == {"profiled": 2, "calls": 16, "short": 1, "blocks": {CANDIDATE: 3}, "unrecorded": {}}
