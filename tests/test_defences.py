"""Unit tests of the defences (expkit/bench/, expkit/checks/global_state.py and activity.py, the preflight's
additions). The end-to-end suite of bad and honest candidates is tests/adversarial/."""

from __future__ import annotations

import os
import random
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest
import torch

from expkit.bench.processes import channel
from expkit.bench.defences.envelope import BlockAccount, RecheckPolicy, SessionTimer, envelope_counts, envelope_findings, flagged
from expkit.bench.defences.fallback import ExceptionWitness
from expkit.bench.defences.fresh import FreshInputs
from expkit.timing.per_call import HookedDevice, PerCallTimer
from expkit.bench.defences.tamper import FunctionSnapshot
from expkit.bench.sides.in_process import preflight_in_process
from expkit.checks import activity, global_state, preflight
from expkit.core.findings import Finding
from expkit.manifest import load
from expkit.manifest.settings import DefenceSettings, OracleSettings
from expkit.verdict import INCONCLUSIVE, REFUTED, SUPPORTED, Verdict, plausibility

D = DefenceSettings()


# --- global state and function identity ---------------------------------------------------

def test_state_snapshot_sees_a_changed_matmul_precision():
    before = global_state.snapshot_state()
    old = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("medium" if old != "medium" else "highest")
    try:
        changes = global_state.state_changes(before, global_state.snapshot_state())
    finally:
        torch.set_float32_matmul_precision(old)
    assert any(c.startswith("torch.get_float32_matmul_precision()") for c in changes)
    assert global_state.state_changes(before, global_state.snapshot_state()) == []


def test_the_default_device_probe_agrees_with_torch_whatever_set_it():
    probe = global_state._default_device
    assert probe(torch) == str(torch.get_default_device()) == "cpu"
    with torch.device("meta"):  # a DeviceContext mode on the stack
        assert probe(torch) == str(torch.get_default_device()) == "meta"
    torch.set_default_device("meta")  # the global device context
    try:
        assert probe(torch) == str(torch.get_default_device()) == "meta"
        assert global_state.snapshot_state(cuda=False)["torch.get_default_device()"] == "meta"
    finally:
        torch.set_default_device(None)
    assert probe(torch) == "cpu"


def test_a_cpu_blocks_state_check_leaves_cudas_settings_to_the_case_checkpoints():
    full, cpu = global_state.snapshot_state(), global_state.snapshot_state(cuda=False)
    assert set(cpu) < set(full) and all(full[k] == v for k, v in cpu.items())
    left_out = set(full) - set(cpu)
    assert "torch.backends.cuda.matmul.allow_tf32" in left_out and "torch.backends.cudnn.benchmark" in left_out
    assert not {"torch.get_num_threads()", "torch.get_float32_matmul_precision()",
                "torch function modes (stack depth)", "torch.backends.mkldnn.enabled"} & left_out
    side = SimpleNamespace(device="cpu", state0=full, _told=set(),
                           funcs0=SimpleNamespace(changed=lambda hot_only=False, gpu=True: []))
    from expkit.bench.sides.side import SideBench

    old = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = not old
    try:
        assert SideBench.tamper_findings(side, "while timed", "c", hot_only=True) == []  # after a CPU block
        found = SideBench.tamper_findings(side, "while the case was measured", "c")  # the case's end
    finally:
        torch.backends.cudnn.benchmark = old
    assert [f.check for f in found] == [global_state.GLOBAL_STATE]
    assert "torch.backends.cudnn.benchmark" in found[0].message
    side.device = "cuda"  # a GPU block reads them all
    torch.backends.cudnn.benchmark = not old
    try:
        side._told = set()
        assert [f.check for f in SideBench.tamper_findings(side, "while timed", "c", hot_only=True)] == [
            global_state.GLOBAL_STATE]
    finally:
        torch.backends.cudnn.benchmark = old


