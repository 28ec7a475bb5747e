"""The default oracle (kind: rounding): fair to honest numerics, unfair to precision downgrades.

Each test states one property of the rule in expkit/checks/rounding.py; the constants
themselves come from benchmarks/oracle_margins.py (evidence/numerics/oracle_margins.txt).
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from expkit.checks import oracles, rounding
from expkit.manifest.schema import SchemaError, build
from expkit.manifest.spec import DEFAULT_ORACLES, Manifest, Oracle

ROUNDING = Oracle()


def mats(m: int, k: int, n: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(m, k, generator=g), torch.randn(k, n, generator=g)


def bsum(a, b):
    """The issue's reference: broadcast multiply, then sum over the inner dimension."""
    return (a[:, :, None] * b[None, :, :]).sum(1)


def judge(base_fn, cand_fn, *inputs, spec=ROUNDING, **kw):
    ladder = rounding.ReferenceLadder(base_fn, inputs)
    return oracles.check_outputs(spec, base_fn(*inputs), cand_fn(*inputs), case="c", reference64=ladder,
                                 inputs=inputs, **kw)


def tf32(x):
    bits = x.contiguous().view(torch.int32)
    return ((bits + ((bits >> 13) & 1) + 0xFFF) & ~0x1FFF).view(torch.float32)


# --- the issue's honest matmul ----------------------------------------------------------------


@pytest.mark.parametrize("shape", [(64, 256, 64), (32, 4096, 32)])
def test_the_issues_honest_matmul_passes_where_allclose_does_not(shape):
    a, b = mats(*shape)
    f = judge(bsum, torch.mm, a, b)
    assert f.ok, f.message
    assert f.check == "oracle:rounding"
    # the old default: torch's fp32 elementwise tolerance, which an honest reassociation misses
    old = oracles.check_outputs(Oracle(kind="allclose"), bsum(a, b), a @ b, case="c")
    assert not old.ok


@pytest.mark.parametrize("name,fn", [
    ("blocked", lambda a, b: sum(a[:, s:s + 128] @ b[s:s + 128] for s in range(0, a.shape[1], 128))),
    ("split-k", lambda a, b: torch.stack([x @ y for x, y in zip(a.chunk(4, 1), b.chunk(4, 0))]).sum(0)),
    ("reversed", lambda a, b: a.flip(1) @ b.flip(0)),
    ("einsum", lambda a, b: torch.einsum("mk,kn->mn", a, b)),
    ("float64 accumulation", lambda a, b: (a.double() @ b.double()).float()),
])
def test_reassociation_blocking_and_split_k_pass(name, fn):
    a, b = mats(48, 2048, 40, seed=3)
    for base in (torch.mm, bsum):
        f = judge(base, fn, a, b)
        assert f.ok, (name, f.message)


@pytest.mark.parametrize("name,cast", [
    ("tf32", tf32),
    ("bf16", lambda x: x.bfloat16().float()),
    ("fp16", lambda x: x.half().float()),
])
def test_a_downgrade_behind_an_fp32_signature_fails(name, cast):
    a, b = mats(64, 1024, 64, seed=1)
    f = judge(torch.mm, lambda x, y: cast(x) @ cast(y), a, b)
    assert not f.ok, name
    assert f.figure is not None and f.threshold is not None and f.figure > 3 * f.threshold


def test_the_message_states_the_rule_the_figure_and_the_threshold():
    a, b = mats(16, 64, 16)
    f = judge(torch.mm, lambda x, y: x.bfloat16().float() @ y.bfloat16().float(), a, b)
    assert f.message.startswith("rounding rule (against a float64 reference (the baseline on float64 inputs); "
                                "K=64 estimated from shapes): the candidate's worst error ")
    assert (f"allowed F x err_b + (C sqrt(K) u + eps) x max|ref| + D u x max|ref on |inputs|| = "
            f"{rounding.FACTOR:g} x ") in f.message
    assert f"({rounding.BOUND:g} x sqrt(64) x u + eps)" in f.message
    assert f" + {rounding.CANCELLATION:g} x u x " in f.message  # a failure looked for the cancellation term
    assert f.message.endswith(f"= {f.threshold:.3g}")


