"""expkit.timing.warm_up: a warm-up's seconds are work done, and it leaves none queued.

A simulated GPU: each call queues ``work`` seconds and returns after ``launch`` seconds of
host time; ``drain`` waits for the queue. The host's clock is the simulation's.
"""

from __future__ import annotations

from expkit.timing.warm_up import drain_device, warm_up


class AsyncDevice:
    def __init__(self, work: float, launch: float) -> None:
        self.work, self.launch = work, launch
        self.now = 0.0        # the host's clock
        self.busy_until = 0.0  # when the device ends what is queued

    def call(self) -> None:
        self.busy_until = max(self.busy_until, self.now) + self.work
        self.now += self.launch

    def drain(self) -> None:
        self.now = max(self.now, self.busy_until)

    def queued(self) -> float:
        return max(0.0, self.busy_until - self.now)


def test_each_call_is_drained_so_nothing_is_queued_when_it_returns():
    dev = AsyncDevice(work=0.008, launch=0.00003)
    calls = warm_up(dev.call, 0.05, lambda: dev.now, drain=dev.drain)
    assert dev.queued() == 0.0
    assert calls == 7  # ceil(0.05 / 0.008): the seconds are the device's work, not the host's launches
    assert 0.05 <= dev.now < 0.05 + 0.008 + 1e-9


def test_undrained_the_host_clock_runs_out_with_seconds_of_work_still_queued():
    """What the drain prevents: a host that launches in 30 us queues 0.05 s / 30 us calls of
    8 ms each, about 13 s of work the first timed block would wait for."""
    dev = AsyncDevice(work=0.008, launch=0.00003)
    calls = warm_up(dev.call, 0.05, lambda: dev.now, drain=lambda: None)
    assert calls > 1600 and dev.queued() > 10.0


def test_it_calls_at_least_once_even_with_no_seconds():
    dev = AsyncDevice(work=0.5, launch=0.001)
    assert warm_up(dev.call, 0.0, lambda: dev.now, drain=dev.drain) == 1
    assert dev.queued() == 0.0 and dev.now == 0.5


def test_the_real_drain_leaves_a_cpu_process_without_a_cuda_context():
    import torch

    drain_device()
    assert not torch.cuda.is_initialized()