def test_the_hot_check_compares_identities_not_equality(monkeypatch):
    """A replacement that says it equals everything is still a replacement: the per-block
    check tests identity (``is``), never ``==``."""
    class EqualsAll:
        def __eq__(self, other):
            return True

        def __call__(self):
            return 0.0

    snap = FunctionSnapshot.take()
    monkeypatch.setattr(time, "perf_counter", EqualsAll())
    assert "time.perf_counter (replaced)" in snap.changed(hot_only=True)
    monkeypatch.undo()
    assert snap.changed(hot_only=True) == []


def test_function_snapshot_sees_a_replaced_clock_and_a_swapped_code(monkeypatch):
    snap = FunctionSnapshot.take()
    assert snap.changed() == []
    monkeypatch.setattr(time, "perf_counter", lambda: 0.0)
    assert "time.perf_counter (replaced)" in snap.changed(hot_only=True)
    monkeypatch.undo()
    fn = global_state.state_changes
    code = fn.__code__
    fn.__code__ = (lambda before, after: []).__code__
    try:
        assert "expkit.checks.global_state.state_changes (code swapped)" in snap.changed()
    finally:
        fn.__code__ = code
    assert snap.changed() == []


def test_the_hot_check_sees_the_thread_counter_replaced_where_the_harness_reads_it(monkeypatch):
    """The per-call thread count reads ``_thread._count`` through a name of expkit's own; a
    replacement of either, one that always says no thread started, is a tamper finding."""
    import _thread

    from expkit.bench.sides import side as side_module

    snap = FunctionSnapshot.take()
    for owner, attr, name in ((_thread, "_count", "_thread._count"),
                              (side_module, "thread_count", "expkit.bench.sides.side.thread_count"),
                              (activity, "thread_count", "expkit.checks.activity.thread_count")):
        monkeypatch.setattr(owner, attr, lambda: 0)
        assert f"{name} (replaced)" in snap.changed(hot_only=True, gpu=False)
        monkeypatch.undo()
    assert snap.changed(hot_only=True, gpu=False) == []


def test_the_thread_count_sees_a_thread_started_below_threading():
    """``_thread.start_new_thread`` makes a thread ``threading`` never lists; the count read
    around each timed call sees it while it runs."""
    import _thread

    before, listed = activity.thread_count(), threading.active_count()
    release, started = threading.Event(), threading.Event()

    def body():
        started.set()
        release.wait(5.0)

    _thread.start_new_thread(body, ())
    assert started.wait(5.0)
    try:
        assert activity.thread_count() == before + 1
        assert threading.active_count() == listed  # threading's count does not see it
    finally:
        release.set()
    deadline = time.monotonic() + 5.0
    while activity.thread_count() > before and time.monotonic() < deadline:
        time.sleep(0.001)
    assert activity.thread_count() == before


# --- threads -------------------------------------------------------------------------------

def test_a_thread_still_working_after_the_call_is_seen_and_a_parked_pool_is_not():
    before = activity.activity()
    done = threading.Event()
    t = threading.Thread(target=lambda: done.wait(0.5) or time.sleep(0.0), name="still-working")
    # A thread waiting inside the *caller's* code is working: its innermost frame is not the stdlib's.
    t2 = threading.Thread(target=_busy_wait, args=(done,), name="busy")
    t2.start()
    msg = activity.new_activity(before, activity.activity(), grace_s=0.0)
    done.set()
    t2.join()
    assert msg is not None and "busy" in msg

    pool = ThreadPoolExecutor(max_workers=2)
    before = activity.activity()
    pool.submit(sum, [1, 2]).result()
    assert activity.new_activity(before, activity.activity()) is None
    pool.shutdown()
    del t


def _busy_wait(done: threading.Event) -> None:
    while not done.is_set():
        time.sleep(0.001)


# --- silent fallbacks ----------------------------------------------------------------------