# --- dtypes and ops without reductions ------------------------------------------------------


def test_elementwise_ops_pass_honest_and_catch_downgrades():
    g = torch.Generator().manual_seed(2)
    x, y, z = (torch.randn(64, 300, generator=g) for _ in range(3))
    base = lambda x, y, z: x * y + z  # noqa: E731
    assert judge(base, lambda x, y, z: torch.addcmul(z, x, y), x, y, z).ok
    assert not judge(base, lambda x, y, z: (x.bfloat16() * y.bfloat16() + z.bfloat16()).float(), x, y, z).ok


def test_integer_and_bool_outputs_must_be_equal():
    x = torch.arange(20)
    assert judge(lambda v: v * 3, lambda v: v + v + v, x).ok
    f = judge(lambda v: v * 3, lambda v: v * 3 + (v == 7).long(), x)
    assert not f.ok and "1 element(s) differ" in f.message
    assert judge(lambda v: v > 3, lambda v: v >= 4, x).ok
    assert not judge(lambda v: v > 3, lambda v: v > 4, x).ok


def test_half_precision_outputs_allow_an_ulp_and_catch_half_precision_accumulation():
    a, b = mats(32, 2048, 32, seed=4)
    a, b = a.bfloat16(), b.bfloat16()
    fp32_acc = lambda x, y: (x.float() @ y.float()).bfloat16()  # noqa: E731
    reassociated = lambda x, y: (x.float().flip(1) @ y.float().flip(0)).bfloat16()  # noqa: E731
    assert judge(fp32_acc, reassociated, a, b).ok

    def bf16_acc(x, y):  # sums in bf16, 64 terms at a time
        acc = torch.zeros(x.shape[0], y.shape[1], dtype=torch.bfloat16)
        for s in range(0, x.shape[1], 64):
            acc = acc + (x[:, s:s + 64].float() @ y[s:s + 64].float()).bfloat16()
        return acc
    assert not judge(fp32_acc, bf16_acc, a, b).ok


def test_non_finite_values():
    r = torch.tensor([1.0, float("nan"), float("inf"), 2.0])
    b = r.float().clone()
    ok = rounding.output_error(0, r, b, b.clone(), 1, "K=1", 4.0)
    assert ok.ok
    nan_missing = b.clone()
    nan_missing[1] = 0.0
    assert not rounding.output_error(0, r, b, nan_missing, 1, "K=1", 4.0).ok
    nan_added = b.clone()
    nan_added[0] = float("nan")
    e = rounding.output_error(0, r, b, nan_added, 1, "K=1", 4.0)
    assert not e.ok and math.isinf(e.err_c)
    # the baseline overflowed where the math did not: the candidate may too, or be right
    r2 = torch.tensor([1.0, 1e40], dtype=torch.float64)
    b2 = torch.tensor([1.0, float("inf")])
    assert rounding.output_error(0, r2, b2, b2.clone(), 1, "K=1", 4.0).ok
    assert not rounding.output_error(0, r2, b2, torch.tensor([1.5, float("inf")]), 1, "K=1", 4.0).ok


# --- the reduction length -------------------------------------------------------------------


def test_reduction_length_estimate_and_declaration():
    a, b = torch.zeros(8, 300), torch.zeros(300, 5)
    assert rounding.reduction_length((a, b), torch.zeros(8, 5))[0] == 300
    x = torch.zeros(4, 6, 7)
    assert rounding.reduction_length((x,), torch.zeros(()))[0] == 168  # a full sum
    assert rounding.reduction_length((x,), torch.zeros(4))[0] == 42
    w = torch.zeros(16, 3, 3, 3)
    k, how = rounding.reduction_length((torch.zeros(2, 3, 32, 32), w), torch.zeros(2, 16, 30, 30),
                                       "inputs[1].shape[1] * inputs[1].shape[2] * inputs[1].shape[-1]")
    assert k == 27 and how == "K=27 declared (inputs[1].shape[1] * inputs[1].shape[2] * inputs[1].shape[-1])"
    with pytest.raises(ValueError, match="no dimension 7"):
        rounding.reduction_length((x,), x, "inputs[0].shape[7]")
    f = oracles.check_outputs(Oracle(reduction="inputs[3].shape[0]"), x, x, case="c", reference64=lambda: x,
                              inputs=(x,))
    assert not f.ok and "oracles[].reduction" in f.message


