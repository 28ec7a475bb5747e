"""The baseline's threads kept on the worker's cores (``expkit/bench/defences/affinity_guard.py``)."""

from __future__ import annotations

import os
import threading

import pytest

from expkit.bench.defences.affinity_guard import AffinityGuard
from expkit.bench.processes.cores import current

CORES = current()
pytestmark = pytest.mark.skipif(not CORES or len(CORES) < 2, reason="needs a Linux machine with two cores or more")


def test_it_acts_only_for_two_threads_or_more_and_where_no_binding_was_asked_for(monkeypatch):
    assert AffinityGuard(2, CORES).on and AffinityGuard(None, CORES).on
    assert not AffinityGuard(1, CORES).on and not AffinityGuard(2, None).on
    monkeypatch.setenv("OMP_PROC_BIND", "true")
    assert not AffinityGuard(2, CORES).on


def test_a_thread_narrowed_from_outside_is_named_and_given_its_cores_back():
    guard = AffinityGuard(2, CORES)
    ready, done = threading.Event(), threading.Event()
    tid = []

    def worker() -> None:
        tid.append(threading.get_native_id())
        ready.set()
        done.wait(10)

    t = threading.Thread(target=worker)
    t.start()
    ready.wait(10)
    try:
        assert guard.narrowed() == []
        one = frozenset({min(CORES)})
        os.sched_setaffinity(tid[0], one)  # what another process of this user can do
        assert guard.narrowed() == [(tid[0], one)]
        guard.restore()
        assert guard.narrowed() == [] and frozenset(os.sched_getaffinity(tid[0])) == CORES
    finally:
        done.set()
        t.join()
        os.sched_setaffinity(0, CORES)
