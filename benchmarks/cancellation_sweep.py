"""The default oracle under cancellation: false alarms on honest reductions, catches of cheats.

Zero-mean inputs (N(0,1)), many draws at once: each row of a batch is one draw (its own
seed's inputs), and the rule's figures are taken per row, as the oracle takes them per
call: ``max |r|``, the baseline's error, the candidate's error and ``max |r_abs|`` (the
float64 reference on the inputs' absolute values, where ``combined_magnitude`` accepts the
op). The allowance is ``expkit.checks.rounding.allowed``: the rule itself, not a copy.

* honest: the op computed another way (pairwise, sequential, reversed, blocked, split-K,
  float64 accumulation, two-pass, log-sum-exp ...), held against a baseline that rounds
  once from float64 (the issue's Python loop: its own error is ~0, so the factor on it
  gives nothing) and against torch's own op. Any failure is a false alarm.
* cheat: for fp32, inputs rounded to bf16 or to tf32 (10 mantissa bits) and the op
  computed in fp32; for fp16 and bf16 outputs, sums accumulated in the output's half
  type (partials of 8). Held against the same two baselines. Any pass is a miss.

``python benchmarks/cancellation_sweep.py [--draws N]`` prints one table row per op, dtype,
variant and baseline: draws, failures (false alarms for honest rows, catches for cheats)
and the worst ratio of error to allowance. The tests (tests/test_rounding.py) run it at
1,000 draws and assert no false alarm and every cheat caught.
"""

from __future__ import annotations

import argparse
import math
import platform
import sys
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Tuple

import torch
import torch.nn.functional as F

from expkit.checks import rounding

Fn = Callable[..., torch.Tensor]


def tf32(x: torch.Tensor) -> torch.Tensor:
    """fp32 rounded to nearest at TF32's 10 mantissa bits (what a TF32 tensor core reads)."""
    bits = x.float().contiguous().view(torch.int32)
    return ((bits + ((bits >> 13) & 1) + 0xFFF) & ~0x1FFF).view(torch.float32)


def bf16(x: torch.Tensor) -> torch.Tensor:
    return x.bfloat16().float()


def half_accumulated(x: torch.Tensor, dtype: torch.dtype, dim: int = -1) -> torch.Tensor:
    """A sum over ``dim`` whose running total is kept in ``dtype`` (partials of 8 in fp32)."""
    x = x.movedim(dim, -1)
    parts = x.float().unflatten(-1, (-1, 8)).sum(-1)
    acc = torch.zeros(parts.shape[:-1], dtype=dtype)
    for j in range(parts.shape[-1]):
        acc = (acc.float() + parts[..., j]).to(dtype)
    return acc


def seq_sum(x: torch.Tensor) -> torch.Tensor:
    """A sequential fp32 sum over the last dimension (CPU ``cumsum`` adds one term at a time)."""
    return x.cumsum(-1)[..., -1]


def blocked_sum(x: torch.Tensor, b: int = 16) -> torch.Tensor:
    return seq_sum(x.unflatten(-1, (-1, b)).sum(-1))


def _layer_norm_two_pass(x: torch.Tensor) -> torch.Tensor:
    m = x.mean(-1, keepdim=True)
    d = x - m
    return d / torch.sqrt((d * d).mean(-1, keepdim=True) + 1e-5)


def _layer_norm_one_pass(x: torch.Tensor) -> torch.Tensor:
    m = x.mean(-1, keepdim=True)
    v = (x * x).mean(-1, keepdim=True) - m * m
    return (x - m) / torch.sqrt(v + 1e-5)


def _blocked_cumsum(x: torch.Tensor, b: int = 16) -> torch.Tensor:
    blocks = x.unflatten(-1, (-1, b))
    inner = blocks.cumsum(-1)
    offsets = torch.cat([torch.zeros_like(inner[..., :1, -1]), inner[..., :-1, -1].cumsum(-1)], -1)
    return (inner + offsets[..., None]).flatten(-2)


@dataclass(frozen=True)
class Op:
    """One op: how to draw a batch of inputs, the reference (any dtype in, same dtype out,
    batched over the first dimension), its honest variants and its cheats per dtype."""

    name: str
    draw: Callable[[torch.Generator, int, int, torch.dtype, int], Tuple[torch.Tensor, ...]]
    fn: Fn
    honest: Dict[str, Fn]
    cheats: Callable[[torch.dtype], Dict[str, Fn]]
    dtypes: Tuple[torch.dtype, ...] = (torch.float32, torch.float16, torch.bfloat16)
    rows: int = 1  # independent reductions in one draw (one call's outputs)