def test_exception_witness_sees_only_swallowed_exceptions_of_the_given_files(tmp_path):
    src = tmp_path / "cand.py"
    src.write_text(textwrap.dedent('''
        def inner(x):
            raise ValueError("odd shape")
        def fallback(x):
            try:
                return inner(x)
            except ValueError:
                return -x
        def clean(x):
            return x + 1
    '''))
    ns: dict = {}
    exec(compile(src.read_text(), str(src), "exec"), ns)
    w = ExceptionWitness(ns["fallback"], [str(src)])
    assert w(3) == -3
    assert w.swallowed and w.swallowed[0][0] == "ValueError" and w.swallowed[0][2] == "cand.py"
    w2 = ExceptionWitness(ns["clean"], [str(src)])
    assert w2(3) == 4 and w2.swallowed == ()
    w3 = ExceptionWitness(ns["fallback"], [str(tmp_path / "other.py")])
    w3(3)
    assert w3.swallowed == ()


# --- fresh inputs --------------------------------------------------------------------------

def test_salt_changes_content_and_version_of_floating_inputs_only():
    g = torch.Generator().manual_seed(0)
    sets = [(torch.randn(64, generator=g), torch.arange(10), 3.0), (torch.randn(64, generator=g), torch.arange(10), 3.0)]
    fresh = FreshInputs(sets, "salt", random.Random(1))
    seen = []
    for _ in range(8):
        args, pristine = fresh.take(keep=True)
        assert pristine is not None and torch.equal(pristine[0], args[0]) and pristine[0] is not args[0]
        seen.append((fresh.index, args[0].clone(), args[0]._version))
        assert torch.equal(args[1], torch.arange(10)) and args[2] == 3.0
    # Every reuse of a set sees new content and a new version.
    for j in (0, 1):
        mine = [(c, v) for i, c, v in seen if i == j]
        for (a, va), (b, vb) in zip(mine, mine[1:]):
            assert not torch.equal(a, b) and vb > va
    assert fresh.salted


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.complex64])
def test_salt_copies_one_element_bit_for_bit_whatever_the_floating_dtype(dtype):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(4096, generator=g).to(dtype)
    before = x.clone()
    fresh = FreshInputs([(x,)], "salt", random.Random(5))
    assert fresh._targets[0][0][1] is not None  # the fast path: a memoryview of the elements
    width = x.element_size()
    salted = 0
    for _ in range(1100):  # more than one batch of draws (SALT_BATCH)
        v0 = x._version
        fresh.take()
        now, was = x.view(torch.uint8).reshape(4096, width), before.view(torch.uint8).reshape(4096, width)
        changed = (now != was).any(1)
        assert x._version == v0 + 1
        # one element at most changed since the last take, and it holds another element's bits
        assert int(changed.sum()) <= 1
        if changed.any():
            i = int(changed.nonzero()[0])
            others = torch.cat([was[:i], was[i + 1:]])
            assert bool((others == now[i]).all(1).any())
            salted += 1
            before = x.clone()
    assert salted > 1000  # a copy onto an equal element is the rare exception


def test_salt_of_a_strided_input_takes_torchs_own_indexing_and_still_salts():
    base = torch.randn(64, 64)
    x = base.t()  # not contiguous
    fresh = FreshInputs([(x,)], "salt", random.Random(0))
    assert fresh._targets[0][0][1] is None
    seen = x.clone()
    for _ in range(20):
        fresh.take()
    assert not torch.equal(seen, x) and fresh.salted


def test_the_version_bump_falls_back_to_torchs_public_call_where_the_private_one_differs(monkeypatch):
    import torch.autograd.graph as graph

    from expkit.bench.defences import fresh as fresh_module

    real = torch._C._increment_version
    assert fresh_module._version_bump() is real  # this torch: the private call takes the tuple
    public = []
    monkeypatch.setattr(graph, "increment_version", lambda t: public.append(t) or real((t,)))
    x = torch.zeros(3)
    for fake in (lambda one: None, None):  # a private call that bumps nothing; none at all
        if fake is None:
            monkeypatch.delattr(torch._C, "_increment_version")
        else:
            monkeypatch.setattr(torch._C, "_increment_version", fake)
        bump = fresh_module._version_bump()
        v = x._version
        bump((x,))
        assert x._version == v + 1 and public[-1] is x


def test_the_same_seed_salts_the_same_positions():
    def run(seed):
        x = torch.arange(1000, dtype=torch.float32)
        fresh = FreshInputs([(x,)], "salt", random.Random(seed))
        for _ in range(50):
            fresh.take()
        return x

    assert torch.equal(run(7), run(7)) and not torch.equal(run(7), run(8))