def test_a_declared_reduction_follows_the_inputs():
    a, b = mats(16, 512, 16)
    spec = Oracle(reduction="inputs[0].shape[1]")
    f = judge(torch.mm, bsum, a, b, spec=spec)
    assert f.ok and "K=512 declared" in f.message


# --- where the float64 reference comes from -------------------------------------------------


def test_the_ladder_takes_the_first_rung_that_runs():
    x = torch.randn(6, 10, dtype=torch.bfloat16)

    def no_float64(v):
        if v.dtype == torch.float64:
            raise RuntimeError("flash attention takes no float64")
        return v.float().softmax(-1).to(v.dtype)

    ladder = rounding.ReferenceLadder(no_float64, (x,))
    out = ladder()
    assert out.dtype == torch.float32 and ladder.how.startswith("float32 reference")
    # fp32 inputs: a float32 "reference" would be the baseline again, so there is none
    with pytest.raises(rounding.ReferenceUnavailable, match="flash attention takes no float64"):
        rounding.ReferenceLadder(no_float64, (x.float(),))()
    named = rounding.ReferenceLadder(no_float64, (x,), named=lambda v: v.softmax(-1))
    assert named().dtype == torch.float64 and "the oracle's function" in named.how


def test_host_rung_for_a_baseline_that_runs_in_float64_only_on_the_cpu(monkeypatch):
    x = torch.randn(4, 4)
    calls = []

    def fn(v):
        calls.append((v.dtype, v.device.type))
        return v * 2

    ladder = rounding.ReferenceLadder(fn, (x,), host=True)
    assert ladder().dtype == torch.float64
    assert calls == [(torch.float64, "cpu")] and "on the CPU" in ladder.how


def test_without_any_reference_the_candidate_is_held_against_the_baseline():
    a, b = mats(16, 256, 16)

    def fp32_only(x, y):
        if x.dtype != torch.float32:
            raise TypeError("a Triton kernel for fp32")
        return x @ y

    f = judge(fp32_only, bsum, a, b)
    assert f.ok and "no reference (ReferenceUnavailable" in f.message and "against the baseline's output" in f.message
    bad = judge(fp32_only, lambda x, y: x.bfloat16().float() @ y.bfloat16().float(), a, b)
    assert not bad.ok


def test_the_oracles_function_names_the_reference():
    x = torch.randn(8, 100)
    spec = Oracle(function="m:ref")
    f = oracles.check_outputs(spec, x.softmax(-1), x.softmax(-1), case="c", inputs=(x,),
                              custom=lambda v: v.softmax(-1))
    assert f.ok and "the oracle's function" in f.message


# --- the manifest ---------------------------------------------------------------------------


def _manifest(**extra):
    raw = {"name": "m", "claim": {"speedup": 1.5}, "baseline": "k:b", "candidate": "k:c",
           "inputs": {"factory": "k:f"}, "cases": [{"name": "c"}], **extra}
    return build(Manifest, raw)


def test_the_default_oracle_is_rounding_and_kernelbench_keeps_its_allclose():
    assert _manifest().oracles == DEFAULT_ORACLES and DEFAULT_ORACLES[0].kind == "rounding"
    kb = build(Manifest, {"name": "m", "claim": {"speedup": 1.5}, "cases": [{"name": "c"}],
                          "kernelbench": {"problem": "p.py", "solution": "s.py", "precision": "fp16"}})
    (o,) = kb.oracles
    assert (o.kind, o.rtol, o.atol) == ("allclose", 1e-2, 1e-2)
    explicit = build(Manifest, {"name": "m", "claim": {"speedup": 1.5}, "cases": [{"name": "c"}],
                                "kernelbench": {"problem": "p.py", "solution": "s.py"},
                                "oracles": [{"kind": "rounding"}]})
    assert explicit.oracles[0].kind == "rounding"