def _vec(g: torch.Generator, n: int, k: int, dtype: torch.dtype, rows: int) -> Tuple[torch.Tensor, ...]:
    return (torch.randn(n, rows, k, generator=g).to(dtype),)


def _two(g: torch.Generator, n: int, k: int, dtype: torch.dtype, rows: int) -> Tuple[torch.Tensor, ...]:
    return torch.randn(n, rows, k, generator=g).to(dtype), torch.randn(n, rows, k, generator=g).to(dtype)


def _mats(g: torch.Generator, n: int, k: int, dtype: torch.dtype, rows: int) -> Tuple[torch.Tensor, ...]:
    return torch.randn(n, 8, k, generator=g).to(dtype), torch.randn(n, k, 8, generator=g).to(dtype)


def _fp32_cheats(op: Fn) -> Callable[[torch.dtype], Dict[str, Fn]]:
    def cheats(dtype: torch.dtype) -> Dict[str, Fn]:
        if dtype != torch.float32:
            return {}
        return {"bf16 inputs": lambda *a: op(*(bf16(t) for t in a)),
                "tf32 inputs": lambda *a: op(*(tf32(t) for t in a))}
    return cheats


def _reduction_cheats(op: Fn, terms: Callable[..., torch.Tensor], after: Callable[..., torch.Tensor]
                      ) -> Callable[[torch.dtype], Dict[str, Fn]]:
    """fp32: rounded inputs; half types: the sum of ``terms`` accumulated in the half type."""
    def cheats(dtype: torch.dtype) -> Dict[str, Fn]:
        if dtype == torch.float32:
            return _fp32_cheats(op)(dtype)
        return {f"{dtype_name(dtype)} accumulation": lambda *a: after(half_accumulated(terms(*a), dtype), *a)}
    return cheats


def in_fp32(op: Fn) -> Fn:
    """``op`` computed in fp32 and rounded once to the inputs' dtype (honest for the half types)."""
    return lambda *a: op(*(t.float() for t in a)).to(a[0].dtype)


def in_fp64(op: Fn) -> Fn:
    return lambda *a: op(*(t.double() for t in a)).to(a[0].dtype)


def _k(x: torch.Tensor) -> int:
    return x.shape[-1]


OPS: List[Op] = [
    Op("sum", _vec, lambda x: x.sum(-1),
       {"torch.sum": lambda x: x.sum(-1), "sequential fp32": in_fp32(seq_sum),
        "reversed fp32": in_fp32(lambda x: seq_sum(x.flip(-1))), "blocked fp32": in_fp32(blocked_sum),
        "float64 accumulation": in_fp64(lambda x: x.sum(-1))},
       _reduction_cheats(lambda x: x.sum(-1), lambda x: x, lambda s, *a: s), rows=16),
    Op("mean", _vec, lambda x: x.mean(-1),
       {"torch.mean": lambda x: x.mean(-1), "sequential fp32": in_fp32(lambda x: seq_sum(x) / _k(x)),
        "blocked fp32": in_fp32(lambda x: blocked_sum(x) / _k(x))},
       _reduction_cheats(lambda x: x.mean(-1), lambda x: x, lambda s, x: s / x.shape[-1]), rows=16),
    Op("dot", _two, lambda x, y: (x * y).sum(-1),
       {"mul+sum": lambda x, y: (x * y).sum(-1), "einsum": lambda x, y: torch.einsum("...k,...k->...", x, y),
        "sequential fp32": in_fp32(lambda x, y: seq_sum(x * y)),
        "blocked fp32": in_fp32(lambda x, y: blocked_sum(x * y))},
       _reduction_cheats(lambda x, y: (x * y).sum(-1), lambda x, y: x.float() * y.float(), lambda s, *a: s),
       rows=16),
    Op("matmul", _mats, lambda a, b: a @ b,
       {"torch.bmm": lambda a, b: a @ b,
        "split-K fp32": in_fp32(lambda a, b: sum(x @ y for x, y in zip(a.chunk(4, -1), b.chunk(4, -2)))),
        "sequential fp32": in_fp32(lambda a, b: (a[..., :, :, None] * b[..., None, :, :]).cumsum(-2)[..., -1, :]),
        "float64 accumulation": in_fp64(lambda a, b: a @ b)},
       _reduction_cheats(lambda a, b: a @ b, lambda a, b: (a.float()[..., :, :, None] * b.float()[..., None, :, :]
                                                           ).transpose(-2, -1), lambda s, *a: s)),
    Op("softmax", _vec, lambda x: torch.softmax(x, -1),
       {"torch.softmax": lambda x: torch.softmax(x, -1),
        "exp/sum fp32": in_fp32(lambda x: (x - x.amax(-1, keepdim=True)).exp()
                                / (x - x.amax(-1, keepdim=True)).exp().sum(-1, keepdim=True)),
        "log-sum-exp fp32": in_fp32(lambda x: (x - torch.logsumexp(x, -1, keepdim=True)).exp())},
       _fp32_cheats(lambda x: torch.softmax(x, -1))),
    Op("layernorm", _vec, lambda x: F.layer_norm(x, x.shape[-1:]),
       {"F.layer_norm": lambda x: F.layer_norm(x, x.shape[-1:]), "two-pass fp32": in_fp32(_layer_norm_two_pass),
        "one-pass fp32": in_fp32(_layer_norm_one_pass)},
       _fp32_cheats(lambda x: F.layer_norm(x, x.shape[-1:]))),
    Op("cumsum", _vec, lambda x: x.cumsum(-1),
       {"torch.cumsum": lambda x: x.cumsum(-1), "blocked fp32": in_fp32(_blocked_cumsum),
        "float64 accumulation": in_fp64(lambda x: x.cumsum(-1))},
       _fp32_cheats(lambda x: x.cumsum(-1))),
]


