"""The checks after a timed block (bench/defences/block_checks.py), through a side's ``block`` request."""

from __future__ import annotations

import gc
import threading
from pathlib import Path

import torch

from expkit.bench.sides.side import CANDIDATE, SideBench
from expkit.manifest.settings import DefenceSettings, Settings
from expkit.manifest.spec import load

MANIFEST = Path(__file__).resolve().parents[1] / "manifests" / "examples" / "cpu" / "honest-win.yaml"


def _side(fn, defended: bool = True) -> SideBench:
    lm = load(MANIFEST)
    settings = Settings(defences=DefenceSettings(enabled=defended))
    side = SideBench(lm, settings, "cpu", CANDIDATE, fn=fn,
                     factory=lambda params, gen, device: (torch.randn(32, 32, generator=gen),), local=True)
    side.prepare(lm.manifest.cases[0].name, run_seed=1, salt_seed=2, input_sets=1)
    return side


def _patching_candidate():
    """A candidate whose first call replaces ``gc.isenabled`` (a function the tamper check watches)."""
    original, calls = gc.isenabled, []

    def fn(a):
        if not calls:
            gc.isenabled = lambda: True
        calls.append(1)
        return a * 2
    return fn, original


def _checks(reply, check: str) -> list:
    return [f for f in reply["findings"] if f["check"] == check]


def test_a_patch_made_during_a_block_is_in_that_blocks_reply_once():
    fn, original = _patching_candidate()
    side = _side(fn)
    try:
        got = _checks(side.block(4), "tamper")
        assert len(got) == 1 and "gc.isenabled" in got[0]["message"]
        assert "while the candidate was timed" in got[0]["message"]
        assert _checks(side.block(4), "tamper") == []  # reported once
    finally:
        gc.isenabled = original
        side.close()


def _still_working(stop: threading.Event) -> None:
    while not stop.is_set():  # the candidate's own code, on a CPU: not parked
        sum(range(1000))


def test_a_thread_left_working_by_a_block_is_in_its_reply():
    stop = threading.Event()
    threads = []

    def fn(a):
        if not threads:
            threads.append(threading.Thread(target=_still_working, args=(stop,), name="after-return", daemon=True))
            threads[0].start()
        return a * 2
    side = _side(fn)
    try:
        got = _checks(side.block(4), "threads")
        assert got and got[0]["message"].startswith("candidate: ")
    finally:
        stop.set()
        threads[0].join(5)
        side.close()


def test_a_pool_that_grows_in_the_middle_of_a_block_is_no_finding():
    """The third call starts a thread that then waits for work, as a pool started on first use
    does when its first worker is still busy: until each new thread was counted once, it
    counted for the call that left it and again for the next (evidence/defences/busy-host/pool_growth.md)."""
    stop = threading.Event()
    threads, calls = [], []

    def fn(a):
        calls.append(1)
        if len(calls) == 3:
            threads.append(threading.Thread(target=stop.wait, name="pool-worker", daemon=True))
            threads[0].start()
        return a * 2
    side = _side(fn)
    try:
        assert _checks(side.block(8), "threads") == []
        assert threads and threads[0].is_alive()
    finally:
        stop.set()
        threads[0].join(5)
        side.close()


def test_a_new_parked_thread_per_call_is_a_finding_beyond_what_a_pool_adds():
    """A candidate that hands each call's last part to a new thread, which parks once done,
    looks like a pool growing by one worker a call: past ``POOL_THREADS`` a case, each counts."""
    from expkit.bench.defences.block_checks import POOL_THREADS

    stop = threading.Event()
    threads = []

    def fn(a):
        t = threading.Thread(target=stop.wait, name="parked-after-work", daemon=True)
        t.start()
        threads.append(t)
        return a * 2
    side = _side(fn)
    try:
        first = _checks(side.block(POOL_THREADS), "threads")
        assert first == []  # within what a pool may add
        got = _checks(side.block(8), "threads")
        assert got and got[0]["message"].startswith("candidate: 8 call(s) left a new thread"), got
        assert f"beyond the {POOL_THREADS} parked threads" in got[0]["message"]
    finally:
        stop.set()
        for t in threads:
            t.join(5)
        side.close()


def test_an_honest_block_has_no_findings():
    side = _side(lambda a: a * 2)
    try:
        for _ in range(3):
            assert side.block(8)["findings"] == []
    finally:
        side.close()


def test_the_undefended_harness_runs_no_block_checks():
    """``defences.enabled=false`` is the undefended harness that ``defence_overhead.py``
    compares against: no tamper, thread or child-process check after its blocks."""
    fn, original = _patching_candidate()
    side = _side(fn, defended=False)
    try:
        assert side.block(4)["findings"] == [] and side.block(4)["findings"] == []
    finally:
        gc.isenabled = original
        side.close()


def test_a_process_the_import_started_and_left_running_is_a_finding():
    import subprocess
    import sys

    from expkit.bench.defences.block_checks import started_at_import
    from expkit.checks.activity import activity

    before = activity()
    assert started_at_import("candidate", before) == []
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(10)"])
    try:
        found = started_at_import("candidate", before)
        assert len(found) == 1 and found[0].check == "threads" and not found[0].ok and found[0].case is None
        assert f"pid {p.pid}" in found[0].message and "when its code was imported" in found[0].message
        assert found[0].severity != "warning"
    finally:
        p.kill()
        p.wait()
    assert started_at_import("candidate", before) == []  # ended and reaped: nothing to say
