"""A side's warm-up on a real GPU leaves nothing queued for its first timed block, and the
timer's rehearsal keeps a fresh process's first-use costs out of it (run on a CUDA GPU).

Before, a warm-up ran calls until the host's clock passed its seconds: a GPU call returns as
soon as it is queued, so the host queued seconds of work that the first timed block's
synchronise waited for (8.8 s in the baseline's first block on KernelBench's problem 68).
"""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from expkit.timing.warm_up import warm_up

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
ROOT = Path(__file__).resolve().parents[2]


def _spin_call(seconds: float):
    """A call of about ``seconds`` on the GPU: torch's spin kernel, its cycles measured once."""
    torch.cuda._sleep(1000)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(1_000_000)
    end.record()
    torch.cuda.synchronize()
    cycles = int(1_000_000 * seconds / (start.elapsed_time(end) / 1e3))
    return lambda: torch.cuda._sleep(cycles)


def test_a_warm_up_of_gpu_calls_returns_with_the_device_idle_after_its_seconds_of_work():
    call = _spin_call(0.002)
    t0 = time.perf_counter()
    calls = warm_up(call, 0.05, time.perf_counter)
    took = time.perf_counter() - t0
    assert torch.cuda.current_stream().query(), "work is still queued after the warm-up"
    assert 0.05 <= took < 0.2 and calls <= 30, (took, calls)


def test_undrained_the_same_warm_up_leaves_work_queued():
    """What the drain prevents, on this GPU: the host's clock runs out first."""
    call = _spin_call(0.002)
    t0 = time.perf_counter()
    calls = warm_up(call, 0.05, time.perf_counter, drain=lambda: None)
    busy = not torch.cuda.current_stream().query()
    torch.cuda.synchronize()
    assert busy and calls > 30 and time.perf_counter() - t0 > 0.1, (calls, busy)


PROBLEM = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return a @ b


def get_inputs():
    return [torch.rand(4096, 4096), torch.rand(4096, 4096)]


def get_init_inputs():
    return []
"""


@pytest.fixture(scope="module")
def identity_run(tmp_path_factory):
    """An identity matmul at ``quick`` in three processes: its ``result.json``."""
    tmp_path = tmp_path_factory.mktemp("identity")
    (tmp_path / "problem.py").write_text(PROBLEM)
    (tmp_path / "solution.py").write_text(PROBLEM.replace("class Model(", "class ModelNew("))
    (tmp_path / "m.yaml").write_text(
        "name: identity-matmul\ndevice: cuda\nkernelbench:\n  problem: problem.py\n  solution: solution.py\n"
        "  precision: fp32\nclaim: {speedup: 1.0, tolerance: 0.05}\ncases:\n  - name: default\n"
        "expect: {forbid_baseline: false}\n")
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "expkit", "run", str(tmp_path / "m.yaml"), "measure=quick",
                           "measure.processes=3", "--out", str(out), "--quiet"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    result = json.loads((out / "result.json").read_text())
    assert result["verdict"] in ("supported", "inconclusive"), (result["reasons"], proc.stderr[-2000:])
    return result


def test_an_identity_runs_timed_blocks_cost_both_sides_alike(identity_run):
    """Identity sides do the same work a block; before the drain, the warm-up's queue made
    the baseline's blocks 1.8-7.5x the candidate's in a KernelBench audit (evidence/README.md)."""
    result = identity_run
    blocks = {side: v["requests"]["block"]["seconds"] for side, v in result["memory"]["measured"].items()}
    assert max(blocks.values()) <= 1.5 * min(blocks.values()), blocks


FIRST_BLOCK = """
import json, sys, torch
from expkit.manifest.settings import load_settings
from expkit.timing.factory import make_timer
from expkit.timing.warm_up import warm_up
a, b = torch.rand(4096, 4096, device="cuda"), torch.rand(4096, 4096, device="cuda")
call = lambda: a @ b
warm_up(call, 0.05, __import__("time").perf_counter)
timer = make_timer("cuda", load_settings(["measure=quick"]).measure, keep_recording=True)
if sys.argv[1] == "rehearsed":
    timer.rehearse(call)
timer.sample(call, 1)
print(json.dumps({"hold_s": timer.last_block.hold_s, "attempts": timer.last_block.attempts,
                  "method": timer.info.to_dict()}))
"""


def _first_block(how: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", FIRST_BLOCK, how], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_rehearsed_fresh_process_holds_its_first_timed_block_for_what_a_call_queues():
    """A fresh process's first held run pays its first-use costs (CUPTI's first records, the
    harness's kernels' first launch): 15-28 ms of queuing on an H200, and a timed block that
    paid them was retried behind a hold of three times that. After ``rehearse`` the first
    timed block's hold is sized on what one call queues (about 1 ms)."""
    plain, rehearsed = _first_block("plain"), _first_block("rehearsed")
    assert plain["hold_s"] > 0.01, plain  # the cost exists on this machine: else the test shows nothing
    assert rehearsed["hold_s"] < 0.005, (rehearsed, plain)
