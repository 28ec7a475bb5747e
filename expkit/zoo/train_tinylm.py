"""Train the tiny LM from scratch on CPU and write ``tinylm.pt``.

    python -m expkit.zoo.train_tinylm [--steps N] [--out PATH]

Recipe: AdamW, linear warm-up then cosine decay, random windows of ``context + 1`` bytes drawn
from the training text by a seeded generator. Seeds fix the initial weights and the batches, so
two runs with the same torch build and thread count write the same weights; a different build
or thread count can change the floating-point reductions and so the last bits.

The checkpoint records the config, the state dict (float32: exact, and small enough), the
eval corpus fingerprint and the eval perplexity of the weights as saved, so a reader can tell
whether their interpreter's stdlib text is the one the number was measured on.
"""

from __future__ import annotations

import argparse
import math
import platform
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from expkit.zoo import corpus
from expkit.zoo.tinylm import (CHECKPOINT_FORMAT, CHECKPOINT_VERSION, WEIGHTS, TinyLM,
                               TinyLMConfig, config_dict, perplexity)

EVAL_CONTEXT, EVAL_STRIDE = 128, 64


def _lr(step: int, steps: int, peak: float, warmup: int) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(steps - warmup, 1)
    return peak * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * progress)))


def train(steps: int = 2000, batch: int = 32, lr: float = 6e-3, seed: int = 0,
          eval_every: int = 250, eval_n_tokens: int = corpus.DEFAULT_EVAL_TOKENS,
          config: TinyLMConfig = TinyLMConfig(), log=print) -> tuple[TinyLM, dict]:
    """Train and return ``(model, record)``; ``record`` holds the logged table and timings."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    data = corpus.train_tokens()
    ev = corpus.eval_tokens(eval_n_tokens)
    model = TinyLM(config)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "embed" not in n and "pos" not in n]
    other = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "embed" not in n and "pos" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": other, "weight_decay": 0.0}], lr=lr, betas=(0.9, 0.95))
    T = config.context
    rows, running, t0 = [], None, time.perf_counter()
    log(f"{'step':>6} {'train loss':>11} {'eval ppl':>9} {'seconds':>8}")
    for step in range(steps + 1):
        if step % eval_every == 0 or step == steps:
            model.eval()
            ppl = perplexity(model, ev, EVAL_CONTEXT, EVAL_STRIDE)
            model.train()
            elapsed = time.perf_counter() - t0
            rows.append({"step": step, "train_loss": running, "eval_ppl": ppl, "seconds": elapsed})
            shown = f"{running:11.4f}" if running is not None else f"{'-':>11}"
            log(f"{step:6d} {shown} {ppl:9.3f} {elapsed:8.1f}")
        if step == steps:
            break
        for group in opt.param_groups:
            group["lr"] = _lr(step, steps, lr, warmup=max(steps // 20, 1))
        starts = torch.randint(0, data.numel() - T - 1, (batch,), generator=gen)
        xy = torch.stack([data[s:s + T + 1] for s in starts.tolist()])
        loss = F.cross_entropy(model(xy[:, :-1]).reshape(-1, config.vocab), xy[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        running = loss.item() if running is None else 0.95 * running + 0.05 * loss.item()
    model.eval()
    record = {"steps": steps, "batch": batch, "lr": lr, "seed": seed, "table": rows,
              "train_seconds": time.perf_counter() - t0, "threads": torch.get_num_threads()}
    return model, record


def save(model: TinyLM, record: dict, out: Path, eval_n_tokens: int) -> dict:
    ev = corpus.eval_tokens(eval_n_tokens)
    ppl = perplexity(model, ev, EVAL_CONTEXT, EVAL_STRIDE)  # of the weights exactly as saved
    ckpt = {
        "format": CHECKPOINT_FORMAT,
        "version": CHECKPOINT_VERSION,
        "config": config_dict(model.config),
        "state_dict": {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()},
        "corpus_fingerprint": corpus.corpus_fingerprint(eval_n_tokens),
        "eval": {"n_tokens": eval_n_tokens, "context": EVAL_CONTEXT, "stride": EVAL_STRIDE,
                 "perplexity": ppl},
        "train": {k: v for k, v in record.items() if k != "table"},
        "python": platform.python_version(),
        "torch": str(torch.__version__),
    }
    ckpt["train"]["table"] = [dict(r) for r in record["table"]]
    torch.save(ckpt, out)
    return ckpt


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=6e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--eval-tokens", type=int, default=corpus.DEFAULT_EVAL_TOKENS)
    ap.add_argument("--out", type=Path, default=WEIGHTS)
    a = ap.parse_args(argv)
    print(f"corpus: {len(corpus.train_text())} train bytes, eval {corpus.corpus_fingerprint(a.eval_tokens)}"
          f" (python {platform.python_version()}, torch {torch.__version__}, {torch.get_num_threads()} threads)")
    model, record = train(a.steps, a.batch, a.lr, a.seed, a.eval_every, a.eval_tokens)
    ckpt = save(model, record, a.out, a.eval_tokens)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"wrote {a.out} ({a.out.stat().st_size} bytes, {n_params} parameters); "
          f"eval ppl {ckpt['eval']['perplexity']:.3f} per byte in {record['train_seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
