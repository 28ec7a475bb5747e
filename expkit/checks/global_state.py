"""The global-state check: process-wide settings that change numerics or speed.

TF32 and cuDNN flags, float32 matmul precision, deterministic mode, default dtype and
device, thread counts, grad mode, autocast, the scaled-dot-product backends, and the
stacks of torch function and dispatch modes (a mode pushed and never popped sees --
and can change -- every torch call after it, the harness's own included) are
snapshotted and compared (check name
``global-state``): before and after the candidate's module is imported (the bench),
around every candidate call of the preflight, and around every timed block. A
candidate that slows the baseline down (``torch.set_num_threads(1)``) or loosens
precision for both sides is caught. The preflight and the bench both apply it, so it
lives here, below both.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Dict, List, Mapping, Optional

import torch

GLOBAL_STATE = "global-state"


def _state_probes() -> Dict[str, Callable[[], Any]]:

    b = torch.backends
    return {
        "torch.get_default_dtype()": lambda: str(torch.get_default_dtype()),
        "torch.get_num_threads()": torch.get_num_threads,
        "torch.get_num_interop_threads()": torch.get_num_interop_threads,
        "torch.is_grad_enabled()": torch.is_grad_enabled,
        "torch.is_inference_mode_enabled()": torch.is_inference_mode_enabled,
        "torch.are_deterministic_algorithms_enabled()": torch.are_deterministic_algorithms_enabled,
        "torch.is_deterministic_algorithms_warn_only_enabled()": torch.is_deterministic_algorithms_warn_only_enabled,
        "torch.utils.deterministic.fill_uninitialized_memory": lambda: torch.utils.deterministic.fill_uninitialized_memory,
        "torch.get_float32_matmul_precision()": torch.get_float32_matmul_precision,
        "torch.is_anomaly_enabled()": torch.is_anomaly_enabled,
        "torch.backends.mkldnn.enabled": lambda: b.mkldnn.enabled,
        "torch.backends.cudnn.enabled": lambda: b.cudnn.enabled,
        "torch.backends.cudnn.benchmark": lambda: b.cudnn.benchmark,
        "torch.backends.cudnn.deterministic": lambda: b.cudnn.deterministic,
        "torch.backends.cudnn.allow_tf32": lambda: b.cudnn.allow_tf32,
        "torch.backends.cuda.matmul.allow_tf32": lambda: b.cuda.matmul.allow_tf32,
        "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction":
            lambda: b.cuda.matmul.allow_fp16_reduced_precision_reduction,
        "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction":
            lambda: b.cuda.matmul.allow_bf16_reduced_precision_reduction,
        "torch.backends.cuda.matmul.allow_fp16_accumulation": lambda: b.cuda.matmul.allow_fp16_accumulation,
        "torch.backends.cuda.flash_sdp_enabled()": b.cuda.flash_sdp_enabled,
        "torch.backends.cuda.mem_efficient_sdp_enabled()": b.cuda.mem_efficient_sdp_enabled,
        "torch.backends.cuda.math_sdp_enabled()": b.cuda.math_sdp_enabled,
        "torch.backends.cuda.cudnn_sdp_enabled()": b.cuda.cudnn_sdp_enabled,
        "torch.backends.mkldnn.deterministic": lambda: b.mkldnn.deterministic,
        "torch.get_default_device()": lambda: _default_device(torch),
        "torch.is_autocast_enabled('cpu')": lambda: torch.is_autocast_enabled("cpu"),
        "torch.is_autocast_enabled('cuda')": lambda: torch.is_autocast_enabled("cuda"),
        "torch.get_autocast_dtype('cpu')": lambda: str(torch.get_autocast_dtype("cpu")),
        "torch.get_autocast_dtype('cuda')": lambda: str(torch.get_autocast_dtype("cuda")),
        "torch function modes (stack depth)": torch._C._len_torch_function_stack,
        "torch dispatch modes (stack depth)": torch._C._len_torch_dispatch_stack,
    }


_PROBES: Optional[Dict[str, Callable[[], Any]]] = None
#: The same without the probes of CUDA's settings, for a CPU run's checks after each timed block.
_CPU_PROBES: Optional[Dict[str, Callable[[], Any]]] = None


def _default_device(torch: Any) -> str:
    """``torch.get_default_device()``, without its 12 us where nothing set one: it is CPU
    unless a torch function mode is pushed (a ``DeviceContext`` is one) or a global device
    context is set (``torch.set_default_device``), and the function is asked then."""
    context = getattr(torch, "_GLOBAL_DEVICE_CONTEXT", None)
    if (context is None or getattr(context, "device_context", None) is not None
            or torch._C._len_torch_function_stack()):
        return str(torch.get_default_device())
    return "cpu"


def _cuda_probe(name: str) -> bool:
    return "cuda" in name or "cudnn" in name


def snapshot_state(*, cuda: bool = True) -> Dict[str, Any]:
    """The process-wide settings that change numerics or speed, by name; ``cuda=False``
    leaves out CUDA's (TF32, cuDNN, the attention backends, CUDA autocast), which change
    nothing a CPU run computes: its checks after each timed block read 17 probes of 31, a
    median 142 us a block against 189 us on the 2-core machine
    (evidence/README.md); a case's checkpoints read all.

    A probe that raises (an attribute missing from this torch build) is recorded as
    the exception's type name, so that it compares equal to itself."""
    global _PROBES, _CPU_PROBES
    if _PROBES is None:
        _PROBES = _state_probes()
        _CPU_PROBES = {k: v for k, v in _PROBES.items() if not _cuda_probe(k)}
    probes = _PROBES if cuda else _CPU_PROBES
    assert probes is not None
    out: Dict[str, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, probe in probes.items():
            try:
                out[name] = probe()
            except Exception as e:  # a build without the attribute
                out[name] = f"<{type(e).__name__}>"
    return out


def state_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> List[str]:
    return [f"{k}: {before.get(k)!r} -> {after.get(k)!r}" for k in sorted(set(before) | set(after))
            if before.get(k) != after.get(k)]
