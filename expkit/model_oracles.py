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

When either fails, the two models are run side by side with forward hooks
(:mod:`expkit.divergence`) and the finding names every layer where the values first
part, with the size of the difference and the shapes involved.
"""

from __future__ import annotations

from typing import Any, Callable, List, Sequence

import torch

from .findings import Finding
from .manifest import LoadedManifest, Oracle
from .refs import resolve

DEFAULT_MAX_INCREASE = 0.1
DEFAULT_MAX_KL = 0.005


def _where_it_diverges(base_model: Any, cand_model: Any, tokens: torch.Tensor) -> str:
    from .divergence import all_divergent

    context = getattr(getattr(base_model, "config", None), "context", 64)
    batch = tokens[: 2 * context].reshape(2, context) if tokens.numel() >= 2 * context else tokens[None, :context]
    found = all_divergent(base_model, cand_model, (batch,), rtol=1e-5, atol=1e-6)
    if not found:
        return "no layer differs beyond rtol=1e-5, atol=1e-6 on a 2-window probe"
    parts = [d.describe() for d in found[:4]]
    more = f" and {len(found) - 4} more" if len(found) > 4 else ""
    return "first divergence at " + "; then ".join(parts) + more


def run_model_oracles(lm: LoadedManifest, baseline: Callable, candidate: Callable, device: str) -> List[Finding]:
    """Evaluate every ``perplexity`` / ``kl_divergence`` oracle of the manifest."""
    from .zoo.tinylm import kl_divergence, next_token_logits, perplexity_from_logits, swap_linears

    findings: List[Finding] = []
    specs: Sequence[tuple[int, Oracle]] = [(i, o) for i, o in enumerate(lm.manifest.oracles)
                                            if o.kind in ("perplexity", "kl_divergence")]
    cache: dict = {}
    for i, spec in specs:
        key = (spec.model, spec.dataset, spec.tokens)
        if key not in cache:
            load = resolve(spec.model, lm.folder, manifest_path=lm.path, key=f"oracles[{i}].model")
            data = resolve(spec.dataset, lm.folder, manifest_path=lm.path, key=f"oracles[{i}].dataset")
            model = load(device=device)
            tokens = data(spec.tokens)
            base_model, cand_model = swap_linears(model, baseline), swap_linears(model, candidate)
            try:
                with torch.no_grad():
                    bl = next_token_logits(base_model, tokens)
                    cl = next_token_logits(cand_model, tokens)
            except Exception as e:
                findings.append(Finding("crash", False, f"model-level oracle: candidate raised "
                                        f"{type(e).__name__}: {e} inside {spec.model}"))
                cache[key] = None
                continue
            cache[key] = (base_model, cand_model, tokens, bl, cl)
        if cache[key] is None:
            continue
        base_model, cand_model, tokens, bl, cl = cache[key]
        what = f"{tokens.numel()} tokens of {spec.dataset}"
        if spec.kind == "perplexity":
            pb, pc = perplexity_from_logits(bl, tokens), perplexity_from_logits(cl, tokens)
            limit = spec.max_increase if spec.max_increase is not None else DEFAULT_MAX_INCREASE
            ok = (pc - pb) <= limit and pc == pc
            msg = f"perplexity {pb:.4f} -> {pc:.4f} ({pc - pb:+.4f}, limit +{limit:g}) on {what}"
            figure, threshold = pc - pb, limit
        else:
            kl = kl_divergence(bl, cl)
            limit = spec.max_error if spec.max_error is not None else DEFAULT_MAX_KL
            ok = kl["mean"] <= limit
            msg = (f"mean KL divergence {kl['mean']:.3g} nats (limit {limit:g}; max {kl['max']:.3g}, "
                   f"same top token at {kl['same_top']:.1%} of positions) on {what}")
            figure, threshold = kl["mean"], limit
        if not ok:
            msg += "; " + _where_it_diverges(base_model, cand_model, tokens)
        findings.append(Finding(f"oracle:{spec.kind}", ok, msg, figure=figure, threshold=threshold))
    return findings
