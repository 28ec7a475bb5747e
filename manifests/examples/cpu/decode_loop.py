"""A small decoder's token-by-token decode loop on the CPU: the micro-win-macro-loss story.

Two attention ops over a static KV cache (``max_len`` slots, the first ``n`` filled):

* ``e2e_examples::attn_masked`` -- the baseline: attention over every slot of the
  static cache, the unfilled ones masked (matrix-vector products, mask, softmax: the
  "eager" attention of many decoders, which keeps every step's shapes the same). It
  reads K and V in whatever layout it is handed, each product written to run over
  contiguous rows, so no layout costs it a conversion;
* ``e2e_examples::attn_prefix_kt`` -- the candidate: reads only the ``n`` filled
  slots, with K and V d-major (``[batch, heads, head_dim, max_len]`` in memory) so
  that both products run over contiguous rows. Handed the cache in another layout, it
  converts the whole of K and V first.

The kernel's benchmark (``attention_inputs``) allocates the cache d-major, the
kernel's layout: there the candidate converts nothing, does a quarter of the work and
wins. In the decoder the cache is position-major (``[batch, heads, max_len,
head_dim]``, the layout its writes and the prefill path use), so the candidate
converts the whole static cache on every call, in every layer, at every token:
it reads both caches whole and writes them whole before its own shorter reads, where
the baseline reads them once, so it moves at least twice the baseline's bytes and
decoding gets slower.

The fix, for the record: keep d-major copies of K and V beside the cache and write
one column into each per token, instead of converting the whole cache per call.
Weights and the prompt's keys and values are random: the story is about time, and
the oracles compare the two sides with each other.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, Tuple

import torch
import torch.nn.functional as F

from expkit import Workload

Tensor = torch.Tensor


def _d_major(x: Tensor) -> bool:
    """Whether the whole cache ``x`` (``[..., slots, head_dim]``) lies d-major in memory."""
    return x.transpose(-1, -2).is_contiguous()


def _scores(q: Tensor, k: Tensor) -> Tensor:
    """``q @ k^T``, as the product that runs over contiguous rows of ``k`` in its layout."""
    if _d_major(k):
        return torch.matmul(q, k.transpose(-1, -2))
    return torch.matmul(k, q.transpose(-1, -2)).transpose(-1, -2)


def _mix(probs: Tensor, v: Tensor) -> Tensor:
    """``probs @ v``, as the product that runs over contiguous rows of ``v`` in its layout."""
    if _d_major(v):
        return torch.matmul(v.transpose(-1, -2), probs.transpose(-1, -2)).transpose(-1, -2)
    return torch.matmul(probs, v)


@torch.library.custom_op("e2e_examples::attn_masked", mutates_args=())
def attn_masked(q: Tensor, k: Tensor, v: Tensor, n: int) -> Tensor:
    """Baseline: attention over every slot of the static cache, the unfilled ones masked."""
    scores = _scores(q, k).mul_(1.0 / math.sqrt(q.shape[-1]))
    scores.masked_fill_(torch.arange(k.shape[-2], device=k.device) >= n, float("-inf"))
    return _mix(torch.softmax(scores, dim=-1), v)


def _as_d_major(x: Tensor) -> Tensor:
    """``x`` as a ``[..., head_dim, slots]`` contiguous tensor: a view where ``x`` lies
    d-major, otherwise a converted copy of the whole of it."""
    xt = x.transpose(-1, -2)
    return xt if xt.is_contiguous() else xt.contiguous()


@torch.library.custom_op("e2e_examples::attn_prefix_kt", mutates_args=())
def attn_prefix_kt(q: Tensor, k: Tensor, v: Tensor, n: int) -> Tensor:
    """Candidate: attention over the ``n`` filled slots only, reading K and V d-major."""
    kt, vt = _as_d_major(k), _as_d_major(v)
    scores = torch.matmul(q, kt[..., :n]).mul_(1.0 / math.sqrt(q.shape[-1]))
    probs = torch.softmax(scores, dim=-1)
    return torch.matmul(vt[..., :n], probs.transpose(-1, -2)).transpose(-1, -2)


def attention_inputs(params: Dict[str, Any], gen: torch.Generator, device: str) -> Tuple[Any, ...]:
    """``(q, k, v, n)``, ``n`` of ``max_len`` slots filled, K and V allocated d-major as the kernel's benchmark did."""
    b, h, d = int(params.get("batch", 1)), int(params["heads"]), int(params["head_dim"])
    t, n = int(params["max_len"]), int(params["filled"])
    q = torch.randn(b, h, 1, d, generator=gen, device=device)
    k = torch.randn(b, h, d, t, generator=gen, device=device).transpose(-1, -2)
    v = torch.randn(b, h, d, t, generator=gen, device=device).transpose(-1, -2)
    return q, k, v, n