def test_regenerate_rebuilds_and_a_set_without_floats_cannot_be_salted():
    calls = []
    rebuild = lambda seed: (calls.append(seed) or torch.full((4,), float(len(calls))),)  # noqa: E731
    fresh = FreshInputs([(torch.zeros(4),)], "regenerate", random.Random(0), rebuild)
    a, _ = fresh.take()
    b, _ = fresh.take()
    assert len(calls) == 2 and not torch.equal(a[0], b[0])
    assert not FreshInputs([(torch.arange(4),)], "salt", random.Random(0)).salted
    with pytest.raises(ValueError):
        FreshInputs([(torch.zeros(2),)], "sometimes", random.Random(0))


# --- the per-call timer and the parent's envelope -------------------------------------------

class Tick:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_per_call_timer_keeps_the_harness_work_out_of_the_timed_spans():
    clock = Tick()

    def before():
        clock.now += 0.5

    def after():
        clock.now += 0.25

    def fn():
        clock.now += 1.0

    t = PerCallTimer(before, after, clock)
    assert t.sample(fn, 4) == pytest.approx(1.0)
    assert t.last_untimed == pytest.approx(3.0)


def acc(envelope, wall, timed, untimed=0.0, recheck=0.0, checks=0.0):
    return BlockAccount("batch", 10, envelope, wall, timed, untimed, recheck, checks)


def test_envelope_flags_a_worker_that_loses_time_and_tolerates_wake_up_lag():
    assert not flagged(acc(0.100, 0.099, 0.090, 0.009), D)  # honest
    assert not flagged(acc(0.100, 0.090, 0.080, 0.010), D)  # 10 ms of lag on 100 ms: within 25%
    assert flagged(acc(0.100, 0.010, 0.009, 0.001), D)      # the worker's clock runs at a tenth
    assert flagged(acc(0.100, 0.099, 0.009, 0.001), D)      # its timed spans lost 90%
    honest = [acc(0.1, 0.099, 0.09, 0.009)] * 3 + [acc(0.1, 0.05, 0.045, 0.005)]
    assert envelope_findings("c", honest, D) == []
    bad = [acc(0.1, 0.099, 0.009, 0.001)] * 3 + [acc(0.1, 0.099, 0.09, 0.009)]
    (f,) = envelope_findings("c", bad, D)
    assert f.check == "timer" and f.invalidates and "3 of 4" in f.message
    assert envelope_counts(bad, D)["flagged"] == 3


def test_recheck_policy_checks_the_first_blocks_then_keeps_to_its_budget():
    pol = RecheckPolicy(DefenceSettings(min_rechecks=2, recheck_budget=0.1), random.Random(0))
    assert pol.pick("baseline", range(8)) == []
    picks = [pol.pick("candidate", range(8)) for _ in range(2)]
    assert all(len(p) == 2 and all(0 <= i < 8 for i in p) for p in picks)
    pol.spent(1.0, 0.5)
    pol.spent(1.0, 0.5)
    assert pol.pick("candidate", range(8)) == []          # 1 s of rechecks against 2 s timed: over 10%
    pol.spent(20.0, 0.0)
    assert pol.pick("candidate", range(8)) != []          # 1 s against 22 s: under


@pytest.mark.parametrize("minimum, processes, each", [(3, 1, 3), (3, 3, 1), (3, 5, 1), (4, 3, 2), (0, 3, 0)])
def test_the_minimum_of_rechecks_is_shared_by_a_cases_processes(minimum, processes, each):
    pol = RecheckPolicy(DefenceSettings(min_rechecks=minimum, recheck_budget=0.0), random.Random(0),
                        processes=processes)
    picks = [pol.pick("candidate", range(4)) for _ in range(6)]
    assert sum(bool(p) for p in picks) == each


