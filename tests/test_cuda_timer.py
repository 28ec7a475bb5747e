"""CudaTimer on a simulated GPU: holds, cold/warm blocks, retries, splitting, the side-stream guard.

``FakeGpu`` is a small discrete-event model of one CUDA device as the timer sees it: a
host clock that advances by a launch cost per command, streams that run their commands
in order (a command starts when the host has launched it, plus a latency, and its
stream is free), events that take the time at which their stream reaches them, a
bounded launch queue (the host stalls when it is full), and an L2 that is cold after
a flush. Everything is deterministic, so each expectation below is exact up to the
model's latencies.
"""

from __future__ import annotations

import pytest

from expkit.cuda_timer import CudaTimer, split_calls
from expkit.timing import Timer, calibrate

US = 1e-6


class FakeEvent:
    def __init__(self, gpu: "FakeGpu") -> None:
        self.gpu = gpu
        self.ts: float | None = None

    def record(self) -> None:
        self.ts = self.gpu.enqueue("main", 0.0, self.gpu.record_s)

    def query(self) -> bool:
        assert self.ts is not None
        return self.ts <= self.gpu.host

    def elapsed_time(self, end: "FakeEvent") -> float:
        assert self.ts is not None and end.ts is not None
        assert end.ts <= self.gpu.synced_until, "event read before the device was synchronised"
        return (end.ts - self.ts) * 1e3


class FakeGpu:
    def __init__(
        self,
        *,
        launch_s: float = 5 * US,
        record_s: float = 1 * US,
        latency_s: float = 3 * US,
        sync_latency_s: float = 4 * US,
        cycles_per_s: float = 1.5e9,
        queue_depth: int = 1024,
        flush_s: float = 30 * US,
    ) -> None:
        self.host = 0.0
        self.launch_s, self.record_s, self.latency_s = launch_s, record_s, latency_s
        self.sync_latency_s = sync_latency_s
        self.cycles_per_s = cycles_per_s
        self.queue_depth = queue_depth
        self.flush_s = flush_s
        self.free = {"main": 0.0, "side": 0.0}
        self.done_times: list[float] = []
        self.synced_until = 0.0
        self.l2_cold = True
        self.l2_bytes = 50 * 2**20
        self.flushes = 0
        self.holds: list[float] = []

    # the Device seam
    def clock(self) -> float:
        return self.host

    def enqueue(self, stream: str, duration: float, host_cost: float) -> float:
        pending = sorted(t for t in self.done_times if t > self.host)
        if len(pending) >= self.queue_depth:  # launch queue full: wait for a slot
            self.host = pending[len(pending) - self.queue_depth]
        self.host += host_cost
        start = max(self.host + self.latency_s, self.free[stream])
        end = start + duration
        self.free[stream] = end
        self.done_times.append(end)
        return end

    def new_event(self) -> FakeEvent:
        return FakeEvent(self)

    def hold(self, cycles: int) -> None:
        self.holds.append(cycles / self.cycles_per_s)
        self.enqueue("main", cycles / self.cycles_per_s, self.launch_s)

    def flush_l2(self) -> None:
        self.flushes += 1
        self.l2_cold = True
        self.enqueue("main", self.flush_s, self.launch_s)

    def synchronize(self) -> None:
        self.host = max(self.host, *self.free.values()) + self.sync_latency_s
        self.synced_until = self.host

    def describe_flush(self) -> str:
        return "fake flush"

    # ops under test
    def op(self, warm_s: float, cold_s: float | None = None, host_s: float = 0.0, stream: str = "main"):
        def fn() -> None:
            self.host += host_s
            d = cold_s if (cold_s is not None and self.l2_cold) else warm_s
            self.l2_cold = False
            self.enqueue(stream, d, self.launch_s)

        return fn


def make(gpu: FakeGpu, **kw) -> CudaTimer:
    return CudaTimer(device=gpu, clock=gpu.clock, **kw)


def test_satisfies_timer_protocol_and_names_its_method():
    gpu = FakeGpu()
    cold, warm = make(gpu), make(gpu, cold=False)
    assert isinstance(cold, Timer) and isinstance(warm, Timer)
    assert "cold" in cold.method and "fake flush" in cold.method
    assert "warm" in warm.method and "flush" not in warm.method
    assert "_sleep" in cold.method and "synchronize" in cold.method


def test_split_calls():
    assert split_calls(10, 4) == [4, 3, 3]
    assert split_calls(8, 8) == [8]
    assert sum(split_calls(1000, 64)) == 1000 and max(split_calls(1000, 64)) <= 64
    with pytest.raises(ValueError):
        split_calls(0, 4)


def test_sample_rejects_zero_calls():
    with pytest.raises(ValueError):
        make(FakeGpu()).sample(lambda: None, 0)


def test_warm_hold_hides_launch_gaps_of_a_launch_bound_op():
    # 2 us of GPU work behind 10 us of host launch cost: unheld, the block would time
    # the host's launch rate.
    gpu = FakeGpu()
    t = make(gpu, cold=False)
    fn = gpu.op(warm_s=2 * US, host_s=5 * US)
    for _ in range(3):
        per_call = t.sample(fn, 100)
    assert t.last_block is not None and t.last_block.hold_ok
    assert per_call == pytest.approx(2 * US + 3 * US / 100, rel=0.05)  # + the event's latency, once
    assert t.last_call_times == ()


