"""CUPTI's activity kinds: enabled per block, or once while a case's blocks run.

Enabling the kinds anew each block cost the first CUDA call after it 0.4-1.05 ms of host
time on H200s (evidence/harness-cost/gpu-block-cost/kinds-on), so the bench's recorders
keep them enabled between blocks and disable them when the case is done. A fake
``cupti`` module stands in for NVIDIA's bindings: it logs every enable, disable and
flush, and hands the registered callback whatever records a test queues."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
import torch

from expkit.bench.sides.side import CANDIDATE, SideBench
from expkit.manifest.settings import Settings
from expkit.manifest.spec import load
from expkit.timing import cupti_recorder
from expkit.timing.cupti_recorder import CuptiRecorder

MANIFEST = Path(__file__).resolve().parents[1] / "manifests" / "examples" / "cpu" / "honest-win.yaml"


class _Binding:
    """A callable that is not a Python function (the recorder refuses those)."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, *a):
        return self.fn(*a)


class FakeCupti:
    """The log of calls, the callbacks registered, and records the next flush delivers."""

    def __init__(self) -> None:
        self.log: list = []
        self.completed = None
        self.pending: list = []
        self.ActivityKind = types.SimpleNamespace(CONCURRENT_KERNEL=1, MEMCPY=2, MEMSET=3, EXTERNAL_CORRELATION=4,
                                                  RUNTIME=5, DRIVER=6)
        self.ExternalCorrelationKind = types.SimpleNamespace(CUSTOM2=9)
        self.activity_register_callbacks = _Binding(self._register)
        self.activity_enable = _Binding(lambda k: self.log.append(("enable", k)))
        self.activity_disable = _Binding(lambda k: self.log.append(("disable", k)))
        self.activity_flush_all = _Binding(self._flush)
        self.activity_push_external_correlation_id = _Binding(lambda kind, x: None)
        self.activity_pop_external_correlation_id = _Binding(lambda kind: None)
        self.get_timestamp = _Binding(lambda: 0)

    def _register(self, requested, completed) -> None:
        self.completed = completed

    def _flush(self, forced) -> None:
        self.log.append(("flush",))
        got, self.pending = self.pending, []
        if got:
            self.completed(got)

    def kernel(self, corr: int = 1) -> None:
        """A kernel record for the next flush."""
        self.pending.append(types.SimpleNamespace(kind=1, correlation_id=corr, start=10, end=20, stream_id=7,
                                                  device_id=0, name="k"))

    def count(self, what: str) -> int:
        return sum(1 for e in self.log if e[0] == what)


@pytest.fixture
def fake(monkeypatch):
    cupti = FakeCupti()
    monkeypatch.setitem(sys.modules, "cupti", types.SimpleNamespace(cupti=cupti))
    monkeypatch.setattr(cupti_recorder, "_ENABLED_IN", [None])
    monkeypatch.setattr(CuptiRecorder, "recalibrate", lambda self: 1e9)
    return cupti


def blocks(rec: CuptiRecorder, fake: FakeCupti, n: int) -> None:
    for _ in range(n):
        rec.start()
        fake.kernel()
        assert len(rec.stop().records) == 1


def test_by_default_the_kinds_are_enabled_and_disabled_every_block(fake):
    blocks(CuptiRecorder(), fake, 3)
    assert fake.count("enable") == 3 * 6 and fake.count("disable") == 3 * 6 and fake.count("flush") == 3


def test_kept_enabled_the_kinds_are_enabled_once_and_disabled_at_close(fake):
    rec = CuptiRecorder(keep_enabled=True)
    blocks(rec, fake, 3)
    assert fake.count("enable") == 6 and fake.count("disable") == 0 and fake.count("flush") == 3
    fake.kernel()  # made after the last block: flushed by close, never left in CUPTI
    rec.close()
    assert fake.count("disable") == 6 and fake.log[-7] == ("flush",) and fake.pending == []
    assert rec._raw == []  # and dropped
    rec.close()  # closing again disables nothing more
    assert fake.count("disable") == 6
    blocks(rec, fake, 1)  # a start after close enables them again
    assert fake.count("enable") == 12


def test_a_flush_with_no_record_makes_the_next_start_enable_again(fake):
    # torch.profiler disables the kinds when it stops: the next block must not trust they are on.
    rec = CuptiRecorder(keep_enabled=True)
    blocks(rec, fake, 1)
    rec.start()
    assert rec.stop().records == ()
    rec.start()
    assert fake.count("enable") == 12


def test_two_recorders_of_one_process_share_the_kinds(fake):
    # Both sides in one process (defences.isolate=false): one's close disables the kinds
    # for the other too, whose next start enables them again.
    a, b = CuptiRecorder(keep_enabled=True), CuptiRecorder(keep_enabled=True)
    blocks(a, fake, 1)
    blocks(b, fake, 1)
    assert fake.count("enable") == 6
    a.close()
    blocks(b, fake, 1)
    assert fake.count("enable") == 12 and fake.count("disable") == 6


def test_a_forked_child_does_not_take_its_parents_kinds_for_its_own(fake, monkeypatch):
    rec = CuptiRecorder(keep_enabled=True)
    blocks(rec, fake, 1)
    monkeypatch.setattr(cupti_recorder.os, "getpid", lambda: -1)
    blocks(rec, fake, 1)
    assert fake.count("enable") == 12


def test_the_bench_closes_its_case_timer_when_the_case_is_done(monkeypatch):
    closed = []

    class Timer:
        per_call_hook = False
        method = "fake"
        info = None

        def __init__(self, name):
            self.name = name

        def close(self):
            closed.append(self.name)

    made = iter(["first", "second", "third"])
    from expkit.timing import factory

    monkeypatch.setattr(factory, "side_timer", lambda *a, **k: Timer(next(made)))
    lm = load(MANIFEST)
    side = SideBench(lm, Settings(), "cpu", CANDIDATE, fn=lambda a: a * 2,
                     factory=lambda params, gen, device: (torch.randn(4, 4, generator=gen),), local=True)
    case = lm.manifest.cases[0].name
    side.prepare(case, run_seed=1, salt_seed=2, input_sets=1)
    side.finish_case()
    side.prepare(case, run_seed=1, salt_seed=2, input_sets=1)
    side.prepare(case, run_seed=1, salt_seed=2, input_sets=1)  # the case before raised: closed here
    side.close()
    assert closed == ["first", "second", "third"]


def test_the_bench_asks_for_a_recorder_that_keeps_the_kinds_enabled(monkeypatch):
    from expkit.timing import factory

    class Rec:
        keep_enabled = False

        def describe(self) -> str:
            return "fake"

    class NoGpu:
        def describe_flush(self) -> str:
            return "no flush"

    rec = Rec()
    factory.make_timer("cuda", Settings().measure, recorder=lambda: rec, cuda_device=NoGpu)
    assert not rec.keep_enabled  # other callers (tests, benchmarks) never close their timers
    factory.make_timer("cuda", Settings().measure, recorder=lambda: rec, cuda_device=NoGpu, keep_recording=True)
    assert rec.keep_enabled

    asked = []
    monkeypatch.setattr(factory, "make_timer", lambda *a, **k: asked.append(k) or "timer")
    for device in ("cpu", "cuda"):
        assert factory.side_timer(device, Settings().measure, lambda: None, lambda: None, lambda: 0.0) == "timer"
    assert [k["keep_recording"] for k in asked] == [True, True]
