"""The GPU example's two functions (``manifests/examples/gpu/triton_kernels.py``), loaded from
that file, for the A/A probes of this folder (see ``aa_fused.yaml``)."""
import importlib.util
from pathlib import Path

_PATH = Path(__file__).resolve().parents[3] / "manifests" / "examples" / "gpu" / "triton_kernels.py"
_spec = importlib.util.spec_from_file_location("triton_kernels", _PATH)
assert _spec is not None and _spec.loader is not None
_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_mod)

fused_add_relu = _mod.fused_add_relu    # one Triton kernel a call
eager_add_relu = _mod.eager_add_relu    # two kernels a call: the add, then the relu
add_relu_inputs = _mod.add_relu_inputs
