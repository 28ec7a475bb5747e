"""The measurement's replicates: a fresh pair of workers each, the first pair's kept only
while the run still needs it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from expkit import runner
from expkit.bench.sides import endpoint
from expkit.bench.sides import pair as pair_module

EXAMPLES = Path(__file__).resolve().parents[1] / "manifests" / "examples" / "cpu"


def _quick(processes: int) -> list:
    """``quick`` in ``processes`` pairs, with half a second of timed calls a case at most (and
    the runs draw no figures): these tests follow the pairs and their workers, whatever the verdict."""
    return ["measure=quick", f"measure.processes={processes}", "measure.max_seconds=0.5"]


def _run_logged(manifest: str, tmp_path: Path, monkeypatch):
    """Run ``manifest`` at quick with three processes, logging each pair's start, when its
    workers were first asked to end and when its hello was read, and each call of its close
    (whether it had closed already)."""
    log = []
    init, close = pair_module.Pair.__init__, pair_module.Pair.close
    begin, greet = pair_module.Pair.begin_close, pair_module.Pair.greet

    def logged_begin(self):
        log.append(("begin_close", id(self)))
        return begin(self)

    def logged_greet(self):
        log.append(("greet", id(self)))
        return greet(self)

    def logged_init(self, *a, **k):
        log.append(("open", id(self)))
        init(self, *a, **k)

    def logged_close(self, out_dir=None):
        log.append(("close", id(self), self.closed))
        return close(self, out_dir)

    monkeypatch.setattr(pair_module.Pair, "__init__", logged_init)
    monkeypatch.setattr(pair_module.Pair, "close", logged_close)
    monkeypatch.setattr(pair_module.Pair, "begin_close", logged_begin)
    monkeypatch.setattr(pair_module.Pair, "greet", logged_greet)
    out = tmp_path / "run"
    runner.run_manifest(EXAMPLES / manifest, _quick(3), out, plots=False)
    return log, json.loads((out / "result.json").read_text())


def _first_pair(log):
    first = log[0][1]
    second_open = next(i for i, e in enumerate(log) if e[0] == "open" and e[1] != first)
    closes = [i for i, e in enumerate(log) if e[0] == "close" and e[1] == first]
    return second_open, closes, [log[i][2] for i in closes]


def test_without_an_end_to_end_workload_the_first_pair_goes_with_its_replicate(tmp_path, monkeypatch):
    """Its two processes (a CUDA context each on a GPU, what their allocators kept on the
    host) no longer sit beside every later replicate's pair; its evidence is kept once."""
    log, result = _run_logged("honest-win.yaml", tmp_path, monkeypatch)
    second_open, closes, already = _first_pair(log)
    first, second = log[0][1], log[second_open][1]
    # The second pair starts once the first's workers were asked to end (its start overlaps
    # their end), and is used only once they have.
    asked = log.index(("begin_close", first))
    used = max(i for i, e in enumerate(log) if e == ("greet", second))
    assert asked < second_open < closes[0] < used, log
    assert already[0] is False and all(already[1:]), log
    assert result["memory"]["measured"]["candidate"]["requests"]["hello"]["count"] == 3  # one a process
    # Three processes on a shared 2-core machine may leave the interval wide: the check is
    # that closing the first pair early breaks nothing, not the speed.
    assert result["verdict"] in ("supported", "inconclusive"), result["reasons"]


@pytest.mark.slow
def test_an_end_to_end_workload_keeps_the_first_pair_to_the_end(tmp_path, monkeypatch):
    log, result = _run_logged("micro-win-macro-loss.yaml", tmp_path, monkeypatch)
    second_open, closes, already = _first_pair(log)
    assert closes[0] > max(i for i, e in enumerate(log) if e[0] == "open"), log
    assert result["end_to_end"] is not None
    assert result["memory"]["measured"]["candidate"]["requests"]["hello"]["count"] == 3


def test_the_run_folder_keeps_the_first_pairs_output(tmp_path, monkeypatch):
    """What the code under test printed in the preflight (the first pair's workers) is the
    evidence kept, whichever pair closes last."""
    from expkit.bench.sides import endpoint

    closes = []
    close = endpoint.WorkerEndpoint.close

    def noted(self, out_dir, evidence):
        closes.append(out_dir)
        return close(self, out_dir, evidence)

    monkeypatch.setattr(endpoint.WorkerEndpoint, "close", noted)
    out = tmp_path / "run"
    runner.run_manifest(EXAMPLES / "honest-win.yaml", _quick(3), out, plots=False)
    assert closes[:2] == [out, out] and closes[2:] == [None] * 4, closes
    assert (out / "worker-stdout.txt").exists()


