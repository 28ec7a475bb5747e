"""What each request cost a worker (bench/sides/ledger.py), in result.json and the report (issue 19)."""

import json
import textwrap
from pathlib import Path

import pytest

from expkit.bench.sides import ledger
from expkit.report import store
from expkit.report.memory import memory_context

DATA = Path(__file__).resolve().parent / "data" / "results"
GiB = 1 << 30


def test_a_ledger_counts_times_and_keeps_the_largest_host_peak():
    book = ledger.Ledger("cpu")
    for op, grow in (("trial_call", 0), ("judge", 64 << 20), ("trial_call", 0)):
        book.start()
        held = bytearray(grow)  # touched pages raise the resident high-water mark
        for i in range(0, grow, 4096):
            held[i] = 1
        book.stop(op)
        del held
    rows = book.to_dict()
    assert rows["trial_call"]["count"] == 2 and rows["judge"]["count"] == 1
    assert rows["judge"]["peak_allocated"] is None  # no device on the host
    peaks = ledger.peaks(rows)
    assert peaks["peak_rss"]["request"] == "judge"
    assert rows["judge"]["peak_rss"] >= rows["trial_call"]["peak_rss"]


def test_a_run_of_requests_of_one_name_resets_and_reads_the_host_peak_once(monkeypatch):
    """Blocks one after another: one reset before the first, one read when a request of another
    name begins (or the ledger is read), and the run's row keeps the largest peak among them."""
    calls = {"reset": 0, "read": 0}
    rss = iter([100, 300, 200, 50]).__next__

    def reset():
        calls["reset"] += 1
        return True

    def read():
        calls["read"] += 1
        return (0, rss())

    monkeypatch.setattr(ledger, "host_peak_reset", reset)
    monkeypatch.setattr(ledger, "host_rss", read)
    book = ledger.Ledger("cpu")
    for op in ("prepare", "block", "block", "block", "recheck", "block"):
        book.start(op)
        book.stop(op)
    assert calls == {"reset": 4, "read": 3}  # before prepare, the first block, recheck, the last block
    rows = book.to_dict()
    assert calls["read"] == 4
    assert rows["prepare"]["peak_rss"] == 100 and rows["block"]["count"] == 4
    assert rows["block"]["peak_rss"] == 300 and rows["recheck"]["peak_rss"] == 200
    book.start()  # no name: a reset, as before every request
    book.stop("x")
    assert calls == {"reset": 5, "read": 4}


def test_merging_two_pairs_ledgers_adds_counts_and_seconds_and_keeps_the_larger_peak():
    a = {"block": {"count": 3, "seconds": 1.5, "peak_allocated": 10, "peak_reserved": 20, "peak_rss": None}}
    b = {"block": {"count": 2, "seconds": 0.5, "peak_allocated": 30, "peak_reserved": 5, "peak_rss": 7},
         "judge": {"count": 1, "seconds": 2.0, "peak_allocated": 1, "peak_reserved": 1, "peak_rss": 1}}
    got = ledger.merge(a, b)
    assert got["block"] == {"count": 5, "seconds": 2.0, "peak_allocated": 30, "peak_reserved": 20, "peak_rss": 7}
    assert got["judge"] == b["judge"] and a["block"]["count"] == 3  # inputs untouched
    assert ledger.peaks(got)["peak_allocated"] == {"bytes": 30, "request": "block"}


SOURCE = '''
import torch
def inputs(params, gen, device):
    return (torch.randn(params["n"], generator=gen, device=device),)
def base(x):
    return x * 2
def cand(x):
    return x + x
'''