def test_session_timer_batches_blocks_and_passes_their_findings_on():
    seen = []

    def run_blocks(reqs):
        seen.append(reqs)
        blocks = [{"seconds": 0.001 * (1 + (s == "baseline")), "timed": 0.001 * n, "untimed": 0.0, "recheck": 0.0,
                   "checks": 0.0, "wall": 0.001 * n, "method": "m",
                   "findings": [{"check": "recheck", "ok": False, "message": "x", "case": "c"}] if s == "candidate"
                   else []} for s, n, k in reqs]
        return {"blocks": blocks, "wall": sum(b["wall"] for b in blocks)}

    t = SessionTimer(run_blocks, DefenceSettings(min_rechecks=1), envelope=True)
    fns = [SimpleNamespace(side="baseline"), SimpleNamespace(side="candidate")]
    got = t.sample_batch([(fns[0], 4), (fns[1], 4)])
    # judged blocks: no call is named in the request (the pick comes after the reply)
    assert got == [0.002, 0.001] and len(seen) == 1 and seen[0] == [("baseline", 4, True), ("candidate", 4, True)]
    assert [f.check for f in t.findings] == ["recheck"] and t.method == "m"
    assert len(t.accounts) == 1
    t.sample(fns[1], 2)
    assert len(t.accounts) == 1  # single blocks (calibration) are not judged


# --- plausibility ---------------------------------------------------------------------------

def _est(speedup, cand_median=1e-3):
    return SimpleNamespace(speedup=speedup, candidate=SimpleNamespace(median=cand_median))


def _manifest(limit=None, **case):
    return SimpleNamespace(expect=SimpleNamespace(max_plausible_speedup=limit),
                           cases=[SimpleNamespace(name="c", **case)])


def test_plausibility_factor_rule_and_its_acknowledgement():
    (f,) = plausibility.plausibility(_manifest(), {"c": _est(12.0)}, None, D)
    assert f.check == "plausibility" and not f.ok and not f.invalidates and "defences.max_plausible_speedup" in f.message
    assert plausibility.plausibility(_manifest(), {"c": _est(9.0)}, None, D) == []
    assert plausibility.plausibility(_manifest(limit=50.0), {"c": _est(12.0)}, None, D) == []


def test_plausibility_on_a_busy_host_names_the_wait_not_a_cheat():
    (quiet,) = plausibility.plausibility(_manifest(), {"c": _est(54.5)}, None, D)
    (busy,) = plausibility.plausibility(_manifest(), {"c": _est(54.5)}, None, D, busy={"c"})
    assert "replayed result" in quiet.message and "host was busy" not in quiet.message
    assert "host was busy while it was timed" in busy.message and "replayed result" not in busy.message
    assert busy.message.startswith("measured 54.5x is above the plausible factor 10x")
    assert (busy.figure, busy.threshold, busy.severity) == (quiet.figure, quiet.threshold, quiet.severity)
    (other,) = plausibility.plausibility(_manifest(), {"c": _est(54.5)}, None, D, busy={"d"})
    assert other.message == quiet.message


def test_plausibility_roofline_rule_needs_declared_work_and_a_known_gpu():
    # 1 GB in 1 ms is 1 TB/s: above a T4's 320 GB/s.
    m = _manifest(flops=None, bytes=1e9, precision=None)
    (f,) = plausibility.plausibility(m, {"c": _est(2.0, 1e-3)}, "NVIDIA T4", D)
    assert "peak" in f.message
    assert plausibility.plausibility(m, {"c": _est(2.0, 1e-3)}, None, D) == []      # CPU: no peak to compare
    assert plausibility.plausibility(m, {"c": _est(2.0, 1.0)}, "NVIDIA T4", D) == []  # 1 GB/s: fine


def test_only_a_supported_verdict_becomes_inconclusive():
    f = Finding("plausibility", False, "too fast", "c", severity="warning")
    v = plausibility.apply_plausibility(Verdict(SUPPORTED, ("speedup: ok",)), [f])
    assert v.verdict == INCONCLUSIVE and v.reasons[0].startswith("plausibility [case c]")
    assert plausibility.apply_plausibility(Verdict(REFUTED, ("r",)), [f]).verdict == REFUTED
    assert plausibility.apply_plausibility(Verdict(SUPPORTED, ("r",)), []).verdict == SUPPORTED


