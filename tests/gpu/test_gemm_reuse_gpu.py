"""Issue 51 on a GPU: the reuse rule compares the kernels that ran. An honest GEMM in a
narrower dtype against its reference in a wider one (both ``aten::matmul``) is judged on
its speed; a candidate that runs the baseline's own DGEMM under another call is invalid."""

import json
from pathlib import Path

import pytest
import torch

from expkit.runner import run_manifest

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
GPU = Path(__file__).resolve().parents[2] / "manifests" / "examples" / "gpu"
KERNELS = "reuse judged by kernels"


def run(name, tmp_path):
    out = tmp_path / name
    outcome = run_manifest(GPU / f"{name}.yaml", ["measure=quick"], out)
    return outcome, json.loads((out / "result.json").read_text())


def forbidden(result):
    return [c for c in result["checks"] if c["check"] == "forbidden"]


@pytest.mark.parametrize("name", ["gemm-fp32-vs-fp64", "gemm-fp16-vs-fp32"])
def test_an_honest_narrower_gemm_through_the_same_call_is_not_reuse(name, tmp_path):
    """Judged on its speed: supported where faster (fp16 tensor cores by far; fp32 against
    fp64, whose peaks are equal on an H100, where its interval clears the 0.9x bar)."""
    outcome, result = run(name, tmp_path)
    assert outcome.verdict != "invalid", result["reasons"]
    assert all(c["ok"] for c in result["checks"] if c["severity"] == "invalid"), result["checks"]
    assert forbidden(result) and all(c["ok"] and KERNELS in c["message"] for c in forbidden(result))
    (case,) = result["measured"]["cases"].values()
    if case["ci_low"] >= case["threshold"]:
        assert outcome.verdict == "supported", result["reasons"]
    if name == "gemm-fp16-vs-fp32":
        assert outcome.verdict == "supported", result["reasons"]


def test_a_candidate_that_runs_the_baselines_kernel_is_still_invalid(tmp_path):
    outcome, result = run("gemm-reuses-baseline-kernel", tmp_path)
    assert outcome.verdict == "invalid"
    bad = [c for c in forbidden(result) if not c["ok"]]
    assert bad and "baseline kernel `" in bad[0]["message"] and KERNELS in bad[0]["message"]
