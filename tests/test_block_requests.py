"""A side's consecutive blocks go to its worker as one request, checked once after the last.

The measurement loop orders each round's two blocks at random, so about half the rounds
end with the side the next one starts with. Those two blocks need no round trip between
them, and nothing of the other side runs between them for the checks after the calls
to stand guard over: one request carries both, and the checks run after the second
(threads and child processes against the first block's start)."""

from __future__ import annotations

import threading
from pathlib import Path

import torch

from expkit.bench.sides import side as side_module
from expkit.bench.sides.case_sides import runs_by_side
from expkit.bench.sides.serve import Server
from expkit.bench.sides.side import CANDIDATE, SideBench
from expkit.manifest.settings import Settings
from expkit.manifest.spec import load

MANIFEST = Path(__file__).resolve().parents[1] / "manifests" / "examples" / "cpu" / "honest-win.yaml"


def test_consecutive_blocks_of_a_side_are_one_request_whichever_calls_are_checked_later():
    """No request says which call is checked (the parent picks after the reply), so no
    block has to end its request for a recheck."""
    plan = [("b", 4, True), ("c", 4, True), ("c", 8, True), ("b", 4, True), ("b", 4, False), ("b", 4, True),
            ("c", 4, True)]
    assert runs_by_side(plan) == [("b", [(4, True)]), ("c", [(4, True), (8, True)]),
                                  ("b", [(4, True), (4, False), (4, True)]), ("c", [(4, True)])]
    assert runs_by_side([]) == []


def test_where_one_output_fills_the_commitments_a_request_carries_one_block():
    """Each block's committed outputs are held until the next request: with outputs of a
    GiB, a request of two blocks held two of them beside the one being made (4.1 GiB at
    the peak of a 1 GiB elementwise case on an H200, tests/gpu/test_gpu_memory.py)."""
    plan = [("b", 4, True), ("c", 4, True), ("c", 8, True), ("c", 2, False), ("b", 4, True)]
    assert runs_by_side(plan, 1) == [("b", [(4, True)]), ("c", [(4, True)]), ("c", [(8, True)]),
                                     ("c", [(2, False)]), ("b", [(4, True)])]
    assert runs_by_side(plan, 2) == [("b", [(4, True)]), ("c", [(4, True), (8, True)]), ("c", [(2, False)]),
                                     ("b", [(4, True)])]


def _server(fn, monkeypatch, calls):
    def counted(*a, **k):
        calls.append(1)
        return real(*a, **k)

    real = side_module.after_block
    monkeypatch.setattr(side_module, "after_block", counted)
    lm = load(MANIFEST)
    side = SideBench(lm, Settings(), "cpu", CANDIDATE, fn=fn,
                     factory=lambda p, g, d: (torch.randn(16, 16, generator=g),), local=True)
    side.prepare(lm.manifest.cases[0].name, run_seed=1, salt_seed=2, input_sets=2)
    return Server(side)


def test_blocks_in_one_request_are_each_timed_and_checked_once_after_the_last(monkeypatch):
    stop = threading.Event()
    started = []

    def still_working() -> None:
        while not stop.is_set():  # its own code, on a CPU: not a pool's worker parked for work
            sum(range(1000))

    def leaves_a_thread(x):
        if not started:  # the first call starts work that outlives it
            started.append(threading.Thread(target=still_working, daemon=True))
            started[0].start()
        return x * 2

    calls: list = []
    server = _server(leaves_a_thread, monkeypatch, calls)
    try:
        got = server.handle({"op": "block", "items": [[4, None], [4, None], [4, None]]})["blocks"]
    finally:
        stop.set()
        started[0].join(5)
    assert len(got) == 3 and all(b["number"] == 4 and b["timed"] > 0 for b in got)
    assert calls == [1]  # one check, after the last block
    assert not got[0]["findings"] and not got[1]["findings"]
    # the thread the first block started is still caught, against the first block's start
    assert [f["check"] for f in got[2]["findings"]] == ["threads"]
    assert got[0]["t1"] <= got[1]["t0"] and got[1]["t1"] <= got[2]["t0"]


def test_a_lone_block_is_checked_after_its_calls(monkeypatch):
    calls: list = []
    server = _server(lambda x: x * 2, monkeypatch, calls)
    for _ in range(3):
        rep = server.handle({"op": "block", "number": 4, "recheck": None})
        assert rep["number"] == 4 and not rep["findings"]
    assert calls == [1, 1, 1]