def dtype_name(dtype: torch.dtype) -> str:
    return {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}[dtype]


def _reference(op: Op, inputs: Tuple[torch.Tensor, ...]) -> torch.Tensor:
    """The float64 reference of the op, per draw: the op on the inputs upcast (the ladder's first rung)."""
    return op.fn(*(t.double() for t in inputs))


def _baselines(op: Op, inputs: Tuple[torch.Tensor, ...], dtype: torch.dtype) -> Dict[str, torch.Tensor]:
    return {"float64, rounded once": _reference(op, inputs).to(dtype), "torch's op": op.fn(*inputs)}


def _per_row_max(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(t.shape[0], -1).amax(1)


@dataclass(frozen=True)
class Row:
    op: str
    dtype: str
    kind: str  # honest | cheat
    variant: str
    baseline: str
    k: int
    draws: int
    outputs: Tuple[int, ...]  # one draw's output shape
    failed: int
    worst: float  # the largest error / allowance over the draws
    fixed: int  # honest draws that fail the rule without its cancellation term
    needed: float  # the largest D a draw needed: (err_c - the rest of the allowance) / (u_acc max |r_abs|)


def sweep_op(op: Op, dtype: torch.dtype, draws: int, k: int, seed: int = 0, rows: int = 0) -> List[Row]:
    """Every variant and cheat of ``op`` in ``dtype`` over ``draws`` draws of length ``k``
    (``rows`` reductions a draw where the op has them: its own number unless given)."""
    g = torch.Generator().manual_seed(seed)
    inputs = op.draw(g, draws, k, dtype, rows or op.rows)
    ref = _reference(op, inputs)
    mag1 = op.fn(*(t.double().abs() for t in inputs))
    mag2 = op.fn(*(2 * t.double().abs() for t in inputs))
    top, _ = rounding.combined_magnitude(ref, mag1, mag2)  # the rule's test that the op is a sum of products
    combined = _per_row_max(mag1.abs()) if top else torch.zeros(draws, dtype=torch.float64)
    scale = _per_row_max(ref.abs())
    one = tuple(t[0] for t in inputs)
    kk, _ = rounding.reduction_length(one, ref[0])
    errors: Dict[Tuple[str, str], torch.Tensor] = {}  # each variant's error per draw, computed once
    for kind, variants in (("honest", op.honest), ("cheat", op.cheats(dtype))):
        for vname, fn in variants.items():
            out = fn(*inputs)
            assert out.dtype == dtype and out.shape == ref.shape, (op.name, vname, out.dtype, out.shape)
            err_c = _per_row_max((out.double() - ref).abs())
            errors[kind, vname] = torch.where(torch.isnan(err_c), torch.full_like(err_c, math.inf), err_c)
            del out
    rows: List[Row] = []
    for bname, base in _baselines(op, inputs, dtype).items():
        err_b = _per_row_max((base.double() - ref).abs())
        allowed = rounding.allowed(scale, err_b, combined, kk, dtype)
        without = rounding.allowed(scale, err_b, 0.0, kk, dtype)
        u = rounding.unit_roundoff(rounding.accumulation_dtype(dtype))
        for (kind, vname), err_c in errors.items():
            ratio = err_c / allowed
            worst = float(ratio.max()) if kind == "honest" else float(ratio.min())
            needed = ((err_c - without).clamp(min=0) / (u * combined)).nan_to_num(0.0, posinf=math.inf)
            rows.append(Row(op.name, dtype_name(dtype), kind, vname, bname, kk, draws, tuple(ref.shape[1:]),
                            int((err_c > allowed).sum()), worst, int((err_c > without).sum()),
                            float(needed.max()) if top else 0.0))
    return rows


def sweep(draws: int, k: int = 1024, ops: List[Op] = OPS, seed: int = 0) -> List[Row]:
    rows: List[Row] = []
    for op in ops:
        for dtype in op.dtypes:
            size = 256 if op.name == "matmul" else k
            rows += sweep_op(op, dtype, draws, size, seed)
    return rows


def table(rows: List[Row]) -> str:
    head = ("| op | dtype | kind | variant | baseline | K | outputs a draw | draws | failed the rule | worst (honest: "
            "max, cheat: min) error/allowance | honest draws the rule failed without D's term | D an honest "
            "draw needed |")
    lines = [head, "|" + "---|" * 12]
    for r in rows:
        shape = "x".join(map(str, r.outputs)) or "1 (scalar)"
        lines.append(f"| {r.op} | {r.dtype} | {r.kind} | {r.variant} | {r.baseline} | {r.k} | {shape} | {r.draws} | "
                     f"{r.failed} | {r.worst:.3g} | {r.fixed if r.kind == 'honest' else '-'} | "
                     f"{f'{r.needed:.3g}' if r.kind == 'honest' else '-'} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--large-draws", type=int, default=100,
                    help="draws of 16 sums at the issue's size (K = 10000); single sums there get --draws")
    args = ap.parse_args()
    torch.set_num_threads(2)
    t0 = time.perf_counter()
    rows = sweep(args.draws)
    # One scalar output a draw too (16 above): the rule's maxima then see one sum's error alone.
    rows += [r for op in OPS if op.rows > 1 for r in sweep_op(op, torch.float32, args.draws, 1024, seed=0, rows=1)]
    large = [op for op in OPS if op.name in ("sum", "mean", "dot", "cumsum")]
    # The case: one sum of randn(10000), a scalar (the row count of the others: 16).
    rows += [r for op in large for n, draws in ((1, args.draws), (16, args.large_draws))
             for r in sweep_op(op, torch.float32, draws, 10000, seed=1, rows=n)]
    took = time.perf_counter() - t0
    honest = [r for r in rows if r.kind == "honest"]
    cheats = [r for r in rows if r.kind == "cheat"]
    print(f"# Cancellation sweep (expkit.checks.rounding, D = {rounding.CANCELLATION:g}, C = {rounding.BOUND:g}, "
          f"F = {rounding.FACTOR:g})\n")
    import datetime

    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    print(f"`python benchmarks/cancellation_sweep.py {' '.join(sys.argv[1:])}`, {when}; CPU only (no GPU), torch "
          f"{torch.__version__}, {platform.processor() or platform.machine()}, python {sys.version.split()[0]}, "
          f"2 threads; {took:.1f} s. Inputs N(0,1); each draw is one row of a batch.\n")
    print(table(rows))
    most = max(honest, key=lambda r: r.needed)
    many = [r for r in cheats if r.dtype == "fp32" and math.prod(r.outputs) > 1]
    print(f"\nhonest: {sum(r.failed for r in honest)} false alarms in {sum(r.draws for r in honest)} judgements "
          f"(the rule without its cancellation term: {sum(r.fixed for r in honest)}); the largest D a draw needed: "
          f"{most.needed:.3g} ({most.op} {most.dtype} {most.variant}, K = {most.k}).\n"
          f"fp32 cheats (bf16 or tf32 inputs), draws with more than one output: {sum(r.failed for r in many)} caught "
          f"of {sum(r.draws for r in many)}; with one scalar output: "
          + ", ".join(f"{r.op} {r.variant} K = {r.k} {r.failed}/{r.draws}" for r in cheats
                      if r.dtype == "fp32" and math.prod(r.outputs) == 1 and r.baseline == "torch's op") + ".\n"
          f"half-type accumulation cheats: " + ", ".join(f"{r.op} {r.dtype} {r.failed}/{r.draws}" for r in cheats
                                                          if r.dtype != "fp32" and r.baseline == "torch's op") + ".")
    return 0


if __name__ == "__main__":
    sys.exit(main())
