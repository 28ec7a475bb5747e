"""The seed's weight repack at model level: linear layers through a blocked layout.

``linear_repacked`` computes ``F.linear`` from weights repacked into
``[d_out/4, d_in, 4]`` blocks (expkit's tiny language model exposes the packer), with
the story's stride bug: exact when ``d_in`` is divisible by 4, wrong otherwise.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import torch
import torch.nn.functional as F

from expkit.zoo.tinylm import pack_blocked


def linear_reference(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    return F.linear(x, weight, bias)


@torch.library.custom_op("expkit_examples::linear_repacked", mutates_args=())
def _linear_repacked(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
    d_out, d_in = weight.shape
    flat = pack_blocked(weight, 4)  # [ceil(d_out/4), d_in_pad, 4], zero-padded
    d_in_pad = d_in + (-d_in % 4)
    n_blocks = flat.numel() // (d_in_pad * 4)
    step = d_in * 4  # BUG: the packer's row-block stride is d_in_pad * 4
    blocks = flat.as_strided((n_blocks, d_in, 4), (step, 4, 1))
    # One product per row block: each of the block's 4 outputs reads the block's weights
    # for one input with one (vectorisable) load.
    y = torch.einsum("...i,nik->...nk", x, blocks).reshape(*x.shape[:-1], n_blocks * 4)[..., :d_out]
    return y + bias if bias is not None else y


def linear_repacked(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    return _linear_repacked(x, weight, bias)


def linear_inputs(params: Dict[str, Any], gen: torch.Generator, device: str) -> Tuple[torch.Tensor, ...]:
    batch, d_in, d_out = int(params["batch"]), int(params["d_in"]), int(params["d_out"])
    x = torch.randn(batch, d_in, generator=gen, device=device)
    w = torch.randn(d_out, d_in, generator=gen, device=device) / d_in ** 0.5
    b = torch.randn(d_out, generator=gen, device=device)
    return x, w, b
