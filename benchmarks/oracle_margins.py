"""Margins of the default oracle (``kind: rounding``): honest numerics against precision downgrades.

Usage::

    python benchmarks/oracle_margins.py [--quick] [--seeds 3] [--out evidence/numerics/oracle_margins.txt]

The rule (``expkit/checks/rounding.py``) lets a candidate's worst error against a
float64 reference be ``F x err_b + (C sqrt(K) u + eps) x max|ref|``. This script chooses
``F`` and ``C`` from measurements: it runs, on the CPU, honest variants of five op
families -- implementations that only sum in another order, block, split the reduction,
use another library routine, another thread count or a wider accumulator -- and
precision downgrades of the same ops (tf32, emulated by rounding the inputs' mantissas
to 10 bits, to nearest and by truncation; bf16 and fp16 inputs with fp32 accumulation;
a bf16-rounded output), across reduction lengths and two input distributions (N(0,1),
where terms cancel, and U(0,1), where they do not and a sequential sum's error grows
fastest).

For every ordered pair (baseline, candidate) of an honest baseline and any candidate
it prints the candidate's error over what the rule allows (``ratio``: at most 1 passes)
with the shipped ``F`` and ``C``, and for the chosen constants the worst honest ratio and
the best downgrade ratio per family and length. The grid at the end gives both figures
for other choices of ``F`` and ``C``. ``K`` is what the oracle would use: its estimate from
the shapes (``rounding.reduction_length``).

What the emulation leaves out: GPU libraries' own orders (cuBLAS split-K, Triton
blocking) are not run here; their errors are of the kinds measured (blocked and split
sums with fp32 FMA accumulation). Run it on the GPU machine too for its thread counts.
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
from pathlib import Path
from typing import Callable, Dict, List, Sequence, Tuple

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from expkit.checks import rounding  # noqa: E402

Fn = Callable[..., torch.Tensor]


# --- emulated precisions ------------------------------------------------------------------

def tf32_round(x: torch.Tensor) -> torch.Tensor:
    """fp32 with its mantissa rounded to 10 bits, to nearest even (what cuBLAS's TF32 inputs keep)."""
    bits = x.contiguous().view(torch.int32)
    bias = ((bits >> 13) & 1) + 0xFFF
    return ((bits + bias) & ~0x1FFF).view(torch.float32)


def tf32_trunc(x: torch.Tensor) -> torch.Tensor:
    return (x.contiguous().view(torch.int32) & ~0x1FFF).view(torch.float32)


def via(dtype: torch.dtype) -> Callable[[torch.Tensor], torch.Tensor]:
    return lambda x: x.to(dtype).to(torch.float32)


def with_inputs(cast: Callable[[torch.Tensor], torch.Tensor], fn: Fn) -> Fn:
    return lambda *xs: fn(*(cast(x) for x in xs))


def with_threads(n: int, fn: Fn) -> Fn:
    def call(*xs: torch.Tensor) -> torch.Tensor:
        before = torch.get_num_threads()
        torch.set_num_threads(n)
        try:
            return fn(*xs)
        finally:
            torch.set_num_threads(before)
    return call


# --- the families -------------------------------------------------------------------------

def mm_seq(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    acc = torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype)
    for k in range(a.shape[1]):
        acc += a[:, k:k + 1] * b[k:k + 1, :]
    return acc


def mm_blocked(a: torch.Tensor, b: torch.Tensor, block: int = 128) -> torch.Tensor:
    acc = torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype)
    for s in range(0, a.shape[1], block):
        acc += a[:, s:s + block] @ b[s:s + block]
    return acc


def mm_splitk(a: torch.Tensor, b: torch.Tensor, parts: int = 4) -> torch.Tensor:
    chunks = [x @ y for x, y in zip(a.chunk(parts, dim=1), b.chunk(parts, dim=0))]
    return torch.stack(chunks).sum(0)


