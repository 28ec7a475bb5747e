"""The ``contention`` check (checks/contention.py): a side's timing thread waiting for a CPU."""

from __future__ import annotations

import hashlib
import os
import threading
import time

import pytest

from expkit.checks.activity import ResourceAccount, busiest
from expkit.checks.contention import (CONTENTION, SHARE, ContentionAccount, RunQueueWait, contention_findings,
                                      share_findings)
from expkit.core.findings import WARNING, Finding
from expkit.verdict.rules import INCONCLUSIVE, REFUTED, SUPPORTED, Verdict, inconclusive_when


class Script:
    """A run-queue wait that grows by a set share of each block's wall time."""

    def __init__(self, share: float) -> None:
        self.share, self.waited, self.wall = share, 0, 0

    def read(self) -> int:
        return self.waited

    def block(self, acc: ContentionAccount, wall_ns: int) -> None:
        acc.begin(self.wall)
        self.wall += wall_ns
        self.waited += int(self.share * wall_ns)
        acc.end(self.wall)


def test_the_account_sums_the_wait_over_its_blocks_only():
    s = Script(0.3)
    acc = ContentionAccount(read=s.read)
    for _ in range(10):
        s.block(acc, 5_000_000)
        s.waited += 1_000_000  # between blocks: not the blocks' wait
        s.wall += 2_000_000
    assert acc.summary() == {"waited_ms": 15.0, "blocks_ms": 50.0}


def test_no_account_where_the_kernel_keeps_none():
    acc = ContentionAccount(read=lambda: None)
    acc.begin(0)
    acc.end(10_000_000)
    assert acc.summary() == {"waited_ms": 0.0, "blocks_ms": 0.0}


def test_a_side_that_waited_beyond_the_limit_over_the_run_gets_one_warning_with_its_figures():
    resources = {"c": {"baseline": {"waited_ms": 2.0, "blocks_ms": 100.0, "processes": 5},
                       "candidate": {"waited_ms": 30.0, "blocks_ms": 100.0, "processes": 5}}}
    (f,) = contention_findings(resources)
    assert f.check == CONTENTION and f.severity == WARNING and f.case == "c" and not f.invalidates
    assert f.figure == pytest.approx(0.3) and f.threshold == 0.10
    assert f.message.startswith("the candidate's timing thread waited for a CPU for 30.0 ms of its 100.0 ms of "
                                "timed blocks (30%, over 5 processes;")


@pytest.mark.parametrize("waited,blocks", [(9.0, 100.0), (9.9, 50.0), (0.0, 0.0)])
def test_a_small_share_or_a_wait_under_ten_ms_is_no_finding(waited, blocks):
    assert contention_findings({"c": {"candidate": {"waited_ms": waited, "blocks_ms": blocks}}}) == []


def test_the_resource_account_brackets_its_blocks_with_the_wait_and_sums_it_over_processes():
    s = Script(0.4)

    class Reader:  # one thread on one core: the resources check has nothing to say
        def wall_ns(self) -> int:
            return s.wall

        def process_cpu_ns(self) -> int:
            return s.wall

        def thread_cpu_ns(self):
            return {1: s.wall}

        def wait_ns(self) -> int:
            return s.waited

    acc = ResourceAccount(1, role="baseline", case="c", reader=Reader())
    for _ in range(5):
        acc.begin()
        s.wall += 20_000_000
        s.waited += 8_000_000
        assert acc.end() is None
    summary = acc.summary()
    assert summary["waited_ms"] == 40.0 and summary["blocks_ms"] == 100.0
    both = busiest(summary, {**summary, "peak_cores": 0.5})
    assert both["waited_ms"] == 80.0 and both["blocks_ms"] == 200.0 and both["processes"] == 2
    (f,) = contention_findings({"c": {"baseline": both}})
    assert "40%, over 2 processes" in f.message


