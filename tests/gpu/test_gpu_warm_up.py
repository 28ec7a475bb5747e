"""A side's warm-up on a real GPU leaves nothing queued for its first timed block (run on a CUDA GPU).

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


def test_an_identity_runs_timed_blocks_cost_both_sides_alike(tmp_path):
    """Identity sides do the same work a block; before the drain, the warm-up's queue made
    the baseline's blocks 1.8-7.5x the candidate's in a KernelBench audit (evidence/README.md)."""
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
    blocks = {side: v["requests"]["block"]["seconds"] for side, v in result["memory"]["measured"].items()}
    assert max(blocks.values()) <= 1.5 * min(blocks.values()), blocks
