"""KernelBench inputs on a GPU: drawn on the device under the trial's seed (issue 19).

KernelBench's problems build their inputs with ``torch.rand(...)`` and no device;
``preflight.build_inputs`` runs ``get_inputs()`` with the run's device as torch's
default, so a 6 GiB input is drawn on the GPU in milliseconds instead of on one host
thread in tens of seconds."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

from expkit.checks.preflight import build_inputs  # noqa: E402
from expkit.manifest import kernelbench as kb  # noqa: E402
from expkit.manifest import load  # noqa: E402

DATA = Path(__file__).parents[1] / "data" / "kernelbench"


def _factory(tmp_path, problem_text=None):
    for f in ("4_mlp.py", "4_mlp_addmm.py"):
        shutil.copy(DATA / f, tmp_path / f)
    if problem_text is not None:
        (tmp_path / "big.py").write_text(problem_text)
        (tmp_path / "big_new.py").write_text("from big import *\n\nclass ModelNew(Model):\n    pass\n")
    pair = "{problem: big.py, solution: big_new.py}" if problem_text else "{problem: 4_mlp.py, solution: 4_mlp_addmm.py}"
    (tmp_path / "m.yaml").write_text(f"name: t\ndevice: cuda\nclaim: {{speedup: 1.0}}\ncases: [{{name: default}}]\n"
                                     f"kernelbench: {pair}\n")
    lm = load(tmp_path / "m.yaml")
    factory = kb.sides(lm)[2]
    return lambda params, seed: build_inputs(factory, params, seed, "cuda", lm)


def test_inputs_are_drawn_on_the_gpu_and_follow_the_seed(tmp_path):
    factory = _factory(tmp_path)
    a = factory({}, 1)[0]
    again = factory({}, 1)[0]
    other = factory({}, 2)[0]
    assert a.is_cuda and torch.equal(a, again) and not torch.equal(a, other)
    assert torch.get_default_device().type == "cpu"


def test_a_gigabyte_input_is_drawn_in_well_under_a_second(tmp_path):
    # 2 GiB of float32 from torch.rand with no device, as KernelBench's level-1 problems
    # write it; drawn on the host, this takes seconds on one thread.
    factory = _factory(tmp_path, "import torch\nimport torch.nn as nn\n\n"
                                 "class Model(nn.Module):\n    def forward(self, x):\n        return x\n\n"
                                 "def get_inputs():\n    return [torch.rand(16384, 32768)]\n\n"
                                 "def get_init_inputs():\n    return []\n")
    factory({}, 0)  # CUDA context and generator set up
    torch.cuda.synchronize()
    t = time.perf_counter()
    x = factory({}, 1)[0]
    torch.cuda.synchronize()
    took = time.perf_counter() - t
    assert x.is_cuda and x.numel() == 16384 * 32768
    assert took < 0.5, f"{took:.2f} s to draw 2 GiB: drawn on the host?"