@pytest.mark.skipif(not os.path.exists("/proc/thread-self/schedstat"), reason="the kernel keeps no run-queue wait")
def test_the_real_wait_grows_when_more_threads_than_cores_are_busy():
    """Hashing releases the GIL: cores + 1 such threads and this one compete for the cores."""
    read = RunQueueWait()
    stop = threading.Event()
    buf = b"x" * (1 << 20)

    def spin() -> None:
        while not stop.is_set():
            hashlib.sha256(buf).digest()

    threads = [threading.Thread(target=spin, daemon=True) for _ in range((os.cpu_count() or 1) + 1)]
    for t in threads:
        t.start()
    try:
        q0, w0 = read(), time.perf_counter_ns()
        while time.perf_counter_ns() - w0 < 300_000_000:
            hashlib.sha256(buf[:65536]).digest()
        q1, w1 = read(), time.perf_counter_ns()
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert q0 is not None and q1 is not None
    assert (q1 - q0) > 0.02 * (w1 - w0), (q1 - q0, w1 - w0)


def run_counting_every_wait(name: str, tmp_path, monkeypatch):
    """One of the adversarial suite's CPU manifests at its quick settings, with the
    contention limits at zero: every wait counts, so the host counts as busy."""
    from pathlib import Path

    from expkit.checks import contention
    from expkit.runner import run_manifest

    manifest = Path(__file__).parent / "adversarial" / "cpu" / f"{name}.yaml"
    fast = ("measure=quick", "measure.max_seconds=0.3", "measure.min_seconds=0.1", "measure.warmup_seconds=0.02",
            "measure.min_rounds=4", "measure.bootstrap=200")
    monkeypatch.setattr(contention, "LIMIT", -1.0)
    monkeypatch.setattr(contention, "MIN_WAIT_MS", -1.0)
    return run_manifest(manifest, fast, out_dir=tmp_path)


def test_a_cpu_run_records_each_sides_wait_and_reports_it_without_changing_the_verdict(tmp_path, monkeypatch):
    """With the limit at zero every side with any wait is reported: the warning reaches
    result.json and the report, and the verdict is the one the run earned."""
    out = run_counting_every_wait("honest_gemv", tmp_path, monkeypatch)
    sides = out.result["defences"]["resources"]["c"]
    assert all(sides[s]["blocks_ms"] > 0 and sides[s]["waited_ms"] >= 0 for s in ("baseline", "candidate")), sides
    got = [c for c in out.result["checks"] if c["check"] == CONTENTION]
    assert {c["message"].split("'")[0] for c in got} == {"the baseline", "the candidate"}
    assert all(c["severity"] == WARNING and c["case"] == "c" for c in got)
    assert out.verdict != "invalid" and not any(r.startswith("contention") for r in out.result["reasons"])
    assert "timing thread waited for a CPU" in (tmp_path / "report.md").read_text()
    # one thread a side: whatever the host, no larger share to take
    assert sides["candidate"]["case_threads_ran"] == 1
    assert not [c for c in out.result["checks"] if c["check"] == SHARE]


def test_a_candidate_that_hands_its_calls_to_a_pool_is_not_supported_where_the_host_counts_as_busy(
        tmp_path, monkeypatch):
    """The pooled candidate's two threads each compute a share of every call (a 64x64 product
    handed over and waited for); with the limit at zero the host counts as busy, and a speedup
    measured there could be the pool's larger share of the cores."""
    out = run_counting_every_wait("honest_own_pool", tmp_path, monkeypatch)
    assert out.result["defences"]["resources"]["c"]["candidate"]["case_threads_ran"] == 2
    (f,) = [c for c in out.result["checks"] if c["check"] == SHARE]
    assert f["severity"] == WARNING and f["case"] == "c" and f["figure"] == 2.0
    reasons = out.result["reasons"]
    # Two threads on a host that counts as busy: neither supported (share, load) nor refuted
    # (load: verdict/load.py), unless the interval straddled the bar on its own.
    assert out.verdict == "inconclusive", reasons
    assert (any(r.startswith("load [case c]: the candidate on 2 threads") for r in reasons)
            or any(r.startswith("speedup [case c]") and "straddles" in r for r in reasons)), reasons
    assert "more threads take a larger share" in (tmp_path / "report.md").read_text()


# --- more threads than allowed, timed on a busy host (share_findings) ------------------------------


