"""A tiny byte-level transformer LM: a model-level correctness oracle that runs on any CPU.

Why it exists: a kernel change can be right on the layer someone spot-checked and wrong on
others. The case study behind this module is a weight repack into a blocked
``[d_out/4, d_in, 4]`` layout whose stride was wrong only where ``d_in`` is not a multiple
of 4; two layers of the model were wrong and only a model-level metric (perplexity) saw it.
This model reproduces that shape on purpose:

* every ``nn.Linear`` has ``in_features`` divisible by 4 (``d_model`` = 64), except the MLP
  down-projections of blocks 0 and 2, whose hidden width is 194; block 1's hidden width is
  192, so a spot check of block 1 alone passes under such a bug;
* attention is written out with plain ``nn.Linear`` layers (not ``nn.MultiheadAttention``,
  whose output projection bypasses its module's ``forward``), so :func:`swap_linears` reaches
  every matrix multiply;
* the LM head is its own ``nn.Linear`` (untied), for the same reason.

The oracle functions follow llama.cpp's perplexity tool: perplexity over a sliding window,
and per-position KL divergence of a candidate's next-token distribution from the baseline's.
Weights come from ``tinylm.pt`` next to this file, written by
``python -m expkit.zoo.train_tinylm``.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

WEIGHTS = Path(__file__).with_name("tinylm.pt")
CHECKPOINT_FORMAT = "expkit-tinylm"
# History: 1 = first format (state_dict, config, corpus fingerprint, eval and train records).
CHECKPOINT_VERSION = 1

LinearFn = Callable[[torch.Tensor, torch.Tensor, Optional[torch.Tensor]], torch.Tensor]


@dataclass(frozen=True)
class TinyLMConfig:
    """Shape of the model. ``mlp_hidden`` has one entry per block; its values decide which
    down-projections have ``in_features`` not divisible by 4."""

    vocab: int = 256
    d_model: int = 64
    n_head: int = 4
    mlp_hidden: Tuple[int, ...] = (194, 192, 194)
    context: int = 128

    def __post_init__(self) -> None:
        if self.d_model % self.n_head:
            raise ValueError("d_model must be divisible by n_head")
        object.__setattr__(self, "mlp_hidden", tuple(int(h) for h in self.mlp_hidden))


class Attention(nn.Module):
    """Causal multi-head self-attention from two ``nn.Linear`` layers and SDPA."""

    def __init__(self, d_model: int, n_head: int) -> None:
        super().__init__()
        self.n_head = n_head
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        heads = lambda z: z.view(b, t, self.n_head, d // self.n_head).transpose(1, 2)  # noqa: E731
        y = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class MLP(nn.Module):
    def __init__(self, d_model: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_model, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, d_model: int, n_head: int, hidden: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = Attention(d_model, n_head)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = MLP(d_model, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyLM(nn.Module):
    """Byte ids ``[batch, time]`` (time <= ``config.context``) to logits ``[batch, time, vocab]``."""

    def __init__(self, config: TinyLMConfig = TinyLMConfig()) -> None:
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab, config.d_model)
        self.pos = nn.Embedding(config.context, config.d_model)
        self.blocks = nn.ModuleList(
            Block(config.d_model, config.n_head, h) for h in config.mlp_hidden)
        self.ln_f = nn.LayerNorm(config.d_model)
        self.head = nn.Linear(config.d_model, config.vocab)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[-1]
        if t > self.config.context:
            raise ValueError(f"sequence of {t} tokens exceeds the model context {self.config.context}")
        x = self.embed(idx) + self.pos(torch.arange(t, device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def load_checkpoint(path: Path = WEIGHTS) -> dict:
    """The raw checkpoint dict (config, state_dict, corpus fingerprint, eval/train records)."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no tiny-LM weights; run `python -m expkit.zoo.train_tinylm`")
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    if ckpt.get("format") != CHECKPOINT_FORMAT or ckpt.get("version") != CHECKPOINT_VERSION:
        raise ValueError(f"{path}: not an {CHECKPOINT_FORMAT} v{CHECKPOINT_VERSION} checkpoint")
    return ckpt


def load_model(device: str | torch.device = "cpu", path: Path = WEIGHTS) -> TinyLM:
    """The trained model in eval mode, on ``device``."""
    ckpt = load_checkpoint(path)
    model = TinyLM(TinyLMConfig(**ckpt["config"]))
    model.load_state_dict(ckpt["state_dict"])
    return model.to(device).eval()