def test_a_run_stores_each_sides_requests_over_all_its_processes(tmp_path):
    from expkit.api import run

    (tmp_path / "two.py").write_text(SOURCE)
    (tmp_path / "m.yaml").write_text(textwrap.dedent('''
        name: two
        claim: {speedup: 1.0, tolerance: 0.5}
        baseline: two:base
        candidate: two:cand
        inputs: {factory: two:inputs}
        cases: [{name: c, params: {n: 4096}}]
    '''))
    out = run(tmp_path / "m.yaml", overrides=["measure=quick"], out=tmp_path / "run", plots=False)
    assert out.verdict == "supported", out.reasons
    result = store.load_result(out.run_dir / store.RESULT)
    mem = result["memory"]
    processes = result["measured"]["cases"]["c"]["processes"]
    assert set(mem["measured"]) == {"baseline", "candidate"}
    for role, side in mem["measured"].items():
        reqs = side["requests"]
        assert reqs["hello"]["count"] == processes  # one pair of workers per process, all merged
        assert reqs["block"]["count"] >= processes and reqs["block"]["seconds"] > 0
        assert side["peaks"]["peak_rss"]["bytes"] > 0
    assert "judge" in mem["measured"]["baseline"]["requests"]
    assert "judge" not in mem["measured"]["candidate"]["requests"]  # only the baseline's worker judges
    report = (tmp_path / "run" / "report.md").read_text()
    assert "## Harness memory" in report and "| baseline |" in report


def test_a_version_3_result_loads_with_no_measured_memory(tmp_path):
    raw = json.loads((DATA / "synthetic-processes" / store.RESULT).read_text())
    raw["schema_version"] = 3
    raw["memory"] = {k: v for k, v in raw["memory"].items() if k != "measured"}
    store.write_json(tmp_path / store.RESULT, raw)
    data = store.load_result(tmp_path / store.RESULT)
    assert data["schema_version"] == 5 and data["upgraded_from"] == 3
    assert data["memory"]["measured"] is None and data["memory"]["input_sets"] == raw["memory"]["input_sets"]
    section = memory_context(data)
    assert section["rows"] == [] and not section["measured"]


def test_the_section_names_where_each_side_peaked_on_a_gpu():
    side = {"peaks": {"peak_allocated": {"bytes": 12 * GiB, "request": "judge"},
                      "peak_reserved": {"bytes": 30 * GiB, "request": "profile"}},
            "requests": {"judge": {"count": 2, "seconds": 3.0}, "profile": {"count": 1, "seconds": 1.0}}}
    result = {"memory": {"input_sets": 1, "plain_peak_bytes": 12 * GiB, "projected_bytes": 24 * GiB,
                         "budget_bytes": 25 * GiB, "free_bytes": 79 * GiB, "reference": "host",
                         "hold_previous": False, "keep_pristine": False, "clone_for_baseline": False,
                         "notes": ["one input set"], "measured": {"baseline": side}}}
    got = memory_context(result)
    row = got["rows"][0]
    assert row["allocated"] == "12.00 GiB (`judge`)" and row["reserved"] == "30.00 GiB (`profile`)"
    assert row["rss"] == "n/a" and row["longest"].startswith("`judge` 3")
    assert "on the host" in got["plan"] and "no extra copies" in got["plan"]


@pytest.mark.parametrize("memory", [None, {}])
def test_no_memory_figures_no_section(memory):
    assert memory_context({"memory": memory}) is None


def test_laps_time_each_step_in_turn():
    lap = ledger.Laps()
    lap("a")
    sum(range(200_000))
    lap("b")
    assert list(lap.seconds) == ["a", "b"] and all(v >= 0 for v in lap.seconds.values())


def test_each_workers_start_up_steps_are_in_the_evidence(tmp_path):
    """The run's ``start`` stage, by step in each worker (took 9.7 s in the median
    KernelBench run on the H100, 0.07 s on CPU)."""
    from expkit.api import run

    (tmp_path / "two.py").write_text(SOURCE)
    (tmp_path / "m.yaml").write_text(textwrap.dedent('''
        name: two
        claim: {speedup: 1.0, tolerance: 0.5}
        baseline: two:base
        candidate: two:cand
        inputs: {factory: two:inputs}
        cases: [{name: c, params: {n: 4096}}]
    '''))
    # Half a second of timed calls at most: the start-up steps are the test, not the verdict.
    out = run(tmp_path / "m.yaml", overrides=["measure=quick", "measure.max_seconds=0.5"], out=tmp_path / "run",
              plots=False)
    startup = store.load_result(out.run_dir / store.RESULT)["defences"]["startup"]
    for role in ("baseline", "candidate"):
        assert list(startup[role]) == ["harness imports", "snapshots", "code under test", "tamper check"]