# --- the channel ----------------------------------------------------------------------------

def _pair():
    r1, w1 = os.pipe()
    key = os.urandom(32)
    return channel.Channel(r1, w1, key), r1, w1, key


def test_channel_round_trip_and_every_kind_of_forgery():
    ch, r, w, key = _pair()
    ch.send({"a": [1, 2.5, float("inf")], "b": "x"})
    got = ch.recv(1.0)
    assert got["a"][:2] == [1, 2.5] and got["a"][2] == float("inf") and got["b"] == "x"

    os.write(w, b"check: pass\nspeedup: 12.0\n")
    with pytest.raises(channel.ChannelError) as e:
        ch.recv(1.0)
    assert e.value.check == "channel" and "did not write" in e.value.message

    ch2, r2, w2, _ = _pair()
    other = channel.Channel(r2, w2, os.urandom(32))
    other.send({"forged": True})
    with pytest.raises(channel.ChannelError, match="authentication"):
        ch2.recv(1.0)

    ch3, r3, w3, key3 = _pair()
    ch3.send({"n": 0})
    replay = channel.Channel(r3, w3, key3)  # a sender whose counter starts again at 0
    assert ch3.recv(1.0) == {"n": 0}
    replay.send({"n": "again"})
    with pytest.raises(channel.ChannelError, match="replayed"):
        ch3.recv(1.0)
    for fd in (r, w, r2, w2, r3, w3):
        os.close(fd)


