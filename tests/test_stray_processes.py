"""Processes the code under test leaves running do not outlive its run.

A candidate that starts a daemon (here: a child in a session of its own, and a
grandchild whose parent exits at once, so that it is reparented) would otherwise keep
a core, or on the GPU the device, busy during every run after its own. The worker is
a child subreaper, and the parent kills what is below it when it closes the worker.
"""

from __future__ import annotations

import os
import textwrap
import time
from pathlib import Path

import pytest

from expkit.checks.children import descendants
from expkit.runner import run_manifest

CODE = textwrap.dedent('''
    import os, subprocess, sys

    import torch

    SLEEPER = "import time; time.sleep(120)"

    def inputs(params, gen, device):
        return (torch.randn(int(params["n"]), generator=gen),)

    def base(x):
        return x * 2.0

    def leaves_daemons(x):
        pids = os.path.join(os.path.dirname(__file__), "pids")  # not the environment: a fork server's is older
        if not os.path.exists(pids):
            child = subprocess.Popen([sys.executable, "-c", SLEEPER], start_new_session=True)
            # a double fork: the middle process exits, the grandchild is reparented
            mid = subprocess.Popen([sys.executable, "-c",
                                    "import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', %r], "
                                    "start_new_session=True, stdout=subprocess.DEVNULL); print(p.pid)" % SLEEPER],
                                   stdout=subprocess.PIPE, text=True)
            grandchild = int(mid.communicate()[0])
            with open(pids, "w") as f:
                f.write(f"{child.pid} {grandchild}")
        return x * 2.0
''')

MANIFEST = textwrap.dedent('''
    name: stray-processes
    claim: {speedup: 1.0, tolerance: 0.5}
    baseline: stray:base
    candidate: stray:leaves_daemons
    inputs: {factory: stray:inputs}
    cases: [{name: c, params: {n: 1024}}]
''')

FAST = ("measure=quick", "measure.max_seconds=0.3", "measure.min_seconds=0.1", "measure.warmup_seconds=0.02")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


def test_descendants_walks_every_thread_to_any_depth(tmp_path: Path):
    for pid, kids in {"1": {"11": "12", "13": ""}, "12": {"12": "120"}, "120": {"120": ""}, "13": {"13": ""},
                      "11": {"11": ""}}.items():
        for tid, children in kids.items():
            d = tmp_path / pid / "task" / tid
            d.mkdir(parents=True)
            (d / "children").write_text(children)
    assert descendants(1, proc=str(tmp_path)) == [12, 120]
    assert descendants(99, proc=str(tmp_path)) == []


@pytest.mark.parametrize("start", ["auto", "forkserver"])
def test_a_candidates_daemons_do_not_outlive_its_run(tmp_path: Path, start: str):
    (tmp_path / "stray.py").write_text(CODE)
    (tmp_path / "m.yaml").write_text(MANIFEST)
    pids_file = tmp_path / "pids"
    out = run_manifest(tmp_path / "m.yaml", FAST + (f"defences.start_method={start}",), out_dir=tmp_path / "run")
    pids = [int(p) for p in pids_file.read_text().split()]
    try:
        deadline = time.monotonic() + 5
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [p for p in pids if _alive(p)], "a process the candidate started outlived the run"
        assert out.verdict == "invalid" and any(r.startswith("threads") for r in out.result["reasons"])
        killed = out.result["defences"].get("candidate_stray_processes_killed", [])
        assert set(pids) <= set(killed), killed
    finally:
        for p in pids:
            try:
                os.kill(p, 9)
            except OSError:
                pass



def test_a_replicates_pair_counts_the_first_pairs_workers_as_the_runs_own(monkeypatch):
    """The first pair stays open while each later replicate runs its own pair: on an H100 the
    replicates reported the first pair's two workers as "other processes sharing the GPU"."""
    from types import SimpleNamespace

    from expkit.bench.sides.pair import Pair
    from expkit.checks import gpu_processes

    seen = {}

    def fake(index, run_pids, since_pid, *, case=None, **_):
        seen["run"], seen["since"] = list(run_pids), since_pid
        return []

    monkeypatch.setattr(gpu_processes, "gpu_neighbours", fake)
    pair = Pair.__new__(Pair)
    pair.b, pair.c = SimpleNamespace(pid=lambda: 201), SimpleNamespace(pid=lambda: 202)
    pair.gpu, pair.siblings = {"index": 0}, [101, 102]
    assert pair.neighbours("c") == []
    assert {101, 102, 201, 202} <= set(seen["run"]) and seen["since"] == 201
