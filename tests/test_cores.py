"""The shared cores of a CPU run's relay (``defences.pin_cores``, ``expkit/bench/processes/cores.py``)."""

from __future__ import annotations

import os
import textwrap
import threading
from pathlib import Path

import pytest

from expkit.bench.processes import cores
from expkit.bench.processes.cores import Relay
from expkit.runner import run_manifest

linux = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity on this platform")


def test_the_shared_cores_are_the_highest_numbered_of_those_allowed():
    assert cores.share_for(1, [0, 1]) == frozenset({1})
    assert cores.share_for(2, [0, 1, 2, 3, 7]) == frozenset({3, 7})


@pytest.mark.parametrize("threads, allowed", [(None, [0, 1]), (0, [0, 1]), (1, [0]), (2, [0, 1]), (4, [0, 1])])
def test_nothing_is_pinned_without_a_limit_or_without_more_cores_than_it(threads, allowed):
    assert cores.share_for(threads, allowed) is None


def test_pin_of_nothing_moves_nothing():
    before = cores.current()
    assert cores.pin(None) is None and cores.pin(frozenset()) is None
    assert cores.current() == before


def _in_thread(fn):
    """Run ``fn`` in a fresh thread (affinity is per thread: the test's own stays put)."""
    out = {}

    def run():
        out["value"] = fn()
    t = threading.Thread(target=run)
    t.start()
    t.join()
    return out["value"]


def _cores_and_one():
    """This thread's cores and the one a run with one thread a side shares (skip where one)."""
    allowed = cores.current()
    one = cores.share_for(1, sorted(allowed))
    if one is None:
        pytest.skip("one core: nothing to pin")
    return allowed, one


@linux
def test_pin_moves_only_the_calling_thread_and_unpin_gives_its_cores_back():
    allowed, one = _cores_and_one()

    def run():
        before = cores.pin(one)
        inside = cores.current()
        cores.unpin(before)
        return before, inside, cores.current()
    before, inside, after = _in_thread(run)
    assert before == allowed and inside == one and after == allowed
    assert cores.current() == allowed  # the test's thread never moved


@linux
def test_a_worker_waits_on_the_shared_cores_and_serves_on_its_own():
    allowed, one = _cores_and_one()

    def run():
        relay = Relay()
        seen = {}
        relay.wait()  # no case yet: nothing to pin
        seen["before a case"] = cores.current()
        relay.share(sorted(one))
        relay.wait()
        seen["waiting"] = cores.current()
        relay.work()
        seen["serving"] = cores.current()
        # A thread the side's code starts while a request is served gets the worker's cores.
        seen["its thread"] = _in_thread(cores.current)
        relay.wait()
        relay.share(None)  # the case ends: its own cores back, and no more pinning
        seen["after the case"] = cores.current()
        relay.wait()
        seen["waiting after"] = cores.current()
        return seen
    seen = _in_thread(run)
    assert seen == {"before a case": allowed, "waiting": one, "serving": allowed, "its thread": allowed,
                    "after the case": allowed, "waiting after": allowed}


CODE = textwrap.dedent('''
    import os

    import torch

    def inputs(params, gen, device):
        return (torch.randn(int(params["n"]), generator=gen),)

    def base(x):
        return x * 2.0

    def records_its_cores(x):
        # not the environment: a fork server's is older than the test
        with open(os.path.join(os.path.dirname(__file__), f"cores-{os.getpid()}"), "a") as f:
            f.write(" ".join(map(str, sorted(os.sched_getaffinity(0)))) + "\\n")
        return x + x
''')

MANIFEST = textwrap.dedent('''
    name: pinned-relay
    claim: {speedup: 1.0, tolerance: 0.5}
    baseline: pinned:base
    candidate: pinned:records_its_cores
    inputs: {factory: pinned:inputs}
    cases: [{name: c, params: {n: 1024}}]
''')

FAST = ("measure=quick", "measure.max_seconds=0.2", "measure.min_seconds=0.05", "measure.warmup_seconds=0.02",
        "measure.processes=1")


@linux
@pytest.mark.parametrize("pin", [True, False])
def test_a_pinned_run_leaves_the_sides_code_its_cores_and_the_caller_its_own(tmp_path: Path, pin: bool,
                                                                            monkeypatch):
    allowed, one = _cores_and_one()
    (tmp_path / "pinned.py").write_text(CODE)
    (tmp_path / "m.yaml").write_text(MANIFEST)
    asked = []  # the parent's own relay: pinned only while blocks are timed, and given back
    real = cores.pin
    monkeypatch.setattr(cores, "pin", lambda c: asked.append(c) or real(c))
    result = run_manifest(tmp_path / "m.yaml", [*FAST, f"defences.pin_cores={str(pin).lower()}"],
                          out_dir=tmp_path / "out").result
    monkeypatch.undo()
    assert result["verdict"] != "invalid", result["checks"]
    assert cores.current() == allowed
    assert set(asked) == ({one} if pin else {None})
    # The workers' request threads relay as batch threads only where they share the parent's
    # cores (and as the parent's where this platform refuses the policy).
    relay = ("SCHED_BATCH" if _batch_allowed() else "the parent's") if pin else None
    assert result["defences"].get("relay_policy") == relay
    records = [line.split() for f in tmp_path.glob("cores-*") for line in f.read_text().splitlines()]
    assert records and all(sorted(map(int, r)) == sorted(allowed) for r in records)


def _batch_allowed() -> bool:
    """Whether a process here may put itself on ``SCHED_BATCH`` (a container may refuse)."""
    import subprocess
    import sys

    if not hasattr(os, "SCHED_BATCH"):
        return False
    code = "import os; os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))"
    return subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0


batch = pytest.mark.skipif(not _batch_allowed(), reason="SCHED_BATCH not available or not allowed here")


@batch
def test_a_relay_makes_the_threads_a_worker_started_before_it_batch_threads_too():
    """A pool the side started in the preflight, before the relay, hands over like one it
    starts later (which inherits the policy): every thread of the worker is a batch thread."""
    import subprocess
    import sys

    code = ("import sys, threading, time; t = threading.Thread(target=time.sleep, args=(60,), daemon=True); "
            "t.start(); print(t.native_id, flush=True); time.sleep(60)")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        pool_thread = int(child.stdout.readline())
        for tid in (child.pid, pool_thread):
            os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
        assert cores.relay_quietly([child.pid]) == os.SCHED_BATCH
        assert [os.sched_getscheduler(t) for t in (child.pid, pool_thread)] == [os.SCHED_BATCH] * 2
    finally:
        child.kill()
        child.wait()


@batch
def test_a_relay_on_shared_cores_makes_the_workers_request_threads_batch_threads_or_none():
    """A woken batch thread does not preempt the parent that woke it (``relay_quietly``);
    where one worker cannot be set, none is left changed."""
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        os.sched_setscheduler(child.pid, os.SCHED_OTHER, os.sched_param(0))  # whatever this session runs as
        assert cores.relay_quietly([child.pid]) == os.SCHED_BATCH
        assert os.sched_getscheduler(child.pid) == os.SCHED_BATCH
        os.sched_setscheduler(child.pid, os.SCHED_OTHER, os.sched_param(0))
        gone = subprocess.Popen([sys.executable, "-c", "pass"])
        gone.wait()
        assert cores.relay_quietly([child.pid, gone.pid]) is None
        assert os.sched_getscheduler(child.pid) == os.SCHED_OTHER
    finally:
        child.kill()
        child.wait()