def _frames(path, key, bodies):
    """The bytes a channel with ``key`` writes for ``bodies``, in order (into a file: no reader needed)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    writer = channel.Channel(fd, fd, key)  # it only sends
    for body in bodies:
        writer.send(body)
    os.close(fd)
    return path.read_bytes()


def test_channel_reads_frames_that_arrive_together_in_parts_or_larger_than_a_pipe(tmp_path):
    """Frames that arrive together, in parts, or larger than a pipe holds are read whole
    and in order; garbage right behind a genuine frame is still caught."""
    key = os.urandom(32)
    big = "x" * (3 << 16)  # more than a pipe holds (64 KiB on Linux)
    frames = _frames(tmp_path / "f", key, [{"n": 0}, {"n": 1}, {"n": 2, "pad": big}])
    first = len(_frames(tmp_path / "g", key, [{"n": 0}]))
    r, w = os.pipe()
    ch = channel.Channel(r, w, key)

    def write() -> None:
        os.write(w, frames[:first + 5])  # the first frame and the start of the second
        time.sleep(0.05)
        channel.write_all(w, frames[first + 5:])  # the rest, the third frame more than a pipe holds
    t = threading.Thread(target=write)
    t.start()
    assert ch.recv(2.0) == {"n": 0}
    assert ch.recv(2.0) == {"n": 1}
    assert ch.recv(2.0) == {"n": 2, "pad": big}
    t.join()
    bodies = [{"n": 0}, {"n": 1}, {"n": 2}, {"n": 3}]
    fourth = _frames(tmp_path / "h", key, bodies)[len(_frames(tmp_path / "i", key, bodies[:3])):]
    os.write(w, fourth + b"check: pass\nspeedup: 12.0\n")  # the fourth frame with garbage right behind it, in one write
    assert ch.recv(1.0) == {"n": 3}
    with pytest.raises(channel.ChannelError, match="did not write"):
        ch.recv(1.0)
    os.close(r)
    os.close(w)


def test_channel_reports_silence_and_a_closed_pipe_as_the_worker():
    r, w = os.pipe()
    ch = channel.Channel(r, w, os.urandom(32))
    with pytest.raises(channel.ChannelError) as e:
        ch.recv(0.05)
    assert e.value.check == "worker" and "in time" in e.value.message
    os.close(w)
    with pytest.raises(channel.ChannelError, match="closed"):
        ch.recv(1.0)
    os.close(r)


# --- the preflight's additions --------------------------------------------------------------

KERNELS = textwrap.dedent('''
    import threading, time
    import torch
    ORDER = []
    def inputs(params, gen, device):
        return (torch.randn(params["n"], generator=gen, device=device),)
    def base(x):
        if x.dtype != torch.float64:  # not the oracle's float64 reference run
            ORDER.append("b")
        return x * 2
    def good(x):
        ORDER.append("c")
        return x + x
    def lucky(x):
        return x * 2 + torch.empty_like(x) * 0.0
    def nan_bug(x):
        y = x * 2
        y[0] = float("nan")
        return y
    def defer(x):
        out = torch.empty_like(x)
        threading.Thread(target=lambda: (time.sleep(0.05), out.copy_(x * 2)), name="late").start()
        return out
    def flips(x):
        torch.set_float32_matmul_precision("medium")
        return x * 2
''')


def _preflight(tmp_path, candidate, defended=True):
    import importlib
    import sys

    (tmp_path / "kp.py").write_text(KERNELS)
    (tmp_path / "m.yaml").write_text(textwrap.dedent(f'''
        name: t
        claim: {{speedup: 1.5}}
        baseline: kp:base
        candidate: kp:{candidate}
        inputs: {{factory: "kp:inputs"}}
        cases: [{{name: c, params: {{n: 64}}}}]
    '''))
    lm = load(tmp_path / "m.yaml")
    sys.path.insert(0, str(tmp_path))
    sys.modules.pop("kp", None)
    k = importlib.import_module("kp")
    sys.path.remove(str(tmp_path))
    res = preflight_in_process(lm, k.base, getattr(k, candidate), k.inputs, run_seed=1,
                               settings=OracleSettings(trials=2), device="cpu", defended=defended)
    return res, k


def test_trials_alternate_which_side_runs_first(tmp_path):
    res, k = _preflight(tmp_path, "good")
    assert not res.invalid
    assert k.ORDER[:4] == ["b", "c", "c", "b"]
    res, k = _preflight(tmp_path, "good", defended=False)
    assert k.ORDER[:4] == ["b", "c", "b", "c"]


def test_nan_from_fresh_memory_is_uninitialised_and_a_nan_bug_is_not(tmp_path):
    res, _ = _preflight(tmp_path, "lucky")
    assert [f.check for f in res.findings if not f.ok] == ["uninitialised"]
    res, _ = _preflight(tmp_path, "nan_bug")
    checks = [f.check for f in res.findings if not f.ok]
    assert checks and "uninitialised" not in checks


def test_preflight_catches_deferred_threads_and_changed_settings(tmp_path):
    res, _ = _preflight(tmp_path, "defer")
    assert "threads" in [f.check for f in res.findings if not f.ok]
    old = torch.get_float32_matmul_precision()
    try:
        res, _ = _preflight(tmp_path, "flips")
    finally:
        torch.set_float32_matmul_precision(old)
    assert "global-state" in [f.check for f in res.findings if not f.ok]


def test_output_holding_a_harness_tensor_is_not_the_candidates_work():
    held = torch.randn(8)
    assert "harness holds" in preflight.output_defects(held[2:], (torch.randn(8),), torch.randn(8), harness=[held])
    assert preflight.output_defects(torch.randn(8), (torch.randn(8),), torch.randn(8), harness=[held]) is None


def test_hooked_device_runs_the_per_call_hook_outside_the_cuda_events():
    from expkit.timing.cuda_timer import CudaTimer
    from test_cuda_timer import US, FakeGpu

    gpu = FakeGpu()
    hooks = []

    def hook():  # the salt and the recheck's copy: GPU work queued before the flush
        hooks.append(gpu.host)
        gpu.enqueue("main", 40 * US, gpu.launch_s)

    timer = CudaTimer(device=HookedDevice(gpu, hook), clock=gpu.clock, cold=True)
    per_call = timer.sample(gpu.op(10 * US), 8)
    assert len(hooks) == gpu.flushes >= 8  # once before every call, retried holds included
    assert per_call == pytest.approx(10 * US, rel=0.3)  # the hook's 40 us are not in it


def test_a_blocks_salt_draws_grow_with_its_calls_not_with_its_input_sets():
    """The parent's clock takes the harness's work a call from the baseline: a block's salts
    must cost in proportion to its calls, or a side running fewer calls a block (an honest,
    slower candidate) carries the rest of a fixed cost into its gaps."""
    import numpy as np

    sets = [(torch.randn(4096),) for _ in range(4)]
    fresh = FreshInputs(sets, "salt", random.Random(0))
    sizes = []
    refill = fresh._refill

    def counted(j):  # every refill of a block, those made as it begins included
        draws = list(refill(j))
        sizes.append(len(draws))
        fresh._draws[j] = iter(draws)
        return fresh._draws[j]

    fresh._refill = counted
    drawn = {}
    for calls in (4, 8, 64):
        sizes.clear()
        fresh.begin_block(7)
        for _ in range(calls):
            fresh.take()
        drawn[calls] = sum(sizes)
    # four calls on four sets draw a few salts a set, not a batch of a thousand each
    assert drawn[4] <= 4 * 4 and drawn[8] <= 2 * drawn[4] + 4 * 4 and drawn[64] <= 4 * 64
    assert isinstance(fresh._gen, np.random.Generator)


def test_a_blocks_first_salt_draws_are_made_as_it_begins_and_are_those_its_takes_would_make():
    """The block's start is among its checks, which the parent's clock leaves out of the work a
    call: the first draws of every set are made there, not around the block's first calls."""
    import numpy as np

    def sets():
        g = torch.Generator().manual_seed(3)
        return [(torch.randn(256, generator=g),) for _ in range(4)]

    early = FreshInputs(sets(), "salt", random.Random(0))
    early.begin_block(7)
    drawn = []
    inner = early._gen
    early._gen = type("Counting", (), {"random": lambda self, shape: drawn.append(shape[0]) or inner.random(shape)})()
    first = [tuple(t.clone() for t in early.take()[0]) for _ in range(4)]  # one take of each set
    assert drawn == []
    later = [tuple(t.clone() for t in early.take()[0]) for _ in range(36)]  # and refills after them
    assert drawn  # the later refills are still made as the takes need them

    lazy = FreshInputs(sets(), "salt", random.Random(0))  # the same block, every draw made as a take needs it
    lazy.begin_block(7)
    lazy._gen = np.random.default_rng(7)
    lazy._draws = [iter(()) for _ in lazy.sets]
    lazy._refills = [0] * len(lazy.sets)
    expected = [tuple(t.clone() for t in lazy.take()[0]) for _ in range(40)]
    assert all(torch.equal(a, b) for got, want in zip(first + later, expected) for a, b in zip(got, want))