def test_a_failing_peak_reading_never_fails_the_request(monkeypatch):
    """The ledger runs around every request, also one whose CUDA context broke: its own
    reading failing must leave the request's reply (or exception) as it was."""
    class Broken:
        def reset_peak_memory_stats(self):
            raise RuntimeError("CUDA error: an illegal memory access was encountered")

        memory_stats_as_nested_dict = reset_peak_memory_stats

    book = ledger.Ledger("cuda")
    monkeypatch.setattr(book, "_cuda", lambda: Broken())
    book.start()
    book.stop("block")
    row = book.to_dict()["block"]
    assert row["count"] == 1 and row["peak_allocated"] is None and row["peak_rss"] is not None


def test_the_ledger_keeps_what_each_request_found_already_allocated(monkeypatch):
    """``held_allocated``: the bytes of tensors alive when a request began (what earlier
    requests left behind), the largest over the request's calls; absent from a ledger
    written before the field existed, and merged as the larger."""
    class Fake:
        """torch.cuda's nested statistics, as ``memory_stats_as_nested_dict`` returns them."""
        allocated = 0

        def memory_stats_as_nested_dict(self):
            return {"allocated_bytes": {"all": {"current": self.allocated, "peak": self.allocated + 5}},
                    "reserved_bytes": {"all": {"current": 0, "peak": self.allocated + 5}}}

        def reset_peak_memory_stats(self):
            pass

    fake = Fake()
    book = ledger.Ledger("cuda")
    monkeypatch.setattr(book, "_cuda", lambda: fake)
    for held in (100, 700, 300):
        fake.allocated = held
        book.start()
        book.stop("prepare")
    row = book.to_dict()["prepare"]
    assert row["held_allocated"] == 700 and row["peak_allocated"] == 705
    old = {"prepare": {"count": 1, "seconds": 0.1, "peak_allocated": 9, "peak_reserved": 9, "peak_rss": 1}}
    assert ledger.merge(old, old)["prepare"].get("held_allocated") is None
    assert "held_allocated" not in ledger.merge(old, old)["prepare"]
    assert ledger.merge(old, book.to_dict())["prepare"]["held_allocated"] == 700


def test_a_statistic_the_allocator_does_not_keep_is_unknown_not_zero(monkeypatch):
    """An allocator without statistics (torch returns an empty dict, as for a pluggable
    allocator) leaves the device peaks unknown; the request is still counted."""
    class Bare:
        def memory_stats_as_nested_dict(self):
            return {}

        def reset_peak_memory_stats(self):
            pass

    book = ledger.Ledger("cuda")
    monkeypatch.setattr(book, "_cuda", lambda: Bare())
    book.start()
    book.stop("block")
    row = book.to_dict()["block"]
    assert row["count"] == 1
    assert row["held_allocated"] is None and row["peak_allocated"] is None and row["peak_reserved"] is None


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="Linux's /proc only")
def test_a_forked_child_reads_its_own_resident_set_not_its_parents():
    import os

    from expkit.bench.sides.memory_plan import host_peak_reset, host_rss

    host_rss()  # the parent's descriptor is open before the fork
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child grows by 256 MiB and reports its own peak
        os.close(r)
        held = bytearray(256 << 20)
        for i in range(0, len(held), 4096):
            held[i] = 1
        os.write(w, str(host_rss()[1]).encode())
        os._exit(0)
    os.close(w)
    child_peak = int(os.read(r, 64))
    os.close(r)
    os.waitpid(pid, 0)
    host_peak_reset()
    assert child_peak >= (256 << 20)
    assert host_rss()[1] < child_peak  # the parent's own figure, not the child's


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="Linux's /proc only")
def test_a_descriptor_reused_by_code_under_test_is_never_written_to(tmp_path):
    import os

    from expkit.bench.sides import memory_plan

    assert memory_plan.host_peak_reset()
    fd = memory_plan.CLEAR_REFS.fd()
    victim = tmp_path / "candidate.txt"
    other = os.open(victim, os.O_WRONLY | os.O_CREAT)
    os.dup2(other, fd)  # the candidate closed our descriptor and its own file took the number
    os.close(other)
    assert memory_plan.host_peak_reset()  # reopened: still resets the peak
    assert memory_plan.CLEAR_REFS.fd() != fd
    assert victim.read_bytes() == b""  # and wrote nothing into the candidate's file
    os.close(fd)
    assert memory_plan.host_rss()[0] is not None


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="Linux's /proc only")
def test_a_forked_worker_closes_its_parents_kept_proc_files_before_the_code_under_test_runs():
    """The parent's ``clear_refs`` descriptor, inherited by a fork, is writable: a worker
    closes it (with the status file) where it closes ``multiprocessing``'s descriptors,
    before importing its side's code, and opens its own when its ledger reads."""
    import os

    from expkit.bench.sides import memory_plan, worker

    memory_plan.host_peak_reset(), memory_plan.host_rss()
    inherited = [f.fd() for f in memory_plan.PROC_FILES]
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        worker._release_inherited()  # noqa: SLF001 -- the step worker_main takes first
        closed = []
        for fd in inherited:
            try:
                os.fstat(fd)
                closed.append(False)
            except OSError:
                closed.append(True)
        ok = memory_plan.host_peak_reset() and memory_plan.host_rss()[0] is not None
        os.write(w, f"{all(closed)} {ok}".encode())
        os._exit(0)
    os.close(w)
    got = os.read(r, 64).decode()
    os.close(r)
    os.waitpid(pid, 0)
    assert got == "True True", got
    assert [f.fd() for f in memory_plan.PROC_FILES] == inherited  # the parent's own stay open