def _rms(x: Tensor) -> Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


def decoder(op: Callable[..., Tensor], side: str, params: Dict[str, Any], gen: torch.Generator,
            device: str) -> Workload:
    """A ``layers``-layer decoder that decodes ``new_tokens`` tokens after a ``prompt_len`` prompt.

    Teacher-forced: the tokens fed are fixed (random), so both sides see the same
    inputs at every step and their logits can be compared; the loop's mechanics -- one
    token per step through the KV cache -- are those of generation. ``run()`` returns
    the logits of every step, ``[new_tokens, batch, vocab]``. Both ops are plugged in
    the same way, so ``side`` goes unused: the conversion lives in the candidate.
    """
    layers, h, d = int(params["layers"]), int(params["heads"]), int(params["head_dim"])
    b, vocab = int(params.get("batch", 1)), int(params["vocab"])
    t, prompt, steps = int(params["max_len"]), int(params["prompt_len"]), int(params["new_tokens"])
    if prompt + steps > t:
        raise ValueError(f"prompt_len + new_tokens = {prompt + steps} does not fit max_len = {t}")
    dm = h * d
    w = lambda *shape: torch.randn(*shape, generator=gen, device=device) / math.sqrt(shape[-1])  # noqa: E731
    emb = torch.randn(vocab, dm, generator=gen, device=device)
    blocks = [(w(3 * dm, dm), w(dm, dm), w(2 * dm, dm), w(dm, 2 * dm)) for _ in range(layers)]
    head = w(vocab, dm)
    # The prompt's keys and values (slots [0, prompt)), as a prefill would have left them.
    k_cache = [torch.zeros(b, h, t, d, device=device) for _ in range(layers)]
    v_cache = [torch.zeros(b, h, t, d, device=device) for _ in range(layers)]
    for kc, vc in zip(k_cache, v_cache):
        kc[:, :, :prompt] = torch.randn(b, h, prompt, d, generator=gen, device=device)
        vc[:, :, :prompt] = torch.randn(b, h, prompt, d, generator=gen, device=device)
    tokens = torch.randint(0, vocab, (steps, b), generator=gen, device=device)

    @torch.no_grad()
    def run() -> Tensor:
        out = []
        for i in range(steps):
            pos = prompt + i
            x = emb[tokens[i]].view(b, 1, dm)
            for (wqkv, wo, wup, wdown), kc, vc in zip(blocks, k_cache, v_cache):
                q, k, v = F.linear(_rms(x), wqkv).view(b, 1, 3, h, d).permute(2, 0, 3, 1, 4)
                kc[:, :, pos] = k[:, :, 0]
                vc[:, :, pos] = v[:, :, 0]
                a = op(q, kc, vc, pos + 1)  # the op under test, plugged in as it is
                x = x + F.linear(a.transpose(1, 2).reshape(b, 1, dm), wo)
                x = x + F.linear(F.gelu(F.linear(_rms(x), wup)), wdown)
            out.append(F.linear(_rms(x), head)[:, 0])
        return torch.stack(out)

    return Workload(run, steps=steps, step="token")
