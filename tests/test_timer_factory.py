"""make_timer: the one place a side's timer is chosen, for every device and setting."""

from __future__ import annotations

from dataclasses import replace

import pytest

from expkit.manifest.settings import MeasureSettings
from expkit.timing import kernel_time as kt
from expkit.timing.cuda_timer import CudaTimer
from expkit.timing.factory import make_timer
from expkit.timing.per_call import HookedDevice, PerCallTimer
from expkit.timing.timer import PerfCounterTimer, Timer
from test_cuda_timer import US, FakeGpu, FakeRecorder

M = MeasureSettings()


def test_cpu_timers():
    calls = []
    t = make_timer("cpu", M, before=lambda: calls.append("b"), after=lambda: calls.append("a"))
    assert isinstance(t, PerCallTimer) and isinstance(t, Timer) and t.per_call_hook
    t.sample(lambda: calls.append("call"), 2)
    assert calls == ["b", "call", "a", "b", "call", "a"]
    plain = make_timer("cpu", M)
    assert isinstance(plain, PerfCounterTimer) and not plain.per_call_hook
    assert plain.info.kind == "cpu" and plain.info.fallback == ""


def test_cuda_cold_runs_the_hook_inside_the_flush_and_records_kernel_time():
    gpu = FakeGpu()
    hooks = []
    t = make_timer("cuda", M, before=lambda: hooks.append(1), clock=gpu.clock,
                   recorder=lambda: FakeRecorder(gpu), cuda_device=lambda: gpu)
    assert isinstance(t, CudaTimer) and t.cold and t.per_call_hook
    assert isinstance(t._device, HookedDevice)
    assert t.info.kind == "kernel" and t.info.fallback == ""
    per_call = t.sample(gpu.op(warm_s=3 * US), 8)
    assert len(hooks) == gpu.flushes >= 8
    assert t.last_timing.source == "kernel" and per_call == pytest.approx(3 * US, rel=1e-6)


def test_cuda_warm_leaves_the_hook_to_the_caller():
    gpu = FakeGpu()
    t = make_timer("cuda", replace(M, cold=False), before=lambda: None, clock=gpu.clock,
                   recorder=lambda: FakeRecorder(gpu), cuda_device=lambda: gpu)
    assert not t.cold and not t.per_call_hook and t._device is gpu


def test_cuda_without_cupti_falls_back_to_events_and_says_why():
    gpu = FakeGpu()

    def missing() -> kt.Recorder:
        raise kt.RecorderUnavailable("ModuleNotFoundError: No module named 'cupti'")

    t = make_timer("cuda", M, clock=gpu.clock, recorder=missing, cuda_device=lambda: gpu)
    assert t.info.kind == "events" and t.info.requested == "kernel"
    assert t.info.fallback == "CUPTI unavailable: ModuleNotFoundError: No module named 'cupti'"
    assert "CUPTI unavailable" in t.method
    t.sample(gpu.op(warm_s=3 * US), 4)
    assert t.last_timing.source == "events"


def test_events_asked_for_never_opens_a_recorder():
    gpu = FakeGpu()

    def never() -> kt.Recorder:
        raise AssertionError("the recorder was opened")

    t = make_timer("cuda", replace(M, timer="events"), clock=gpu.clock, recorder=never, cuda_device=lambda: gpu)
    assert t.info.kind == "events" and t.info.requested == "events" and t.info.fallback == ""


def test_bad_arguments():
    with pytest.raises(ValueError):
        make_timer("tpu", M)
    with pytest.raises(Exception):
        make_timer("cpu", replace(M, timer="cycles"))
