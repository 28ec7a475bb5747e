"""A small decoder with a static KV cache, compiled with torch.compile: the workload of
the GPU micro-win-macro-loss story.

Plain torch, random weights (the story is about time; the oracles compare the two
sides with each other). Each layer: RMS norm, one QKV projection, the new key and
value written into a static cache at the current position (``index_copy_``), the
attention op under test, the output projection, a GELU MLP. The position lives on the
device (``pos``, a one-element int64 tensor), so every decode step has the same shapes
and no step reads a value back to the host: the conditions under which
``torch.compile(mode="reduce-overhead")`` can run a whole step as one CUDA graph.

Decoding is teacher-forced: the tokens fed are fixed, so both sides see the same
inputs at every step and their logits can be compared; the loop's mechanics -- one
token per step through the cache, a compiled step per token -- are those of
generation. ``run()`` returns the logits of every step.

The baseline op (SDPA over the masked static cache) is traced into the compiled
graph. The candidate (``decode_attention.decode_attention``) is opaque to the
compiler, so each layer's call is a graph break: the step is cut into pieces with
Python between them, and what was one CUDA-graph replay per token becomes many
launches from the host.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from typing import Any, Callable, Dict, Optional

import torch
import torch.nn.functional as F

from expkit import Workload

Tensor = torch.Tensor


def _rms(x: Tensor) -> Tensor:
    return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype)


class Decoder(torch.nn.Module):
    def __init__(self, attn: Callable[..., Tensor], *, layers: int, heads: int, head_dim: int, vocab: int,
                 max_len: int, batch: int, dtype: torch.dtype, device: str, gen: torch.Generator) -> None:
        super().__init__()
        self.attn, self.layers, self.heads, self.head_dim, self.batch = attn, layers, heads, head_dim, batch
        dm = heads * head_dim
        self.dm = dm

        def weight(*shape: int) -> torch.nn.Parameter:
            w = torch.randn(*shape, generator=gen, device=device) / math.sqrt(shape[-1])
            return torch.nn.Parameter(w.to(dtype), requires_grad=False)

        self.emb = weight(vocab, dm)
        self.wqkv = torch.nn.ParameterList(weight(3 * dm, dm) for _ in range(layers))
        self.wo = torch.nn.ParameterList(weight(dm, dm) for _ in range(layers))
        self.wup = torch.nn.ParameterList(weight(4 * dm, dm) for _ in range(layers))
        self.wdown = torch.nn.ParameterList(weight(dm, 4 * dm) for _ in range(layers))
        self.head = weight(vocab, dm)
        self.k_cache, self.v_cache = [], []
        for i in range(layers):
            for name, store in (("k", self.k_cache), ("v", self.v_cache)):
                buf = torch.zeros(batch, heads, max_len, head_dim, device=device, dtype=dtype)
                self.register_buffer(f"{name}_cache_{i}", buf)
                store.append(buf)

    def forward(self, tok: Tensor, pos: Tensor) -> Tensor:
        b, h, d, dm = self.batch, self.heads, self.head_dim, self.dm
        x = F.embedding(tok, self.emb)  # [B, 1, dm]
        for i in range(self.layers):
            q, k, v = F.linear(_rms(x), self.wqkv[i]).view(b, 1, 3, h, d).permute(2, 0, 3, 1, 4)
            self.k_cache[i].index_copy_(2, pos, k)
            self.v_cache[i].index_copy_(2, pos, v)
            a = self.attn(q, self.k_cache[i], self.v_cache[i], pos + 1)
            x = x + F.linear(a.transpose(1, 2).reshape(b, 1, dm), self.wo[i])
            x = x + F.linear(F.gelu(F.linear(_rms(x), self.wup[i])), self.wdown[i])
        return F.linear(_rms(x), self.head)[:, 0].float()


def decoder(op: Callable[..., Tensor], side: str, params: Dict[str, Any], gen: torch.Generator,
            device: str) -> Workload:
    """The workload builder the manifest names: :func:`build`, from this side's own copy of this code.

    Dynamo keeps compiled code, and its decision to give up on a frame, per Python code
    object. Built from one copy, the two sides would share ``Decoder.forward``: the
    candidate's graph break inside the layer loop makes Dynamo give up on that frame,
    and the baseline would run eagerly from then on (expkit's isolation check says so
    and stops). Each side therefore gets this module loaded afresh under its own name.
    """
    return _own_copy(side).build(op, params, gen, device)


def _own_copy(side: str) -> Any:
    name = f"{__name__}__{side}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, __file__)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def build(op: Callable[..., Tensor], params: Dict[str, Any], gen: torch.Generator, device: str) -> Workload:
    """Build the decoder around ``op`` and return the compiled decode loop as a :class:`Workload`.

    ``params``: ``layers``, ``heads``, ``head_dim``, ``vocab``, ``max_len``, ``batch``,
    ``prompt_len`` (slots filled before decoding starts, with random keys and values as
    a prefill would have left them), ``new_tokens`` (steps per run), ``dtype``
    (default ``bfloat16``), ``compile_mode`` (default ``reduce-overhead``; ``none``
    runs eagerly) and ``compile_backend`` (default ``inductor``; the CPU tests use
    ``eager``). Both sides are plugged in the same way.
    """
    layers, heads, head_dim = int(params["layers"]), int(params["heads"]), int(params["head_dim"])
    vocab, max_len, batch = int(params["vocab"]), int(params["max_len"]), int(params.get("batch", 1))
    prompt, steps = int(params["prompt_len"]), int(params["new_tokens"])
    if prompt + steps > max_len:
        raise ValueError(f"prompt_len + new_tokens = {prompt + steps} does not fit max_len = {max_len}")
    dtype = getattr(torch, str(params.get("dtype", "bfloat16")))
    mode: Optional[str] = params.get("compile_mode", "reduce-overhead")
    backend = str(params.get("compile_backend", "inductor"))
    model = Decoder(op, layers=layers, heads=heads, head_dim=head_dim, vocab=vocab, max_len=max_len, batch=batch,
                    dtype=dtype, device=device, gen=gen)
    with torch.no_grad():
        for kc, vc in zip(model.k_cache, model.v_cache):
            kc[:, :, :prompt] = torch.randn(batch, heads, prompt, head_dim, generator=gen, device=device).to(dtype)
            vc[:, :, :prompt] = torch.randn(batch, heads, prompt, head_dim, generator=gen, device=device).to(dtype)
    tokens = torch.randint(0, vocab, (steps, batch, 1), generator=gen, device=device)
    if mode in (None, "none"):
        step: Callable[..., Tensor] = model
    else:
        # The caches are updated in place on every step; marking their addresses static
        # lets a CUDA graph keep writing into them (as transformers' StaticCache does).
        for buf in model.k_cache + model.v_cache:
            torch._dynamo.mark_static_address(buf)
        step = torch.compile(model, mode=mode if backend == "inductor" else None, backend=backend, dynamic=False)
    graphs = mode == "reduce-overhead" and device.startswith("cuda")

    @torch.no_grad()
    def run() -> Tensor:
        pos = torch.full((1,), prompt, dtype=torch.int64, device=device)
        out = []
        for i in range(steps):
            if graphs:
                torch.compiler.cudagraph_mark_step_begin()
            # A CUDA-graph replay overwrites its outputs on the next replay: keep a copy.
            out.append(step(tokens[i], pos).clone())
            pos += 1
        return torch.stack(out)

    return Workload(run, steps=steps, step="token")
