"""Model-level oracles: does the candidate change what a whole model computes?

A per-call ``allclose`` at the shapes someone thought of is a spot check. The seed
story's repack passed one: it was exact on every layer whose inner dimension is
divisible by 4 and wrong on the two that are not, and only the model's perplexity (or
a per-layer comparison) showed it. These oracles swap every linear layer of a small
trained language model for the baseline and then the candidate, and compare:

* ``perplexity``: the candidate's perplexity on held-out text may exceed the
  baseline's by at most ``max_increase`` (0 for a lossless change such as a layout
  repack; around 0.1 is a common allowance for a lossy one);
* ``kl_divergence``: the mean KL divergence of the candidate's next-token
  distributions from the baseline's, in nats, at most ``max_error``.

Each side computes its own model's logits in its own process (:func:`side_logits`);
the baseline's process holds the candidate's logits against its own
(:func:`judge_logits`). When an oracle fails, the baseline's process records every
module call of its model on a two-window probe (:func:`record_probe`) and the
candidate's process replays its model against that record
(:func:`expkit.checks.divergence.replay`), naming every layer where the values first
part, with the size of the difference and the shapes involved (:func:`describe`).
That location is a diagnosis made in the candidate's process, never a verdict.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Sequence, Tuple

import torch

from ..core.findings import Finding
from ..manifest.refs import resolve
from ..manifest.spec import MODEL_ORACLE_KINDS, LoadedManifest, Oracle
from ..zoo.tinylm import kl_divergence, next_token_logits, perplexity_from_logits, swap_linears
from .divergence import record

DEFAULT_MAX_INCREASE = 0.1
DEFAULT_MAX_KL = 0.005
PROBE_RTOL, PROBE_ATOL = 1e-5, 1e-6


def specs(lm: LoadedManifest) -> List[Tuple[int, Oracle]]:
    return [(i, o) for i, o in enumerate(lm.manifest.oracles) if o.kind in MODEL_ORACLE_KINDS]


def key_of(spec: Oracle) -> str:
    return f"{spec.model}|{spec.dataset}|{spec.tokens}"


def load_for(lm: LoadedManifest, i: int, spec: Oracle, device: str) -> Tuple[Any, torch.Tensor]:
    """The oracle's model (built for ``device``) and its held-out tokens."""
    load = resolve(spec.model, lm.folder, manifest_path=lm.path, key=f"oracles[{i}].model")
    data = resolve(spec.dataset, lm.folder, manifest_path=lm.path, key=f"oracles[{i}].dataset")
    return load(device=device), data(spec.tokens)


def side_logits(lm: LoadedManifest, fn: Callable[..., Any], device: str) -> Dict[str, Any]:
    """Per distinct (model, dataset, tokens): the model with every linear layer swapped for
    ``fn``, its next-token logits and the tokens. A raise is kept as its message."""

    out: Dict[str, Any] = {}
    for i, spec in specs(lm):
        key = key_of(spec)
        if key in out:
            continue
        model, tokens = load_for(lm, i, spec, device)
        swapped = swap_linears(model, fn)
        try:
            with torch.no_grad():
                logits = next_token_logits(swapped, tokens)
        except Exception as e:
            out[key] = {"error": f"{type(e).__name__}: {e}", "spec": spec}
            continue
        out[key] = {"model": swapped, "tokens": tokens, "logits": logits, "spec": spec}
    return out


def judge_logits(spec: Oracle, tokens: torch.Tensor, bl: torch.Tensor, cl: torch.Tensor) -> Finding:
    """One model-level oracle on the two sides' logits."""

    what = f"{tokens.numel()} tokens of {spec.dataset}"
    if spec.kind == "perplexity":
        pb, pc = perplexity_from_logits(bl, tokens), perplexity_from_logits(cl, tokens)
        limit = spec.max_increase if spec.max_increase is not None else DEFAULT_MAX_INCREASE
        ok = (pc - pb) <= limit and pc == pc
        return Finding(f"oracle:{spec.kind}", ok, f"perplexity {pb:.4f} -> {pc:.4f} ({pc - pb:+.4f}, limit "
                       f"+{limit:g}) on {what}", figure=pc - pb, threshold=limit)
    kl = kl_divergence(bl, cl)
    limit = spec.max_error if spec.max_error is not None else DEFAULT_MAX_KL
    return Finding(f"oracle:{spec.kind}", kl["mean"] <= limit,
                   f"mean KL divergence {kl['mean']:.3g} nats (limit {limit:g}; max {kl['max']:.3g}, same top token "
                   f"at {kl['same_top']:.1%} of positions) on {what}", figure=kl["mean"], threshold=limit)


def probe_batch(model: Any, tokens: torch.Tensor) -> torch.Tensor:
    context = getattr(getattr(model, "config", None), "context", 64)
    return tokens[: 2 * context].reshape(2, context) if tokens.numel() >= 2 * context else tokens[None, :context]


def record_probe(model: Any, tokens: torch.Tensor) -> Tuple[Any, Any]:
    """Every module call's inputs and outputs of the baseline's model on the probe batch."""

    return record(model, (probe_batch(model, tokens),))


def describe(origins: Sequence[Any]) -> str:
    if not origins:
        return f"no layer differs beyond rtol={PROBE_RTOL:g}, atol={PROBE_ATOL:g} on a 2-window probe"
    parts = [d.describe() for d in origins[:4]]
    more = f" and {len(origins) - 4} more" if len(origins) > 4 else ""
    return "first divergence at " + "; then ".join(parts) + more
