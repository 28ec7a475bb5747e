"""Oracles on CUDA outputs whose float64 reference lives on the host.

The baseline's float64 run falls back to the CPU where the GPU has no float64 kernel
(fp8 matmuls, flash attention) or no room; the oracles then compare a CUDA output with
a host reference. Found by the fp8 and torchao audits on an H100 (exit 6, "Expected all
tensors to be on the same device")."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

from expkit.checks import oracles  # noqa: E402
from expkit.manifest.spec import Oracle  # noqa: E402


@pytest.mark.parametrize("kind", ["relative_error", "rounding"])
def test_a_host_reference_judges_a_cuda_output(kind):
    g = torch.Generator().manual_seed(0)
    ref = torch.randn(3_000_000, dtype=torch.float64, generator=g)  # over one device chunk
    base = ref.to("cuda", torch.bfloat16)
    spec = Oracle(kind=kind, max_error=1e-2) if kind == "relative_error" else Oracle(kind=kind)
    good = oracles.check_outputs(spec, base, base.clone(), case="c", reference64=lambda: ref)
    bad = oracles.check_outputs(spec, base, base * 1.5, case="c", reference64=lambda: ref)
    assert good.ok, good.message
    assert not bad.ok, bad.message