def config_dict(config: TinyLMConfig) -> dict:
    d = asdict(config)
    d["mlp_hidden"] = list(config.mlp_hidden)
    return d


# --------------------------------------------------------------------------- oracle functions

def _windows(n: int, context: int, stride: int) -> List[Tuple[int, int]]:
    """(start, first scored offset) for equal-length windows covering targets 1..n-1 once.

    A window of ``context`` inputs starting at ``s`` predicts tokens ``s+1 .. s+context``.
    The first window scores all of them; each later one only the targets no earlier window
    scored, so every target is scored exactly once and, past the first window, with at least
    ``context - stride`` tokens of history. This is the sliding-window evaluation of the
    Hugging Face perplexity guide; llama.cpp's tool instead scores the second half of
    disjoint chunks, which is the case ``stride = context / 2`` up to the first window.
    """
    starts = list(range(0, n - context, stride))
    if starts[-1] + context < n - 1:
        starts.append(n - 1 - context)  # a last full-length window, overlapping, for the tail
    out, scored_upto = [], 0  # targets 1..scored_upto are done
    for s in starts:
        first = max(scored_upto - s, 0)  # offset j predicts token s+1+j
        out.append((s, first))
        scored_upto = s + context
    return out


@torch.no_grad()
def next_token_logits(model: nn.Module, tokens: torch.Tensor, context: Optional[int] = None,
                      stride: Optional[int] = None, batch_size: int = 32) -> torch.Tensor:
    """Logits ``[len(tokens) - 1, vocab]`` (float32, CPU): row ``i`` predicts ``tokens[i+1]``.

    Windows of ``context`` tokens (default: the model's context) advance by ``stride``
    (default: half the context) and are run ``batch_size`` at a time; see :func:`_windows`.
    """
    tokens = tokens.reshape(-1).to(torch.long)
    n = tokens.numel()
    if n < 2:
        raise ValueError("need at least 2 tokens")
    context = min(context or model.config.context, n - 1)
    stride = stride or max(context // 2, 1)
    if not 0 < stride <= context:
        raise ValueError("need 0 < stride <= context")
    device = next(model.parameters()).device
    wins = _windows(n, context, stride)
    pieces: List[torch.Tensor] = []
    for i in range(0, len(wins), batch_size):
        chunk = wins[i:i + batch_size]
        x = torch.stack([tokens[s:s + context] for s, _ in chunk]).to(device)
        logits = model(x).float().cpu()
        pieces.extend(logits[k, first:] for k, (_, first) in enumerate(chunk))
    out = torch.cat(pieces)
    assert out.shape[0] == n - 1, (out.shape, n)
    return out


def perplexity_from_logits(logits: torch.Tensor, tokens: torch.Tensor) -> float:
    targets = tokens.reshape(-1)[1:].to(torch.long)
    nll = F.cross_entropy(logits.double(), targets, reduction="mean")
    return float(torch.exp(nll))


def perplexity(model: nn.Module, tokens: torch.Tensor, context: Optional[int] = None,
               stride: Optional[int] = None) -> float:
    """exp(mean negative log-likelihood per byte) of ``tokens[1:]``; 256 means a uniform guess."""
    return perplexity_from_logits(next_token_logits(model, tokens, context, stride), tokens)


def kl_divergence(base_logits: torch.Tensor, cand_logits: torch.Tensor) -> Dict[str, float]:
    """KL(P_base || P_cand) of the next-token distributions, per position, in nats.

    As in llama.cpp's ``--kl-divergence``: the baseline's distribution is the reference, the
    candidate's the approximation. Returns ``mean``, ``max``, ``p99``, ``same_top`` (fraction of
    positions whose argmax agrees) and ``n``. Computed in float64 so that a model compared with
    itself gives exactly 0.
    """
    if base_logits.shape != cand_logits.shape:
        raise ValueError(f"shape mismatch: {tuple(base_logits.shape)} vs {tuple(cand_logits.shape)}")
    lp = F.log_softmax(base_logits.double().reshape(-1, base_logits.shape[-1]), dim=-1)
    lq = F.log_softmax(cand_logits.double().reshape(-1, cand_logits.shape[-1]), dim=-1)
    kl = (lp.exp() * (lp - lq)).sum(-1).clamp_min(0.0)  # clamp: rounding can give -1e-17
    return {
        "mean": float(kl.mean()),
        "max": float(kl.max()),
        "p99": float(torch.quantile(kl, 0.99)),
        "same_top": float((lp.argmax(-1) == lq.argmax(-1)).double().mean()),
        "n": int(kl.numel()),
    }


# --------------------------------------------------------------------------- candidate seam

class LinearVia(nn.Linear):
    """An ``nn.Linear`` whose product is computed by a caller's ``linear_fn(x, weight, bias)``.

    It keeps the original's parameters, ``in_features`` and ``out_features`` and, placed by
    :func:`swap_linears`, its module name, so divergence reports name the original layer.
    """

    def __init__(self, original: nn.Linear, linear_fn: LinearFn) -> None:
        super().__init__(original.in_features, original.out_features,
                         bias=original.bias is not None, device="meta")
        self.weight = original.weight
        self.bias = original.bias
        self.linear_fn = linear_fn
        self.train(original.training)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_fn(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        name = getattr(self.linear_fn, "__qualname__", type(self.linear_fn).__name__)
        return super().extra_repr() + f", linear_fn={name}"


def swap_linears(model: nn.Module, linear_fn: LinearFn) -> nn.Module:
    """A deep copy of ``model`` whose every ``nn.Linear`` calls ``linear_fn`` instead of
    ``F.linear``; the original model is untouched."""
    clone = copy.deepcopy(model)
    targets = [(name, m) for name, m in clone.named_modules() if isinstance(m, nn.Linear)]
    for name, m in targets:
        if not name:
            raise ValueError("the model itself is an nn.Linear; wrap it in a container first")
        parent_name, _, child = name.rpartition(".")
        parent = clone.get_submodule(parent_name) if parent_name else clone
        setattr(parent, child, LinearVia(m, linear_fn))
    return clone


def linear_layers(model: nn.Module) -> Dict[str, nn.Linear]:
    return {n: m for n, m in model.named_modules() if isinstance(m, nn.Linear)}


# ------------------------------------------------- the case study's repack, right and wrong

def pack_blocked(weight: torch.Tensor, block: int = 4) -> torch.Tensor:
    """``[d_out, d_in]`` to a flat buffer laid out ``[ceil(d_out/block), d_in_pad, block]``.

    Each group of ``block`` output rows is interleaved so that a GEMV reads ``block``
    outputs' weights for one input with one vector load; rows and columns are zero-padded
    to multiples of ``block``, as vectorised kernels pad them.
    """
    d_out, d_in = weight.shape
    out_pad, in_pad = -d_out % block, -d_in % block
    w = F.pad(weight, (0, in_pad, 0, out_pad))
    return w.reshape(-1, block, d_in + in_pad).transpose(1, 2).contiguous().reshape(-1)


def blocked_linear(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                   block: int = 4, stride_bug: bool = False) -> torch.Tensor:
    """``F.linear`` through the blocked layout of :func:`pack_blocked`.

    ``stride_bug=True`` plants the case study's bug: the reader steps between row blocks by
    the unpadded ``d_in * block`` instead of the packer's padded ``d_in_pad * block``. Where
    ``d_in % block == 0`` the two agree and the result is exact; elsewhere every row block
    after the first reads weights shifted by ``block * (d_in_pad - d_in)`` elements per block.
    """
    d_out, d_in = weight.shape
    flat = pack_blocked(weight, block)
    d_in_pad = d_in + (-d_in % block)
    n_blocks = flat.numel() // (d_in_pad * block)
    step = (d_in if stride_bug else d_in_pad) * block
    view = flat.as_strided((n_blocks, d_in, block), (step, block, 1))
    unpacked = view.transpose(1, 2).reshape(n_blocks * block, d_in)[:d_out]
    return F.linear(x, unpacked, bias)


def blocked_linear_buggy(x: torch.Tensor, weight: torch.Tensor,
                         bias: Optional[torch.Tensor]) -> torch.Tensor:
    """:func:`blocked_linear` with the stride bug, as a ``linear_fn`` for :func:`swap_linears`."""
    return blocked_linear(x, weight, bias, stride_bug=True)


__all__ = [
    "TinyLM", "TinyLMConfig", "load_model", "load_checkpoint", "perplexity", "next_token_logits",
    "perplexity_from_logits", "kl_divergence", "swap_linears", "LinearVia", "linear_layers",
    "pack_blocked", "blocked_linear", "blocked_linear_buggy", "WEIGHTS",
]
