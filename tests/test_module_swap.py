"""A candidate that replaces expkit's entries in ``sys.modules`` reaches nothing the bench does.

The candidate's module is imported inside its side's worker, after the bench's own modules.
Every name the bench uses from then on must already be bound: an import run later, inside a
function, would look the module up in ``sys.modules``, where the candidate has put a module of
its own. Here every ``expkit.*`` entry is swapped for a stand-in that passes each attribute
through to the real module and writes the name to a file; a whole defended run must leave that
file empty, and the run's verdict is what the honest matrix product earns. Before the bench's
imports moved to the top of its modules, the same run wrote dozens of lookups there (78 and
122 in two runs), the timer factory's `side_timer` among them: the candidate could have handed
its own side a timer (evidence/defences/module-swap.md).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from expkit.runner import run_manifest

FAST = ("measure=quick", "measure.max_seconds=0.3", "measure.min_seconds=0.1", "measure.warmup_seconds=0.02",
        "measure.min_rounds=4", "measure.bootstrap=200")

KERNELS = '''
import torch

def inputs(params, gen, device):
    return (torch.randn(int(params["n"]), int(params["n"]), generator=gen, device=device),)

def square(a):
    return (a.unsqueeze(2) * a.unsqueeze(0)).sum(1)
'''

SWAP = '''
import sys
import types

import torch

LOG = {log!r}


class StandIn(types.ModuleType):
    """Passes every attribute through to the real module, and writes down who asked."""

    def __init__(self, real):
        super().__init__(real.__name__)
        object.__setattr__(self, "_real", real)

    def __getattr__(self, name):
        with open(LOG, "a") as f:
            f.write(self.__name__ + "." + name + "\\n")
        return getattr(object.__getattribute__(self, "_real"), name)


for _name, _module in list(sys.modules.items()):
    if _name.startswith("expkit.") and isinstance(_module, types.ModuleType):
        sys.modules[_name] = StandIn(_module)


def square(a):
    return a @ a
'''


def test_a_candidate_that_swaps_expkits_modules_is_never_consulted(tmp_path, monkeypatch):
    log = tmp_path / "consulted.txt"
    (tmp_path / "swap_kernels.py").write_text(KERNELS)
    (tmp_path / "swap_candidate.py").write_text(SWAP.format(log=str(log)))
    (tmp_path / "swap.yaml").write_text(textwrap.dedent('''
        name: module-swap
        claim: {speedup: 1.0, tolerance: 0.5}
        baseline: swap_kernels:square
        candidate: swap_candidate:square
        inputs: {factory: "swap_kernels:inputs"}
        cases: [{name: c, params: {n: 96}}]
        expect: {max_plausible_speedup: 1000}
    '''))
    out = run_manifest(tmp_path / "swap.yaml", FAST, out_dir=tmp_path / "run", plots=False)
    result = json.loads((out.out_dir / "result.json").read_text())
    assert result["defences"]["isolated"], "the candidate must have run in a worker of its own"
    assert result["verdict"] == "supported", [c for c in result["checks"] if not c["ok"]]
    consulted = log.read_text().split() if log.exists() else []
    assert consulted == [], f"the bench looked up {len(consulted)} name(s) in the candidate's modules: {consulted[:8]}"