def mm_reversed(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a.flip(1) @ b.flip(0)


def mm_bsum(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a[:, :, None] * b[None, :, :]).sum(1)


def mm_wide(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a.double() @ b.double()).float()


def sum_seq(x: torch.Tensor) -> torch.Tensor:
    acc = torch.zeros(x.shape[0], dtype=x.dtype)
    for k in range(x.shape[1]):
        acc += x[:, k]
    return acc


def sum_blocked(x: torch.Tensor, block: int = 64) -> torch.Tensor:
    k = x.shape[1]
    pad = (-k) % block
    xp = torch.nn.functional.pad(x, (0, pad))
    return xp.reshape(x.shape[0], -1, block).sum(2).sum(1)


def softmax_manual(x: torch.Tensor) -> torch.Tensor:
    e = (x - x.max(dim=1, keepdim=True).values).exp()
    return e / e.sum(dim=1, keepdim=True)


def softmax_lse(x: torch.Tensor) -> torch.Tensor:
    return (x - torch.logsumexp(x, dim=1, keepdim=True)).exp()


def softmax_seqsum(x: torch.Tensor) -> torch.Tensor:
    e = (x - x.max(dim=1, keepdim=True).values).exp()
    return e / sum_seq(e)[:, None]


def layer_norm_manual(x: torch.Tensor) -> torch.Tensor:
    mean = x.mean(dim=1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=1, keepdim=True)
    return (x - mean) / torch.sqrt(var + 1e-5)


def layer_norm_onepass(x: torch.Tensor) -> torch.Tensor:
    n = x.shape[1]
    s1, s2 = x.sum(1, keepdim=True), (x * x).sum(1, keepdim=True)
    mean = s1 / n
    var = s2 / n - mean * mean
    return (x - mean) * torch.rsqrt(var + 1e-5)


def layer_norm_torch(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.layer_norm(x, x.shape[1:], eps=1e-5)


FAMILIES: Dict[str, Dict[str, object]] = {
    "matmul": {
        "inputs": lambda k, g, dist: (draw((32, k), g, dist), draw((k, 32), g, dist)),
        "honest": {"mm": torch.mm, "broadcast-sum": mm_bsum, "einsum": lambda a, b: torch.einsum("mk,kn->mn", a, b),
                   "blocked-128": mm_blocked, "split-k-4": mm_splitk, "reversed": mm_reversed,
                   "sequential": mm_seq, "mm-1-thread": with_threads(1, torch.mm), "fp64-acc": mm_wide},
        "downgrades": {"tf32": with_inputs(tf32_round, torch.mm), "tf32-trunc": with_inputs(tf32_trunc, torch.mm),
                       "bf16-in": with_inputs(via(torch.bfloat16), torch.mm),
                       "fp16-in": with_inputs(via(torch.float16), torch.mm),
                       "bf16-out": lambda a, b: via(torch.bfloat16)(a @ b)},
    },
    "row-sum": {
        "inputs": lambda k, g, dist: (draw((64, k), g, dist),),
        "honest": {"sum": lambda x: x.sum(1), "sequential": sum_seq, "blocked-64": sum_blocked,
                   "gemv": lambda x: x @ torch.ones(x.shape[1]), "reversed": lambda x: x.flip(1).sum(1),
                   "fp64-acc": lambda x: x.double().sum(1).float()},
        "downgrades": {"tf32": with_inputs(tf32_round, lambda x: x.sum(1)),
                       "bf16-in": with_inputs(via(torch.bfloat16), lambda x: x.sum(1)),
                       "fp16-in": with_inputs(via(torch.float16), lambda x: x.sum(1))},
    },
    "softmax": {
        "inputs": lambda k, g, dist: (draw((64, k), g, dist) * 4,),
        "honest": {"softmax": lambda x: torch.softmax(x, 1), "manual": softmax_manual, "log-sum-exp": softmax_lse,
                   "sequential-sum": softmax_seqsum},
        "downgrades": {"bf16-in": with_inputs(via(torch.bfloat16), lambda x: torch.softmax(x, 1)),
                       "fp16-in": with_inputs(via(torch.float16), lambda x: torch.softmax(x, 1)),
                       "bf16-out": lambda x: via(torch.bfloat16)(torch.softmax(x, 1)),
                       "tf32": with_inputs(tf32_round, lambda x: torch.softmax(x, 1))},
    },
    "layer-norm": {
        "inputs": lambda k, g, dist: (draw((64, k), g, dist),),
        "honest": {"layer_norm": layer_norm_torch, "two-pass": layer_norm_manual, "one-pass": layer_norm_onepass},
        "downgrades": {"bf16-in": with_inputs(via(torch.bfloat16), layer_norm_torch),
                       "tf32": with_inputs(tf32_round, layer_norm_torch),
                       "bf16-out": lambda x: via(torch.bfloat16)(layer_norm_torch(x))},
    },
    "elementwise": {
        "inputs": lambda k, g, dist: tuple(draw((64, k), g, dist) for _ in range(3)),
        "honest": {"mul-add": lambda x, y, z: x * y + z, "addcmul": lambda x, y, z: torch.addcmul(z, x, y),
                   "fp64": lambda x, y, z: (x.double() * y.double() + z.double()).float()},
        "downgrades": {"bf16-in": with_inputs(via(torch.bfloat16), lambda x, y, z: x * y + z),
                       "tf32": with_inputs(tf32_round, lambda x, y, z: x * y + z),
                       "fp16-in": with_inputs(via(torch.float16), lambda x, y, z: x * y + z)},
    },
}

LENGTHS = {"matmul": (16, 256, 4096, 65536), "row-sum": (16, 256, 4096, 65536, 262144),
           "softmax": (16, 256, 4096, 65536), "layer-norm": (16, 256, 4096, 65536), "elementwise": (64, 4096)}
QUICK = {"matmul": (256, 4096), "row-sum": (256, 65536), "softmax": (4096,), "layer-norm": (4096,),
         "elementwise": (4096,)}


def draw(shape: Tuple[int, ...], g: torch.Generator, dist: str) -> torch.Tensor:
    if dist == "normal":
        return torch.randn(shape, generator=g)
    return torch.rand(shape, generator=g)


def measure(family: str, k: int, dist: str, seed: int) -> List[Dict[str, object]]:
    """Every (baseline, candidate) pair's figures on one set of inputs."""
    spec = FAMILIES[family]
    g = torch.Generator().manual_seed(seed)
    xs = spec["inputs"](k, g, dist)  # type: ignore[operator]
    honest: Dict[str, Fn] = spec["honest"]  # type: ignore[assignment]
    downgrades: Dict[str, Fn] = spec["downgrades"]  # type: ignore[assignment]
    first = next(iter(honest.values()))
    ref = first(*(x.double() for x in xs))
    outs = {name: fn(*xs) for name, fn in itertools.chain(honest.items(), downgrades.items())}
    kk, _ = rounding.reduction_length(xs, outs[next(iter(honest))])
    rows = []
    for b in honest:
        for c, out in outs.items():
            if c == b:
                continue
            e = rounding.output_error(0, ref, outs[b], out, kk, "", rounding.FACTOR)
            u = rounding.unit_roundoff(torch.float32)
            eps = float(torch.finfo(torch.float32).eps)
            # The smallest C that passes with the shipped F, and the smallest F with the shipped C.
            need_c = max(0.0, ((e.err_c - rounding.FACTOR * e.err_b) / e.scale - eps) / (math.sqrt(kk) * u)) \
                if e.scale else 0.0
            second = (rounding.BOUND * math.sqrt(kk) * u + eps) * e.scale
            need_f = max(0.0, (e.err_c - second) / e.err_b) if e.err_b else (0.0 if e.err_c <= second else math.inf)
            rows.append({"family": family, "K": kk, "dist": dist, "seed": seed, "baseline": b, "candidate": c,
                         "honest": c in honest, "naive": "sequential" in c or "sequential" in b, "err_b": e.err_b, "err_c": e.err_c, "scale": e.scale,
                         "ratio": e.ratio, "need_c": need_c, "need_f": need_f})
    return rows


def ratio_with(row: Dict[str, object], f: float, c: float) -> float:
    u = rounding.unit_roundoff(torch.float32)
    eps = float(torch.finfo(torch.float32).eps)
    allowed = f * float(row["err_b"]) + (c * math.sqrt(float(row["K"])) * u + eps) * float(row["scale"])
    return float(row["err_c"]) / allowed if allowed > 0 else math.inf


def _grid_cell(rows: List[Dict[str, object]], f: float, c: float) -> Tuple[float, float, float]:
    honest = [ratio_with(r, f, c) for r in rows if r["honest"] and not r["naive"]]
    naive = [ratio_with(r, f, c) for r in rows if r["honest"] and r["naive"]]
    harmful = [ratio_with(r, f, c) for r in rows if not r["honest"] and r["harmful"]]
    return max(honest), max(naive or [0.0]), min(harmful or [math.inf])


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a few lengths only (about 20 s)")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None, help="also write the report here")
    args = ap.parse_args(argv)
    lengths = QUICK if args.quick else LENGTHS
    rows: List[Dict[str, object]] = []
    for family, ks in lengths.items():
        for k in ks:
            for dist in ("normal", "uniform"):
                for seed in range(args.seeds):
                    got = measure(family, k, dist, seed)
                    # A downgrade is harmful where it errs by more than twice the worst
                    # honest variant (a naive sequential sum aside): elsewhere (sums of
                    # positive terms, where input rounding averages out) no rule can or
                    # need tell it from honest work.
                    worst = max(float(r["err_c"]) for r in got if r["honest"] and not r["naive"])
                    for r in got:
                        r["harmful"] = (not r["honest"] and float(r["err_c"]) > 2 * worst
                                        and "sequential" not in str(r["baseline"]))
                    rows += got
    lines = [f"# oracle margins: torch {torch.__version__}, {torch.get_num_threads()} threads, "
             f"shipped F={rounding.FACTOR:g}, C={rounding.BOUND:g}, {args.seeds} seeds; ratio = the candidate's "
             "error / what the rule allows (<= 1 passes)", "",
             "honest: every honest pair but the naive sequential sums; naive: a sequential fp32 sum on either side; "
             "need C / need F: the least C (at the shipped F) and the least F (at the shipped C) every honest pair "
             "passes with; harmful downgrade: the smallest ratio of a downgrade that errs by more than twice the "
             "worst honest variant, against a baseline that is not a naive sequential sum (n harmless: downgrade "
             "pairs that do not, which no rule can or need catch; against a naive baseline the rule allows F times "
             "its large error, by design)", ""]
    lines.append(f"{'family':<12} {'K':>8} {'dist':<8} {'honest':>8} {'naive':>8} {'need C':>7} {'need F':>7} "
                 f"{'harmful downgrade':>18} {'(pair)':<30} {'n harmless':>10}")
    for (family, kk, dist), group in itertools.groupby(rows, key=lambda r: (r["family"], r["K"], r["dist"])):
        group = list(group)
        honest = [r for r in group if r["honest"] and not r["naive"]]
        naive = [r for r in group if r["honest"] and r["naive"]]
        harmful = [r for r in group if not r["honest"] and r["harmful"]]
        harmless = len({(r["candidate"], r["baseline"]) for r in group if not r["honest"] and not r["harmful"]
                        and "sequential" not in str(r["baseline"])})
        wh = max(float(r["ratio"]) for r in honest)
        wn = max([float(r["ratio"]) for r in naive] or [0.0])
        need_c = max(float(r["need_c"]) for r in honest)
        need_f = max(float(r["need_f"]) for r in honest)
        if harmful:
            bd = min(harmful, key=lambda r: r["ratio"])
            down = f"{bd['ratio']:>18.3g} {str(bd['candidate']) + ' vs ' + str(bd['baseline']):<30}"
        else:
            down = f"{'-':>18} {'':<30}"
        lines.append(f"{family:<12} {kk:>8} {dist:<8} {wh:>8.3g} {wn:>8.3g} {need_c:>7.3g} {need_f:>7.3g} {down} "
                     f"{harmless:>10}")
    fs, cs = (1.0, 2.0, 4.0, 8.0), (0.5, 1.0, 2.0, 4.0)
    lines += ["", "Grid over all rows: worst honest ratio / worst naive-sequential ratio / best harmful-downgrade ratio",
              "(honest must stay <= 1, downgrades > 1)",
              f"{'':>6}" + "".join(f"{'C=' + format(c, 'g'):>22}" for c in cs)]
    for f in fs:
        cells = ["{:.3g}/{:.3g}/{:.3g}".format(*_grid_cell(rows, f, c)) for c in cs]
        lines.append(f"{'F=' + format(f, 'g'):>6}" + "".join(f"{x:>22}" for x in cells))
    lines += ["", "Smallest ratio of each downgrade where it is harmful, shipped constants:"]
    for name in sorted({str(r["candidate"]) for r in rows if not r["honest"]}):
        sel = [r for r in rows if r["candidate"] == name and r["harmful"]]
        if not sel:
            lines.append(f"  {name:<12} {'-':>10}  (never harmful here)")
            continue
        worst = min(sel, key=lambda r: r["ratio"])
        lines.append(f"  {name:<12} {worst['ratio']:>10.3g}  (at {worst['family']}, K={worst['K']}, {worst['dist']}, "
                     f"against {worst['baseline']})")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
