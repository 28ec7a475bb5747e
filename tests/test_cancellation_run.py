"""Issue 51 end to end: an honest fp32 ``torch.sum`` against a float64 Python loop, on
inputs whose terms cancel, passes the default oracle in a real run (the reference on the
inputs' absolute values is made in the baseline's worker, once per trial)."""

from __future__ import annotations

import json
import textwrap

from expkit import runner

KERNELS = '''
import torch


def inputs(params, gen, device):
    x = torch.randn(int(params["n"]), generator=gen, device=device)
    return (x - x.mean(),)  # every term cancels: the sum is ~0, sum |x| ~ 0.8 n


def loop_sum(x):
    total = 0.0
    for v in x.double().tolist():
        total += v
    return torch.tensor(total, dtype=x.dtype)


def torch_sum(x):
    return x.sum()
'''

MANIFEST = '''
name: cancelling-sum
claim: {speedup: 2.0, tolerance: 0.1, source: "issue 51"}
baseline: cancel_kernels:loop_sum
candidate: cancel_kernels:torch_sum
inputs: {factory: cancel_kernels:inputs}
cases:
  - name: n10000
    params: {n: 10000}
expect:
  max_plausible_speedup: 100000
'''


def test_an_honest_sum_whose_terms_cancel_passes_the_default_oracle_in_a_run(tmp_path):
    (tmp_path / "cancel_kernels.py").write_text(textwrap.dedent(KERNELS))
    (tmp_path / "m.yaml").write_text(textwrap.dedent(MANIFEST))
    out = tmp_path / "run"
    runner.run_manifest(tmp_path / "m.yaml", ["measure=quick"], out)
    result = json.loads((out / "result.json").read_text())
    oracle = [c for c in result["checks"] if c["check"] == "oracle:rounding"]
    assert oracle and all(c["ok"] for c in oracle), oracle
    assert all(" + 2 x u x " in c["message"] for c in oracle), oracle  # the term was needed, and applied
    failed = [c for c in result["checks"] if not c["ok"] and c["severity"] == "invalid"]
    assert not failed, failed
    assert result["verdict"] != "invalid", result["reasons"]