def test_without_a_hold_the_same_block_times_the_host():
    # The model is able to fail: a hold of zero length leaves the launch gaps in.
    gpu = FakeGpu()
    t = make(gpu, cold=False, hold_margin=1.0, hold_floor_s=0.0, max_attempts=0)
    t._queue_per_call_s = 0.0
    per_call = t.sample(gpu.op(warm_s=2 * US, host_s=5 * US), 100)
    assert not t.last_block.hold_ok
    assert per_call > 4 * US


def test_cold_excludes_the_flush_and_sees_the_cold_time():
    gpu = FakeGpu()
    t = make(gpu)
    fn = gpu.op(warm_s=4 * US, cold_s=9 * US, host_s=3 * US)
    per_call = t.sample(fn, 20)
    assert gpu.flushes == 20
    assert len(t.last_call_times) == 20
    # each pair holds the op and one event latency at most, never the 30 us flush
    assert all(9 * US - 1e-12 <= c <= 9 * US + gpu.latency_s + 1e-12 for c in t.last_call_times)
    assert per_call == pytest.approx(sum(t.last_call_times) / 20)
    warm = make(gpu, cold=False).sample(fn, 20)
    assert warm < per_call


def test_too_short_first_hold_is_detected_and_retried():
    gpu = FakeGpu()
    t = make(gpu, cold=False)
    t._queue_per_call_s = 0.1 * US  # a badly wrong first guess
    t.sample(gpu.op(warm_s=2 * US, host_s=20 * US), 50)
    assert t.last_block.attempts == 2 and t.last_block.hold_ok
    assert t.last_block.returned_seconds == pytest.approx(2 * US, rel=0.05)


def test_spin_is_converted_with_the_measured_clock():
    # The hint says 2 GHz, the fake runs at 1 GHz: the first hold is twice as long as
    # asked (safe), and the next one is sized with the measured clock.
    gpu = FakeGpu(cycles_per_s=1.0e9)
    t = make(gpu, cold=False, hold_floor_s=0.0)
    fn = gpu.op(warm_s=2 * US, host_s=5 * US)
    t.sample(fn, 100)
    asked = t.hold_margin * t._queue_per_call_s * 100
    t.sample(fn, 100)
    assert gpu.holds[-1] == pytest.approx(asked, rel=0.01)


def test_blocks_larger_than_the_launch_queue_are_split():
    # 100 warm calls need ~102 queue slots; the queue holds 40. The first block
    # stalls behind the hold, twice, and the timer halves its blocks until they fit.
    gpu = FakeGpu(queue_depth=40)
    t = make(gpu, cold=False)
    fn = gpu.op(warm_s=2 * US, host_s=5 * US)
    per_call = t.sample(fn, 100)
    assert t.last_block.hold_ok
    assert t.last_block.chunks >= 3
    assert t.max_calls_per_hold < 40
    assert per_call == pytest.approx(2 * US, rel=0.1)


def test_sample_splits_large_numbers_into_held_chunks():
    gpu = FakeGpu()
    t = make(gpu, cold=False, max_calls_per_hold=16)
    t.sample(gpu.op(warm_s=3 * US, host_s=5 * US), 100)
    assert t.last_block.chunks == 7 and t.last_block.calls == 100


def test_side_stream_work_cannot_make_the_time_shorter_than_the_work():
    gpu = FakeGpu()
    for cold in (True, False):
        t = make(gpu, cold=cold)
        cheat = gpu.op(warm_s=500 * US, stream="side")
        per_call = t.sample(cheat, 10)
        assert t.last_block.foreign_work
        assert t.last_block.event_seconds < 10 * US  # what the events alone would claim
        assert per_call >= 500 * US


def test_honest_ops_do_not_trip_the_side_stream_guard():
    gpu = FakeGpu()
    for cold in (True, False):
        t = make(gpu, cold=cold)
        per_call = t.sample(gpu.op(warm_s=500 * US), 10)
        assert not t.last_block.foreign_work
        assert per_call == pytest.approx(500 * US, rel=0.02)


def test_works_with_calibrate():
    gpu = FakeGpu()
    t = make(gpu, cold=False)
    number = calibrate(t, gpu.op(warm_s=10 * US, host_s=5 * US), min_block_seconds=1e-3)
    assert 100 <= number <= 256


def test_available_is_false_without_cuda(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert CudaTimer.available() is False


def test_modules_import_and_answer_without_torch():
    # Loaded by path with torch made unimportable: neither module needs torch (nor
    # anything else heavy) at import, and available() answers False instead of raising.
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "expkit"
    code = f"""
import importlib.util, sys
sys.modules["torch"] = None
mods = {{}}
for name in ("cuda_timer", "telemetry"):
    spec = importlib.util.spec_from_file_location("leaf_" + name, r"{root}/" + name + ".py")
    m = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = m
    spec.loader.exec_module(m)
    mods[name] = m
print(mods["cuda_timer"].CudaTimer.available())
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