def test_a_pair_that_closes_next_skips_giving_back_its_cached_memory(tmp_path, monkeypatch):
    """Each side's ``finish_case`` gives the device back its cache (a collection and the
    frees: about 0.2 s a side on an H200) except for the pair's last case where the pair
    closes next; honest-win has two cases and no end-to-end workload, so every pair trims
    after its first case and not after its second."""
    from expkit.bench.sides import endpoint

    sent = []
    send = endpoint.WorkerEndpoint.send

    def logged(self, op, **kw):
        if op == "finish_case":
            sent.append((self.role, kw.get("trim")))
        return send(self, op, **kw)

    monkeypatch.setattr(endpoint.WorkerEndpoint, "send", logged)
    out = tmp_path / "run"
    runner.run_manifest(EXAMPLES / "honest-win.yaml", _quick(2), out, plots=False)
    assert sent == [("baseline", True), ("candidate", True), ("baseline", False), ("candidate", False)] * 2, sent


def test_both_workers_end_a_case_and_close_at_once(tmp_path, monkeypatch):
    """Nothing is timed while a case ends or a pair closes: each request goes to both workers
    before either answer is read (on an H200, ``finish_case`` took 0.2 s a side, one side
    after the other), and a pair's two workers are asked to end before either is waited on."""
    from expkit.bench.sides import endpoint

    log = []
    send, receive = endpoint.WorkerEndpoint.send, endpoint.WorkerEndpoint.receive
    begin, close = endpoint.WorkerEndpoint.begin_close, endpoint.WorkerEndpoint.close

    def sent(self, op, **kw):
        self.last_op = op
        log.append(("send", op, self.role))
        return send(self, op, **kw)

    def got(self):
        log.append(("receive", getattr(self, "last_op", None), self.role))
        return receive(self)

    def begun(self):
        log.append(("begin_close", None, self.role, id(self)))
        return begin(self)

    def closed(self, out_dir, evidence):
        log.append(("close", None, self.role, id(self)))
        return close(self, out_dir, evidence)

    for name, fn in (("send", sent), ("receive", got), ("begin_close", begun), ("close", closed)):
        monkeypatch.setattr(endpoint.WorkerEndpoint, name, fn)
    runner.run_manifest(EXAMPLES / "honest-win.yaml", _quick(2), tmp_path / "run", plots=False)
    ends = [i for i, e in enumerate(log) if e[:2] == ("send", "finish_case")]
    assert len(ends) == 2 * 2 * 2, log  # two cases, two replicates, two sides
    for i in ends[::2]:
        assert [e[0] for e in log[i:i + 4]] == ["send", "send", "receive", "receive"], log[i:i + 4]
    closes = [i for i, e in enumerate(log) if e[0] == "close"]
    assert len(closes) == 4, log  # two pairs of two workers, each pair's closed one after the other
    for first, second in (closes[0:2], closes[2:4]):
        # the pair's second worker was asked to end before its first is waited on
        assert ("begin_close", None, log[second][2], log[second][3]) in log[:first], log


def test_each_pair_asks_once_how_its_workers_start(tmp_path, monkeypatch):
    """Both workers of a pair start the same way, decided once (each decision reads the
    process's memory map); why ``auto`` did not fork is kept per later replicate."""
    asked, pairs = [], []
    monkeypatch.setattr(endpoint, "fork_unsafe_reason", lambda: "a test process")
    decide = pair_module.start_context
    monkeypatch.setattr(pair_module, "start_context", lambda method, device: asked.append(method)
                        or decide(method, device))
    started = endpoint.WorkerEndpoint.__init__

    def worker(self, lm, settings, device, role, ctx=None):
        pairs.append(ctx)
        started(self, lm, settings, device, role, ctx)

    monkeypatch.setattr(endpoint.WorkerEndpoint, "__init__", worker)
    result = runner.run_manifest(EXAMPLES / "honest-win.yaml", _quick(2), tmp_path / "run", plots=False).result
    # At least the first pair and the second replicate's (a spare that does not answer is
    # started again); each pair's two workers share one context, asked for once.
    assert len(pairs) >= 4 and len(pairs) % 2 == 0, pairs
    assert len(asked) == len(pairs) // 2, (asked, pairs)
    assert all(c is not None and c.get_start_method() == "forkserver" for c in pairs), pairs
    assert result["defences"]["start_method"] == "forkserver"
    assert result["defences"]["replicate_start_methods"] == ["forkserver (a test process)"]