def _side(peak, request, held):
    return {"peaks": {"peak_allocated": {"bytes": peak, "request": request}},
            "requests": {request: {"count": 27, "seconds": 3.5, "held_allocated": held}}}


def _plan(budget, **measured):
    return {"memory": {"input_sets": 4, "plain_peak_bytes": 134234112, "projected_bytes": 939671552,
                       "budget_bytes": budget, "reference": "device", "hold_previous": True,
                       "keep_pristine": True, "clone_for_baseline": True, "notes": [], "measured": measured}}


def test_a_side_over_the_budget_is_told_what_was_held_and_what_the_request_added():
    """KernelBench's 12_Matmul_with_diagonal_matrices on an H200: the candidate's timed blocks
    peaked 0.18 GiB above the plan's budget with 1.37 GiB held when the block began."""
    got = memory_context(_plan(1342210048, candidate=_side(1535301120, "block", 1471000000),
                               baseline=_side(998244352, "block", 397000000)))
    assert len(got["over"]) == 1, got["over"]
    line = got["over"][0]
    assert line.startswith("The candidate's worker went over the budget: 1.43 GiB of tensors in `block`, 0.18 GiB "
                           "above 1.25 GiB: 1.37 GiB was held when the request began")
    assert "committed for the recheck's pick" in line and line.endswith("0.06 GiB was the request's own.")


def test_a_side_within_the_budget_or_with_no_device_figures_adds_no_line():
    assert memory_context(_plan(2 * GiB, candidate=_side(1535301120, "block", 1471000000)))["over"] == []
    cpu = {"peaks": {"peak_rss": {"bytes": 5 * GiB, "request": "block"}}, "requests": {}}
    assert memory_context(_plan(GiB, candidate=cpu))["over"] == []


def test_an_over_budget_request_other_than_a_block_names_what_came_before_it():
    got = memory_context(_plan(GiB, baseline=_side(3 * GiB, "judge", GiB)))["over"]
    assert got == ["The baseline's worker went over the budget: 3.00 GiB of tensors in `judge`, 2.00 GiB above "
                   "1.00 GiB: 1.00 GiB was held when the request began (what the requests before it left alive), "
                   "2.00 GiB was the request's own (the checks' tensors, the float64 reference among them)."]


def test_the_words_for_a_blocks_held_bytes_match_the_commitments_limit():
    from expkit.bench.defences.commit import COMMIT_BYTES
    from expkit.report.memory import BLOCK_HELD

    assert f"{COMMIT_BYTES / GiB:.2f} GiB" in BLOCK_HELD
