"""KernelBench's published torch.compile baseline as a KernelBench-style solution.

KernelBench publishes, per problem and GPU, the time of its reference ``Model`` in
eager mode and under ``torch.compile`` (inductor backend, default mode):
``results/timing/<GPU>/baseline_time_torch.json`` and
``baseline_time_torch_compile_inductor_default.json``. Their ratio is a published
claim "torch.compile is X times faster than eager on problem P on this GPU".

expkit's ``kernelbench:`` mapping times a problem's ``Model`` against a solution's
``ModelNew``; :func:`compiled_model_new` makes that ``ModelNew`` from the problem file
itself: the same ``Model`` (built first, under the same seed, so its parameters are
the reference's), called through ``torch.compile(model)`` exactly as KernelBench's
``scripts/generate_baseline_time_modal.py`` does. The problem file is KernelBench's
own, read from the ignored checkout ``.kernelbench/`` at the repository root.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch
import torch._dynamo.config
import torch._inductor.config

# The harness toggles deterministic mode during its correctness trials, which makes
# dynamo recompile; leave room so that it never falls back to eager.
torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
# Compile in this process: a pool of compile workers would outlive the first call.
torch._inductor.config.compile_threads = 1


def _load(problem: Path):
    name = f"_kb_compile_problem_{problem.stem}"
    spec = importlib.util.spec_from_file_location(name, problem)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def compiled_model_new(problem: str, here: str, mode: str = "default") -> type:
    """A ``ModelNew`` class: the problem's ``Model`` run through ``torch.compile``.

    ``problem`` is the problem file's path relative to the file ``here``."""
    Model = _load((Path(here).parent / problem).resolve()).Model

    class ModelNew(torch.nn.Module):
        def __init__(self, *init_inputs):
            super().__init__()
            self.model = Model(*init_inputs)
            # Kept off the module tree so that the parameters are registered once.
            object.__setattr__(self, "_compiled", torch.compile(self.model, backend="inductor", mode=mode))

        def forward(self, *args):
            return self._compiled(*args)

    ModelNew.__qualname__ = ModelNew.__name__ = "ModelNew"
    return ModelNew