def test_a_replicate_starts_early_only_where_the_memory_plan_leaves_room(monkeypatch):
    """On a GPU, two more workers' CUDA contexts beside the pairs still open must fit: a
    plan without figures, or with too little room, starts the next pair only when it opens."""
    from types import SimpleNamespace

    from expkit.bench.sides import replicates as rep
    from expkit.bench.sides.memory_plan import GiB, MemoryPlan

    started = []
    monkeypatch.setattr(rep, "open_pair", lambda lm, settings, device, greet=True:
                        started.append(greet) or SimpleNamespace(why_not_forked=None))
    monkeypatch.setattr(rep, "_telemetry", lambda device, gpu: None)
    settings = SimpleNamespace(measure=SimpleNamespace(processes=3), defences=SimpleNamespace(start_method="fork"))
    lm = SimpleNamespace(manifest=SimpleNamespace(end_to_end=None))
    first = SimpleNamespace(isolated=True, gpu=None)

    def spare(device, memory, r=1):
        started.clear()
        reps = rep.Replicates(lm, settings, device, first, 0, memory, None)
        reps.start_early(r)
        return started

    roomy = MemoryPlan(1, projected_bytes=10 * GiB, free_bytes=40 * GiB)
    tight = MemoryPlan(1, projected_bytes=33 * GiB, free_bytes=40 * GiB)  # 35 GiB > 85% of 40 (34)
    assert spare("cuda", roomy) == [False]
    assert spare("cuda", tight) == []
    assert spare("cuda", MemoryPlan(1)) == []  # not sized
    assert spare("cuda", None) == []
    assert spare("cpu", None) == [False]  # forked workers on the host share the parent's pages
    assert spare("cpu", None, r=3) == []  # measure.processes=3: replicates 0-2 only


def test_a_pair_that_fails_to_start_early_still_lets_the_one_before_it_close(tmp_path, monkeypatch):
    """An early start that raises loses nothing: the pair before it closes, and the next
    replicate starts its pair when it opens."""
    from expkit.bench.sides import replicates as rep

    def fails(self, r):
        raise OSError("no more processes")

    closed = []
    close = pair_module.Pair.close

    def noted(self, out_dir=None):
        closed.append(id(self))
        return close(self, out_dir)

    monkeypatch.setattr(rep.Replicates, "start_early", fails)
    monkeypatch.setattr(pair_module.Pair, "close", noted)
    out = tmp_path / "run"
    result = runner.run_manifest(EXAMPLES / "honest-win.yaml", _quick(2), out, plots=False).result
    assert result["memory"]["measured"]["candidate"]["requests"]["hello"]["count"] == 2
    assert len(set(closed)) == 2, closed
    assert result["verdict"] in ("supported", "inconclusive"), result["reasons"]


def test_a_pair_started_early_whose_workers_do_not_answer_is_started_again(tmp_path, monkeypatch):
    """A worker of an early-started pair that dies before its hello is read (on a GPU, say,
    out of memory beside the pair that was closing) costs a fresh start, not a finding."""
    import os
    import signal

    from expkit.bench.sides import replicates as rep

    start_early = rep.Replicates.start_early
    killed = []

    def start_and_kill(self, r):
        start_early(self, r)
        if self._spare is not None:
            pid = self._spare[2].c.pid()
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    monkeypatch.setattr(rep.Replicates, "start_early", start_and_kill)
    out = tmp_path / "run"
    result = runner.run_manifest(EXAMPLES / "honest-win.yaml", _quick(2), out, plots=False).result
    assert len(killed) == 1
    assert result["verdict"] in ("supported", "inconclusive"), result["reasons"]
    assert not [f for f in result["checks"] if not f["ok"] and f["severity"] == "invalid"], result["checks"]


def test_a_pair_started_early_whose_hello_raises_is_closed_and_started_again(tmp_path, monkeypatch):
    """A hello that raises in a pair started early closes that pair (its workers are not
    left to the interpreter's exit) and the replicate starts a fresh one."""
    from expkit.bench.sides import replicates as rep

    start_early, greet, close = rep.Replicates.start_early, pair_module.Pair.greet, pair_module.Pair.close
    marked, closed = [], []

    def start_and_mark(self, r):
        start_early(self, r)
        if self._spare is not None:
            self._spare[2].raise_on_greet = True
            marked.append(r)

    def raising(self):
        if getattr(self, "raise_on_greet", False):
            raise RuntimeError("a hello that could not be read")
        return greet(self)

    def noted(self, out_dir=None):
        closed.append(getattr(self, "raise_on_greet", False))
        return close(self, out_dir)

    monkeypatch.setattr(rep.Replicates, "start_early", start_and_mark)
    monkeypatch.setattr(pair_module.Pair, "greet", raising)
    monkeypatch.setattr(pair_module.Pair, "close", noted)
    out = tmp_path / "run"
    result = runner.run_manifest(EXAMPLES / "honest-win.yaml", _quick(2), out, plots=False).result
    assert marked == [1] and True in closed, (marked, closed)  # the pair whose hello raised was closed
    assert result["verdict"] in ("supported", "inconclusive"), result["reasons"]
