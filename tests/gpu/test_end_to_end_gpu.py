"""The GPU micro-win-macro-loss story on a CUDA GPU: the Triton kernel, then the whole run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
GPU = Path(__file__).resolve().parents[2] / "manifests" / "examples" / "gpu"


@pytest.fixture(scope="module")
def kernels():
    sys.path.insert(0, str(GPU))
    try:
        import decode_attention
    finally:
        sys.path.pop(0)
    return decode_attention


@pytest.mark.parametrize("b, h, d, t, n", [(1, 8, 64, 2048, 1040), (2, 3, 64, 300, 1), (4, 8, 64, 1024, 1024),
                                           (1, 2, 128, 513, 257)])
def test_triton_decode_attention_matches_sdpa(kernels, b, h, d, t, n):
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, n_t = kernels.attention_inputs({"batch": b, "heads": h, "head_dim": d, "max_len": t, "filled": n},
                                            gen, "cuda")
    torch.testing.assert_close(kernels.decode_attention(q, k, v, n_t), kernels.sdpa_static(q, k, v, n_t),
                               rtol=2e-2, atol=2e-3)
    # A query that is a strided view, as the decoder passes it.
    qp = torch.randn(b, 1, 3, h, d, device="cuda", dtype=q.dtype).permute(2, 0, 3, 1, 4)[0]
    torch.testing.assert_close(kernels.decode_attention(qp, k, v, n_t), kernels.sdpa_static(qp, k, v, n_t),
                               rtol=2e-2, atol=2e-3)


def test_gpu_example_micro_win_end_to_end_loss(tmp_path):
    from expkit.runner import run_manifest

    out = tmp_path / "run"
    outcome = run_manifest(GPU / "micro-win-macro-loss.yaml", ["measure=quick"], out)
    result = json.loads((out / "result.json").read_text())
    block = result["end_to_end"]
    assert block["skipped"] is None, (block["skipped"], result["reasons"])
    assert result["measured"]["overall"]["speedup"] > 1.0, result["measured"]
    assert block["measured"]["speedup"] < 1.0, block["measured"]
    assert block["prediction"]["speedup"]["value"] > 1.0
    base, cand = block["baseline"], block["candidate"]
    # The compiled path breaks for the candidate only.
    assert cand["compile"]["graph_breaks"] + cand["compile"]["fallbacks"] > 0, cand["compile"]
    assert base["compile"]["graph_breaks"] + base["compile"]["fallbacks"] == 0, base["compile"]
    # NVML was read on both sides, and the profile shows the GPU idling under the candidate.
    assert base["utilisation"]["mean"] is not None and cand["utilisation"]["mean"] is not None
    assert cand["profile"]["gpu_busy"] < base["profile"]["gpu_busy"], (base["profile"], cand["profile"])
    assert outcome.verdict == "refuted", result["reasons"]
    assert "## End to end" in (out / "report.md").read_text()
