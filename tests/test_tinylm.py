"""The tiny LM as a model-level oracle: it loads, it predicts, and it catches the case study's
repack bug that a one-layer spot check misses."""

from __future__ import annotations

import platform

import pytest
import torch
import torch.nn.functional as F

from expkit.checks.divergence import all_divergent, first_divergence
from expkit.zoo import corpus
from expkit.zoo.tinylm import (LinearVia, _windows, blocked_linear, blocked_linear_buggy,
                               kl_divergence, linear_layers, load_checkpoint, load_model,
                               next_token_logits, perplexity, perplexity_from_logits,
                               swap_linears)

N_TOKENS = 4096  # enough for a stable number, small enough for a 2-core CI machine
CONTEXT, STRIDE = 128, 64


@pytest.fixture(scope="module")
def model():
    return load_model()


@pytest.fixture(scope="module")
def tokens():
    return corpus.eval_tokens(N_TOKENS)


@pytest.fixture(scope="module")
def base_logits(model, tokens):
    return next_token_logits(model, tokens, CONTEXT, STRIDE)


def test_loads_in_eval_mode_with_exactly_two_linears_of_odd_width(model):
    assert not model.training
    linears = linear_layers(model)
    odd = sorted(n for n, m in linears.items() if m.in_features % 4)
    assert odd == ["blocks.0.mlp.fc2", "blocks.2.mlp.fc2"]
    assert len(linears) > 2 * len(odd)  # most layers are fine, as in the case study


def test_perplexity_is_far_below_uniform(model, tokens, base_logits):
    ppl = perplexity_from_logits(base_logits, tokens)
    assert 1.0 < ppl < 0.1 * 256
    assert ppl == perplexity(model, tokens, CONTEXT, STRIDE)


def test_recorded_perplexity_reproduces_on_the_same_text(model):
    ckpt = load_checkpoint()
    ev = ckpt["eval"]
    if corpus.corpus_fingerprint(ev["n_tokens"]) != ckpt["corpus_fingerprint"]:
        pytest.skip(f"stdlib text of Python {platform.python_version()} differs from "
                    f"the training machine's ({ckpt['python']})")
    measured = perplexity(model, corpus.eval_tokens(ev["n_tokens"]), ev["context"], ev["stride"])
    assert measured == pytest.approx(ev["perplexity"], rel=1e-4)


def test_logits_cover_every_target_once(base_logits, tokens):
    assert base_logits.shape == (tokens.numel() - 1, 256)
    for n, c, s in [(10, 4, 2), (11, 4, 3), (9, 4, 4), (6, 5, 1), (1000, 128, 64)]:
        covered = [st + 1 + j for st, first in _windows(n, c, s) for j in range(first, c)]
        assert covered == list(range(1, n)), (n, c, s)


def test_kl_of_model_with_itself_is_zero(base_logits):
    kl = kl_divergence(base_logits, base_logits.clone())
    assert kl["mean"] == 0.0 and kl["max"] == 0.0 and kl["same_top"] == 1.0
    shifted = kl_divergence(base_logits, base_logits + 3.0)  # softmax is shift-invariant
    assert shifted["max"] < 1e-12
    other = kl_divergence(base_logits, torch.zeros_like(base_logits))  # uniform candidate
    assert other["mean"] > 0.5


def test_swap_keeps_names_and_shapes_and_leaves_the_original(model):
    swapped = swap_linears(model, F.linear)
    before, after = linear_layers(model), linear_layers(swapped)
    assert list(before) == list(after)
    for name, m in after.items():
        assert isinstance(m, LinearVia) and not isinstance(before[name], LinearVia)
        assert (m.in_features, m.out_features) == (before[name].in_features, before[name].out_features)
        assert m.weight is not before[name].weight  # a deep copy
    assert not swapped.training


@pytest.mark.parametrize("linear_fn", [F.linear, blocked_linear], ids=["F.linear", "blocked"])
def test_exact_linear_gives_identical_perplexity(model, tokens, base_logits, linear_fn):
    cand = next_token_logits(swap_linears(model, linear_fn), tokens, CONTEXT, STRIDE)
    assert torch.equal(cand, base_logits)
    assert perplexity_from_logits(cand, tokens) == perplexity_from_logits(base_logits, tokens)


def test_repack_bug_raises_perplexity_and_is_located(model, tokens, base_logits):
    buggy = swap_linears(model, blocked_linear_buggy)
    cand = next_token_logits(buggy, tokens, CONTEXT, STRIDE)
    base_ppl = perplexity_from_logits(base_logits, tokens)
    assert perplexity_from_logits(cand, tokens) > base_ppl * 1.01
    assert kl_divergence(base_logits, cand)["mean"] > 1e-3

    x = tokens[:CONTEXT].unsqueeze(0)
    found = all_divergent(model, buggy, (x,), rtol=1e-5, atol=1e-6)
    assert [d.module for d in found] == ["blocks.0.mlp.fc2", "blocks.2.mlp.fc2"]
    assert all(d.in_features % 4 for d in found)
    assert first_divergence(model, buggy, (x,), rtol=1e-5, atol=1e-6).module == "blocks.0.mlp.fc2"


def test_a_spot_check_of_one_layer_misses_the_bug(model):
    # The case study's trap: block 1's MLP (in_features 192) is exact under the buggy repack.
    fc2 = model.blocks[1].mlp.fc2
    x = torch.randn(16, fc2.in_features, generator=torch.Generator().manual_seed(0))
    assert torch.equal(blocked_linear_buggy(x, fc2.weight, fc2.bias), F.linear(x, fc2.weight, fc2.bias))
