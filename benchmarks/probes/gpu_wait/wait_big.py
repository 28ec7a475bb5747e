"""The fused kernel of ``wait_kernels.py``, from a module that holds 8 GiB of device memory
from its import on (``aa_fused_big.yaml``): does a worker's memory decide the wait?"""
import torch

from wait_kernels import add_relu_inputs, fused_add_relu  # noqa: F401  (the manifest's names)

_HELD = torch.empty(8 << 30, dtype=torch.uint8, device="cuda")
