"""With isolation on (the default), a candidate that kills its worker is invalid with the cause."""

from pathlib import Path

from expkit.runner import run_manifest

SUITE = Path(__file__).resolve().parent / "data" / "suite"


def test_segfault_in_the_isolated_worker_names_the_signal(tmp_path):
    outcome = run_manifest(SUITE / "crash.yaml", ["measure=quick"], tmp_path / "o")
    assert outcome.verdict == "invalid"
    assert any(r.startswith("worker:") and "SIGSEGV" in r for r in outcome.result["reasons"]), \
        outcome.result["reasons"]


def test_cuda_error_text_reaches_the_reason(tmp_path):
    outcome = run_manifest(SUITE / "cuda-abort.yaml", ["measure=quick"], tmp_path / "o")
    assert outcome.verdict == "invalid"
    assert any("illegal memory access" in r for r in outcome.result["reasons"]), outcome.result["reasons"]
