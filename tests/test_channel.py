"""With isolation on (the default), a candidate that kills its worker is invalid with the cause."""

import json
import os
import signal
from pathlib import Path

from expkit.bench.processes.shm_files import PREFIX, SHM_DIR
from expkit.runner import run_manifest

SUITE = Path(__file__).resolve().parent / "data" / "suite"


def test_segfault_in_the_isolated_worker_names_the_signal(tmp_path):
    outcome = run_manifest(SUITE / "crash.yaml", ["measure=quick"], tmp_path / "o")
    assert outcome.verdict == "invalid"
    assert any(r.startswith("worker:") and "SIGSEGV" in r for r in outcome.result["reasons"]), \
        outcome.result["reasons"]
    # The crashed worker could not remove its shared files (its placed inputs); the parent did.
    sides = json.loads((tmp_path / "o" / "result.json").read_text())["defences"]
    assert sides["candidate_exitcode"] == -signal.SIGSEGV
    pids = (sides["worker_pid"], sides["baseline_pid"])
    assert not [f for f in os.listdir(SHM_DIR) if f.startswith(tuple(f"{PREFIX}{p}-" for p in pids))]


def test_cuda_error_text_reaches_the_reason(tmp_path):
    outcome = run_manifest(SUITE / "cuda-abort.yaml", ["measure=quick"], tmp_path / "o")
    assert outcome.verdict == "invalid"
    assert any("illegal memory access" in r for r in outcome.result["reasons"]), outcome.result["reasons"]
