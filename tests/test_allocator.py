"""Both workers fix glibc's allocator thresholds before any code under test runs
(expkit/bench/processes/allocator.py): left to adapt to each process's history, they differed
between the baseline's worker, which frees large buffers while it judges, and the
candidate's, and an identity candidate measured 0.56x against itself on the CPU.
"""

from __future__ import annotations

import platform
import textwrap
from pathlib import Path

from expkit.bench.processes import allocator
from expkit.runner import run_manifest

FAST = ("measure=quick", "measure.max_seconds=0.3", "measure.min_seconds=0.1", "measure.warmup_seconds=0.02")


def test_steady_says_what_it_set():
    state = allocator.steady()
    assert allocator.STATE == state
    if platform.libc_ver()[0] == "glibc":
        assert state.startswith("glibc malloc: mmap threshold 32 MiB, trim threshold 4 GiB")
    else:
        assert "as it is" in state


def test_a_run_records_the_workers_allocator(tmp_path: Path):
    (tmp_path / "k.py").write_text(textwrap.dedent('''
        import torch
        def inputs(params, gen, device):
            return (torch.randn(int(params["n"]), generator=gen),)
        def base(x):
            return x * 2.0
        def cand(x):
            return x + x
    '''))
    (tmp_path / "m.yaml").write_text(textwrap.dedent('''
        name: allocator
        claim: {speedup: 1.0, tolerance: 0.5}
        baseline: k:base
        candidate: k:cand
        inputs: {factory: k:inputs}
        cases: [{name: c, params: {n: 4096}}]
    '''))
    out = run_manifest(tmp_path / "m.yaml", FAST, out_dir=tmp_path / "run")
    state = out.result["defences"]["allocator"]
    if platform.libc_ver()[0] == "glibc":
        assert state.startswith("glibc malloc: mmap threshold 32 MiB"), state
    else:
        assert "as it is" in state