@pytest.mark.parametrize("oracle,key", [
    ({"rtol": 1e-4}, "oracles[0].rtol"),
    ({"kind": "rounding", "max_error": 0.1}, "oracles[0].max_error"),
    ({"kind": "allclose", "factor": 2}, "oracles[0].factor"),
    ({"factor": 0.5}, "oracles[0].factor"),
    ({"kind": "relative_error", "bound": 4}, "oracles[0].bound"),
    ({"bound": 0}, "oracles[0].bound"),
    ({"reduction": "inputs[0].size"}, "oracles[0].reduction"),
])
def test_rounding_settings_are_checked_when_the_manifest_loads(oracle, key):
    with pytest.raises(SchemaError) as e:
        _manifest(oracles=[oracle])
    assert e.value.key == key


def test_factor_bound_and_reduction_reach_the_rule():
    m = _manifest(oracles=[{"factor": 8, "bound": 16, "reduction": "inputs[0].shape[-1] * 2"}])
    (o,) = m.oracles
    assert (o.factor, o.bound, o.reduction) == (8.0, 16.0, "inputs[0].shape[-1] * 2")
    a, b = mats(8, 64, 8)
    f = judge(torch.mm, bsum, a, b, spec=replace(ROUNDING, factor=8.0, bound=16.0))
    assert "= 8 x " in f.message and "(16 x sqrt(64) x u + eps)" in f.message


def test_a_naive_long_sum_of_tiny_terms_needs_a_larger_bound():
    """The stagnation case of the results file: documented, and what `bound` is for."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 16384, generator=g) * 4

    def naive(v):
        e = (v - v.max(1, keepdim=True).values).exp()
        acc = torch.zeros(v.shape[0])
        for k in range(v.shape[1]):
            acc += e[:, k]
        return e / acc[:, None]

    softmax = lambda v: torch.softmax(v, 1)  # noqa: E731
    assert not judge(softmax, naive, x).ok
    assert judge(softmax, naive, x, spec=replace(ROUNDING, bound=16.0)).ok


def test_the_baselines_figures_are_remembered_per_pair_and_give_the_same_answer(monkeypatch):
    """The reference's size and the baseline's error are computed once per (reference,
    baseline) pair: every later candidate output held against the pair gets the same
    figures as a fresh computation, a NaN in the candidate included, and an in-place
    write to the baseline's output voids them."""
    from expkit.checks import chunks, rounding as R

    monkeypatch.setattr(chunks, "HOST_CHUNK", 1000)  # several chunks
    g = torch.Generator().manual_seed(0)
    ref = torch.randn(4096, generator=g, dtype=torch.float64)
    base = (ref + 1e-7 * torch.randn(4096, generator=g, dtype=torch.float64)).float()
    cands = [base + 1e-7, base.clone(), base.clone()]
    cands[2][2500] = float("nan")
    from torch.utils.weak import WeakIdKeyDictionary

    fresh = []
    for c in cands:
        monkeypatch.setattr(R, "_FIGURES", WeakIdKeyDictionary())
        fresh.append(R.output_error(0, ref, base, c, 64, "given", 4.0))
    monkeypatch.setattr(R, "_FIGURES", WeakIdKeyDictionary())
    remembered = [R.output_error(0, ref, base, c, 64, "given", 4.0) for c in cands]
    assert remembered == fresh
    assert R._baseline_figures(ref, base, base.device) == (fresh[0].scale, fresh[0].err_b)
    base.mul_(2.0)  # a new version: the figures no longer hold
    assert R._baseline_figures(ref, base, base.device) is None
    assert R.output_error(0, ref, base, cands[1], 64, "given", 4.0).err_b > fresh[0].err_b


