"""The GPU example manifests give their verdicts for the right reasons (run on a CUDA GPU)."""

import json
from pathlib import Path

import pytest
import torch

from expkit.runner import run_manifest

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
GPU = Path(__file__).resolve().parents[2] / "manifests" / "examples" / "gpu"


def run(name, tmp_path):
    out = tmp_path / name
    outcome = run_manifest(GPU / f"{name}.yaml", ["measure=quick"], out)
    return outcome, json.loads((out / "result.json").read_text())


def test_wrong_kernel_names_expected_and_actual_launch(tmp_path):
    outcome, result = run("wrong-kernel", tmp_path)
    assert outcome.verdict == "invalid" and outcome.exit_code == 3
    reasons = " ".join(result["reasons"])
    assert "softmax_vectorized*" in reasons and "[384,1,1]" in reasons
    assert "softmax_basic_k128" in reasons and "[128,1,1]" in reasons


def test_target_limits_names_both_numbers(tmp_path):
    outcome, result = run("target-limits", tmp_path)
    assert outcome.verdict == "invalid"
    target = [r for r in result["reasons"] if r.startswith("target")]
    assert target and "49152 B" in target[0] and "101376 B" in target[0]


def test_honest_kernel_passes_every_expectation_and_uses_the_gpu_timer(tmp_path):
    outcome, result = run("honest", tmp_path)
    assert outcome.verdict == "supported", result["reasons"]
    assert all(c["ok"] for c in result["checks"] if c["severity"] == "invalid")
    assert "cuda" in result["timing"]["method"].lower()
    assert result["environment"]["gpu"]