def test_a_replayed_take_has_the_inputs_of_the_blocks_take_whatever_the_refills():
    sets = [(torch.randn(512),) for _ in range(3)]
    fresh = FreshInputs([tuple(t.clone() for t in s) for s in sets], "salt", random.Random(0))
    fresh.begin_block(11)
    taken = [tuple(t.clone() for t in fresh.take()[0]) for _ in range(40)]  # several refills a set
    for k in (1, 2, 9, 40):
        again = FreshInputs.replay(sets, "salt", 11, k)
        assert all(torch.equal(a, b) for a, b in zip(again, taken[k - 1]))


def test_salt_draws_stay_in_bounds_and_never_copy_an_element_onto_itself():
    import numpy as np

    fresh = FreshInputs([(torch.zeros(3), torch.zeros(2))], "salt", random.Random(0))
    sizes = (2, 3, 1 << 31, (1 << 40) + 3, (1 << 52) - 1)
    fresh._targets[0] = [(None, None, None, n) for n in sizes]  # only the sizes matter to the draws

    class Edge:  # the ends of [0, 1): the smallest draw, and the largest below 1
        def __init__(self, u):
            self.u = u

        def random(self, shape):
            return np.full(shape, self.u)

    for gen in (Edge(0.0), Edge(np.nextafter(1.0, 0.0)), np.random.default_rng(0)):
        fresh._gen = gen
        for w, p, q in fresh._refill(0):
            n = sizes[w]
            assert 0 <= p < n and 0 <= q < n and p != q
