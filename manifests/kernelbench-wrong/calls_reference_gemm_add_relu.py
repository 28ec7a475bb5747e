"""Wrong solution for KernelBench level2/76_Gemm_Add_ReLU: ModelNew calls the reference Model.

The "custom kernel" builds KernelBench's own ``Model`` from the problem file and
forwards to it: the numbers are right (same seed, same parameters), the speed claim is
about nothing. The problem file is looked up beside this file first (where
benchmarks/kernelbench_sweep.py --wrong copies both), then in the repository's
git-ignored ``.kernelbench/`` folder. Our own code; KernelBench's is loaded, not copied.
"""

import importlib.util
import sys
from pathlib import Path

import torch.nn as nn

PROBLEM = "76_Gemm_Add_ReLU.py"


def _reference_module():
    here = Path(__file__).resolve().parent
    for path in (here / PROBLEM, here.parents[1] / ".kernelbench" / "KernelBench" / "level2" / PROBLEM):
        if path.is_file():
            name = f"_kb_reference_{path.stem}"
            if name not in sys.modules:
                spec = importlib.util.spec_from_file_location(name, path)
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
                sys.modules[name] = module
            return sys.modules[name]
    raise FileNotFoundError(f"{PROBLEM}: not beside {here} nor under .kernelbench/KernelBench/level2")


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias_shape):
        super().__init__()
        self.inner = _reference_module().Model(in_features, out_features, bias_shape)  # BUG: the reference itself

    def forward(self, x):
        return self.inner(x)