def sides(cand_ran: int, cand_wait: float, base_wait: float = 0.0):
    return {"c": {"baseline": {"waited_ms": base_wait, "blocks_ms": 100.0, "case_threads_ran": 1},
                  "candidate": {"waited_ms": cand_wait, "blocks_ms": 100.0, "case_threads_ran": cand_ran}}}


@pytest.mark.parametrize("cand_wait,base_wait,busiest_side", [(30.0, 0.0, "candidate"), (5.0, 45.0, "baseline")])
def test_a_candidate_on_more_threads_timed_on_a_busy_host_gets_a_share_warning(cand_wait, base_wait, busiest_side):
    """Either side's wait says the host was busy: a candidate whose timing thread sleeps while
    its pool computes waits little itself, while the baseline's one thread waits its share."""
    (f,) = share_findings(sides(2, cand_wait, base_wait), cpu_threads=1)
    assert f.check == SHARE and f.severity == WARNING and f.case == "c" and not f.invalidates
    assert f.figure == 2.0 and f.threshold == 1.0
    assert f.message.startswith(f"the candidate ran 2 threads where measure.cpu_threads allows 1, on a host where "
                                f"the {busiest_side}'s timing thread waited for a CPU for {max(cand_wait, base_wait):.0f}%")


@pytest.mark.parametrize("ran,cand_wait,base_wait,threads", [
    (2, 3.0, 4.0, 1),    # a quiet host: the resources check sees extra cores there
    (1, 40.0, 40.0, 1),  # a busy host, one thread: its times include the wait, it took no larger share
    (2, 40.0, 40.0, 2),  # two threads where two are allowed
    (3, 40.0, 40.0, None),  # torch's own thread count: nothing is allowed or judged
    (2, 8.0, 9.5, 1),    # a share over the limit but a wait under 10 ms
])
def test_no_share_warning_without_both_more_threads_and_a_busy_host(ran, cand_wait, base_wait, threads):
    res = sides(ran, cand_wait, base_wait)
    if (cand_wait, base_wait) == (8.0, 9.5):
        for rec in res["c"].values():
            rec["blocks_ms"] = 50.0
    assert share_findings(res, cpu_threads=threads) == []


def test_a_share_warning_turns_supported_into_inconclusive_and_leaves_other_verdicts():
    (f,) = share_findings(sides(2, 30.0), cpu_threads=1)
    ok = Verdict(SUPPORTED, ("speedup [case c]: interval above the bar",))
    v = inconclusive_when(ok, [f])
    assert v.verdict == INCONCLUSIVE and v.reasons[0].startswith("share [case c]: the candidate ran 2 threads")
    assert v.reasons[1:] == ok.reasons
    assert inconclusive_when(Verdict(REFUTED, ("r",)), [f]).verdict == REFUTED
    passed = Finding(SHARE, True, "checked", "c", severity=WARNING)
    assert inconclusive_when(ok, [passed]) is ok and inconclusive_when(ok, []) is ok


def test_the_account_counts_the_threads_that_ran_over_the_whole_case():
    """Short blocks are pooled before a span is judged; the case's count sums every block, so
    a second thread that computed a little in each of many blocks is counted once, and a pool
    thread that woke for 2% of the time is not counted."""
    wall, cpu = [0], {1: 0, 2: 0, 3: 0}

    class Reader:
        def wall_ns(self) -> int:
            return wall[0]

        def process_cpu_ns(self) -> int:
            return sum(cpu.values())

        def thread_cpu_ns(self):
            return dict(cpu)

    acc = ResourceAccount(1, case="c", reader=Reader())
    for _ in range(40):
        acc.begin()
        wall[0] += 5_000_000
        cpu[1] += 4_000_000
        cpu[2] += 1_000_000  # 20% of each block
        cpu[3] += 100_000  # 2%
        assert acc.end() is None  # 1.02 cores: under the limit
    assert acc.close() is None
    use = acc.over_case()
    assert use.wall_s == pytest.approx(0.2) and use.cpu_s == pytest.approx(0.204)
    assert acc.summary()["case_threads_ran"] == 2
    merged = busiest(acc.summary(), {**acc.summary(), "case_threads_ran": 3})
    assert merged["case_threads_ran"] == 3
