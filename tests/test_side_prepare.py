"""A side's ``prepare``: its input sets built on its share of the host cores.

The parent asks both workers to prepare at once (``share=2``); each then builds on half
the host cores. With every core each, two OpenMP pools shared the cores and waited on
each other (evidence/harness-cost/worker-start/README.md)."""

from __future__ import annotations

from pathlib import Path

import torch

from expkit.bench.sides import side as side_module
from expkit.bench.sides.side import CANDIDATE, SideBench
from expkit.manifest.settings import Settings
from expkit.manifest.spec import load

MANIFEST = Path(__file__).resolve().parents[1] / "manifests" / "examples" / "cpu" / "honest-win.yaml"


def test_prepare_builds_each_input_set_on_its_share_of_the_cores(monkeypatch):
    monkeypatch.setattr(side_module.os, "cpu_count", lambda: 8)
    seen = []

    def factory(params, gen, device):
        seen.append(torch.get_num_threads())
        return (torch.randn(8, 8, generator=gen),)

    lm = load(MANIFEST)
    side = SideBench(lm, Settings(), "cpu", CANDIDATE, fn=lambda a: a * 2, factory=factory, local=True)
    before = torch.get_num_threads()
    side.prepare(lm.manifest.cases[0].name, run_seed=1, salt_seed=2, input_sets=3, share=2)
    side.prepare(lm.manifest.cases[0].name, run_seed=1, salt_seed=2, input_sets=2)
    assert seen == [4, 4, 4, 8, 8] and torch.get_num_threads() == before