def test_first_failure_stops_at_the_first_chunk_over_the_allowance_and_agrees_on_pass_or_fail(monkeypatch):
    """With the baseline's figures known, ``first_failure`` reads chunks only until one is over
    the allowance: the verdict is the full check's, the error a lower bound of it."""
    from expkit.checks import chunks, rounding as R

    monkeypatch.setattr(chunks, "HOST_CHUNK", 1000)
    g = torch.Generator().manual_seed(1)
    ref = torch.randn(4096, generator=g, dtype=torch.float64)
    base = ref.float()
    R.output_error(0, ref, base, base.clone(), 64, "given", 4.0)  # remembers the pair's figures
    bad = base.clone()
    bad[10] += 0.5  # over the allowance in the first chunk
    bad[3000] += 3.0  # and worse in the fourth
    full = R.output_error(0, ref, base, bad, 64, "given", 4.0)
    quick = R.output_error(0, ref, base, bad, 64, "given", 4.0, first_failure=True)
    assert not full.ok and not quick.ok
    assert quick.err_c == pytest.approx(0.5, rel=1e-3) and full.err_c == pytest.approx(3.0, rel=1e-3)
    good = base + 1e-7
    assert R.output_error(0, ref, base, good, 64, "given", 4.0, first_failure=True) == \
        R.output_error(0, ref, base, good, 64, "given", 4.0)


def test_max_abs_and_its_difference_form():
    from expkit.checks.chunks import max_abs, max_abs_diff

    assert max_abs(torch.tensor([1.0, -3.0, 2.0])) == 3.0
    assert max_abs(torch.tensor([], dtype=torch.float32)) == 0.0
    assert math.isnan(max_abs(torch.tensor([1.0, float("nan")])))
    assert max_abs(torch.tensor([float("-inf"), 1.0])) == math.inf
    assert max_abs(torch.tensor([3 + 4j, 1j])) == pytest.approx(5.0)
    a = torch.tensor([1.0, 2.0 + 2**-20], dtype=torch.float32)
    r = torch.tensor([1.0, 2.0], dtype=torch.float64)
    assert max_abs_diff(a, r) == 2**-20  # taken in float64 by promotion, not rounded to float32


def test_a_broadcast_constant_is_chunked_without_a_copy(monkeypatch):
    from expkit.checks import chunks

    monkeypatch.setattr(chunks, "HOST_CHUNK", 1000)
    big = torch.full((), 7.0).expand(3000, 1000)
    pieces = [p for _, (p,) in chunks.flat_chunks(big)]
    assert len(pieces) == 3000 and all(p.numel() == 1000 and p.stride() == (0,) for p in pieces)
    assert float(pieces[-1].sum()) == 7000.0


# --- cancellation (issue 51): the allowance follows what was combined, not |result| ---------------


def py_loop_sum(x):
    """The issue's baseline: a float64 Python loop, its result rounded once to fp32."""
    total = 0.0
    for v in x.double().tolist():
        total += v
    return torch.tensor(total, dtype=x.dtype)


def test_an_honest_fp32_sum_that_cancels_passes_against_a_float64_loop():
    """randn(10000) whose terms cancel to |sum| = 0.61 (sum |x| = 8010): torch.sum's honest error (3.9e-05) is
    5x what the rule allowed on |result| alone; on the size of what was summed it passes."""
    x = torch.randn(10000, generator=torch.Generator().manual_seed(596))
    r = x.double().sum()
    old = (rounding.BOUND * 100 * rounding.unit_roundoff(torch.float32) + torch.finfo(torch.float32).eps) * abs(r)
    assert abs(float(x.sum().double() - r)) > 4 * old  # the false alarm the old rule raised
    f = judge(py_loop_sum, torch.sum, x)
    assert f.ok, f.message
    assert f"+ D u x max|ref on |inputs|| = " in f.message and f"+ {rounding.CANCELLATION:g} x u x 8.01e+03" in f.message


