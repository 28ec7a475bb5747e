"""The checks after a timed block: before its reply, or after it while the other side is timed."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
import torch

from expkit.bench import block_checks
from expkit.bench.block_checks import LateChecks, spare_core
from expkit.bench.side import CANDIDATE, SideBench
from expkit.core.findings import Finding
from expkit.manifest.settings import DefenceSettings, Settings
from expkit.manifest.spec import load

MANIFEST = Path(__file__).resolve().parents[1] / "manifests" / "examples" / "cpu" / "honest-win.yaml"


def found(name: str) -> Finding:
    return Finding("tamper", False, name, "c")


def test_checks_before_the_reply_come_back_with_it():
    late = LateChecks("candidate", after_reply=False)
    assert late.submit(lambda: [found("one")]) == [found("one")]
    assert late.take() == []


def test_checks_after_the_reply_come_back_with_the_next_one():
    late = LateChecks("candidate", after_reply=True)
    ran = []
    assert late.submit(lambda: ran.append(1) or [found("one")]) == []
    assert ran == []  # not before the reply
    late.run()
    assert ran == [1]
    assert late.submit(lambda: [found("two")]) == [found("one")]
    assert late.take() == [found("two")]  # the case's end runs what was kept, and sends it
    assert late.take() == []


def test_checks_that_raise_are_a_tamper_finding_naming_the_side():
    def broken():
        raise TypeError("enumerate() was replaced")

    for after in (False, True):
        late = LateChecks("candidate", after_reply=after)
        got = late.submit(broken) + late.take()
        assert [f.check for f in got] == ["tamper"] and not got[0].ok
        assert "candidate's checks after a timed block raised TypeError" in got[0].message


@pytest.mark.parametrize("cores, cpu_threads, device, spare", [
    ({0, 1}, 1, "cpu", True), ({0, 1}, 2, "cpu", False), ({0, 1}, None, "cpu", False),
    ({0, 1, 2, 3}, 2, "cpu", True), ({0, 1}, 1, "cuda", True), ({0}, 1, "cuda", False), ({0}, 1, "cpu", False)])
def test_a_spare_core_is_one_beyond_what_the_other_sides_block_uses(monkeypatch, cores, cpu_threads, device, spare):
    monkeypatch.setattr(block_checks.os, "sched_getaffinity", lambda pid: cores)
    assert spare_core(cpu_threads, device) is spare


def _side(fn, after_reply: bool, defended: bool = True) -> SideBench:
    lm = load(MANIFEST)
    settings = Settings(defences=DefenceSettings(enabled=defended))
    side = SideBench(lm, settings, "cpu", CANDIDATE, fn=fn,
                     factory=lambda params, gen, device: (torch.randn(32, 32, generator=gen),), local=True)
    side.late.after_reply = after_reply
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


def _tamper(reply) -> list:
    return [f for f in reply["findings"] if f["check"] == "tamper"]


def test_a_patch_found_after_the_reply_is_reported_with_the_next_block():
    fn, original = _patching_candidate()
    side = _side(fn, after_reply=True)
    try:
        first = side.block(4)
        assert _tamper(first) == []  # its checks had not run yet
        side.late.run()  # the worker runs them once the reply is sent
        second = side.block(4)
        assert len(_tamper(second)) == 1 and "gc.isenabled" in _tamper(second)[0]["message"]
        assert _tamper(side.block(4)) == []  # reported once
    finally:
        gc.isenabled = original
        side.close()


def test_the_last_blocks_late_findings_go_with_the_cases_end():
    fn, original = _patching_candidate()
    side = _side(fn, after_reply=True)
    try:
        assert _tamper(side.block(4)) == []
        side.late.run()
        got = side.finish_case()
        assert [f.check for f in got if f.check == "tamper"] == ["tamper"]
        assert "while the candidate was timed" in next(f.message for f in got if f.check == "tamper")
    finally:
        gc.isenabled = original
        side.close()


def test_before_the_reply_the_patch_is_in_the_blocks_own_reply():
    fn, original = _patching_candidate()
    side = _side(fn, after_reply=False)
    try:
        assert len(_tamper(side.block(4))) == 1
    finally:
        gc.isenabled = original
        side.close()


def test_the_undefended_harness_runs_no_block_checks():
    """``defences.enabled=false`` is the undefended harness that ``defence_overhead.py``
    compares against: no tamper, thread or child-process check after its blocks."""
    fn, original = _patching_candidate()
    side = _side(fn, after_reply=False, defended=False)
    try:
        assert side.block(4)["findings"] == [] and side.block(4)["findings"] == []
    finally:
        gc.isenabled = original
        side.close()