def test_a_bf16_step_behind_the_same_sum_still_fails():
    x = torch.randn(16, 10000, generator=torch.Generator().manual_seed(596))
    f = judge(lambda t: t.double().sum(1).float(), lambda t: t.bfloat16().float().sum(1), x)
    assert not f.ok and f.figure > 10 * f.threshold, f.message


def test_the_cancellation_term_is_only_for_sums_of_products_of_the_inputs():
    """exp of negative inputs: exp(|x|) is no size of anything summed, and would let garbage
    through; the term is left out and the message says why."""
    x = -50 - torch.rand(64, generator=torch.Generator().manual_seed(1))
    f = judge(torch.exp, lambda t: t.bfloat16().float().exp(), x)
    assert not f.ok and "+ 0 (no cancellation term: the op is not a sum of products" in f.message, f.message
    ref, r1, r2 = x.double().exp(), x.double().abs().exp(), (2 * x.double().abs()).exp()
    assert rounding.combined_magnitude(ref, r1, r2)[0] == 0.0
    a, b = mats(4, 32, 4)
    ref, r1, r2 = a.double() @ b.double(), a.double().abs() @ b.double().abs(), 4 * (a.double().abs() @ b.double().abs())
    assert rounding.combined_magnitude(ref, r1, r2)[0] == pytest.approx(float(r1.max()))


@pytest.fixture(scope="module")
def sweep():
    """benchmarks/cancellation_sweep.py at 1,000 draws per op and dtype (K = 256; 16 outputs
    a draw for the full reductions), and a few draws at the issue's size (K = 10000)."""
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "cancellation_sweep.py"
    spec = importlib.util.spec_from_file_location("cancellation_sweep", path)
    cs = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("cancellation_sweep", cs)  # its dataclasses look their module up there
    spec.loader.exec_module(cs)
    rows = cs.sweep(1000, k=256)
    big = [op for op in cs.OPS if op.name in ("sum", "dot", "cumsum")]
    rows += [r for op in big for n in (1, 16) for r in cs.sweep_op(op, torch.float32, 20, 10000, seed=1, rows=n)]
    return rows


def test_honest_reductions_over_a_thousand_zero_mean_draws_raise_no_false_alarm(sweep):
    honest = [r for r in sweep if r.kind == "honest"]
    assert {r.op for r in honest} == {"sum", "mean", "dot", "matmul", "softmax", "layernorm", "cumsum"}
    assert {r.dtype for r in honest} == {"fp32", "fp16", "bf16"}
    assert all(r.draws >= 1000 for r in honest if r.k == 256)
    alarms = [(r.op, r.dtype, r.variant, r.baseline, r.failed, r.worst) for r in honest if r.failed]
    assert not alarms


def test_a_bf16_or_tf32_step_behind_an_fp32_signature_is_caught_in_every_draw(sweep):
    """Every draw with more than one output; a single scalar sum's cheat error is itself a
    random sum that lands near zero now and then (the issue's size: caught in most draws)."""
    cheats = [r for r in sweep if r.kind == "cheat" and r.dtype == "fp32"]
    assert {r.op for r in cheats} == {"sum", "mean", "dot", "matmul", "softmax", "layernorm", "cumsum"}
    many = [r for r in cheats if math.prod(r.outputs) > 1]
    missed = [(r.op, r.variant, r.baseline, r.k, r.draws - r.failed) for r in many if r.failed < r.draws]
    assert not missed
    scalar = [r for r in cheats if math.prod(r.outputs) == 1]
    assert scalar and all(r.failed >= 0.75 * r.draws for r in scalar), [(r.op, r.variant, r.failed) for r in scalar]


def test_the_reports_line_states_the_rules_default_constants():
    from expkit.report.run_report import ORACLE_RULE

    defaults = (f"F = {rounding.FACTOR:g}, C = {rounding.BOUND:g}, D = {rounding.CANCELLATION:g}")
    assert defaults in ORACLE_RULE and "max|ref on |inputs||" in ORACLE_RULE
