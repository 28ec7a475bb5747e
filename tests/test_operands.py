"""The forbidden-baseline rule over the baseline's whole op tree (checks/operands.py, expectations.py).

Both directions: a candidate that reaches an inner op of the baseline on the baseline's
own operands is caught, whatever it is wrapped in; an honest candidate that runs the same
op on values of its own (the blocks of a blocked product, a reassociated chain) is not.
Live CPU traces of ops defined here under a test-only namespace, plus hand-made traces
for the framework labels torch.compile and autograd add.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from expkit.bench.processes.traces import trace_from_dict, trace_to_dict
from expkit.checks.expectations import baseline_calls, baseline_fingerprint, check_expectations
from expkit.checks.operands import HELD, MADE, NONE, Operand, OpCall, calls_of, is_dispatcher_op
from expkit.checks.recording import capture
from expkit.checks.trace import OpEvent, Trace
from expkit.manifest import Expect

Tensor = torch.Tensor


@torch.library.custom_op("expkit_operands_test::reach_mm", mutates_args=())
def _reach_mm(a: Tensor, b: Tensor) -> Tensor:
    """Cheat: the baseline's inner op, reached by name."""
    return getattr(torch.ops.aten, "mm")(a, b)


@torch.library.custom_op("expkit_operands_test::clone_mm", mutates_args=())
def _clone_mm(a: Tensor, b: Tensor) -> Tensor:
    """Cheat: copies first, so no operand is the input tensor itself."""
    return torch.ops.aten.mm(a.clone(), b.contiguous().clone())


@torch.library.custom_op("expkit_operands_test::mm_out", mutates_args=())
def _mm_out(a: Tensor, b: Tensor) -> Tensor:
    """Cheat: the out= variant passes one more operand."""
    out = torch.empty(a.shape[0], b.shape[1])
    torch.mm(a, b, out=out)
    return out.clone()


@torch.library.custom_op("expkit_operands_test::blocked", mutates_args=())
def _blocked(a: Tensor, b: Tensor) -> Tensor:
    """Honest: aten::mm on 64-wide blocks of the inner dimension, summed."""
    acc = torch.zeros(a.shape[0], b.shape[1])
    for s in range(0, a.shape[1], 64):
        acc += torch.mm(a[:, s:s + 64].contiguous(), b[s:s + 64].contiguous())
    return acc


@torch.library.custom_op("expkit_operands_test::chain_right", mutates_args=())
def _chain_right(a: Tensor, b: Tensor, x: Tensor) -> Tensor:
    """Honest: A @ (B @ X), all square but X; the same op and shapes as (A @ B) @ X's."""
    return torch.mm(a, torch.mm(b, x))


def traces():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(32, 256, generator=g), torch.randn(256, 16, generator=g)
    sq = [torch.randn(64, 64, generator=g) for _ in range(2)] + [torch.randn(64, 8, generator=g)]
    cap = lambda fn, *xs: capture(lambda: fn(*xs), cuda=False)[1]  # noqa: E731
    return {
        "matmul": cap(torch.matmul, a, b),
        "reach": cap(torch.ops.expkit_operands_test.reach_mm, a, b),
        "clone": cap(torch.ops.expkit_operands_test.clone_mm, a, b),
        "out": cap(torch.ops.expkit_operands_test.mm_out, a, b),
        "blocked": cap(torch.ops.expkit_operands_test.blocked, a, b),
        "left": cap(lambda p, q, r: (p @ q) @ r, *sq),
        "right": cap(torch.ops.expkit_operands_test.chain_right, *sq),
    }


@pytest.fixture(scope="module")
def tr():
    return traces()


def forbidden(cand: Trace, base: Trace, expect: Expect = Expect()):
    (f,) = [f for f in check_expectations(expect, cand, base) if f.check == "forbidden"]
    return f


def test_every_op_call_is_recorded_with_its_operands(tr):
    calls = calls_of(tr["matmul"].meta)
    assert calls is not None
    mm = [c for c in calls if c.name == "aten::mm"]
    assert mm and not mm[0].outermost and mm[0].within == ("aten::matmul",)
    assert mm[0].operands == (Operand(HELD, (32, 256), "torch.float32"), Operand(HELD, (256, 16), "torch.float32"))
    (top,) = [c for c in calls if c.outermost]
    assert top.name == "aten::matmul"


@pytest.mark.parametrize("cheat", ["reach", "clone", "out"])
def test_an_inner_op_of_the_baseline_on_its_operands_is_forbidden(tr, cheat):
    f = forbidden(tr[cheat], tr["matmul"])
    assert not f.ok
    assert "the baseline's call `aten::mm` on its own operands (held (32, 256) float32, held (256, 16) float32" \
        in f.message
    assert "ran in the candidate (under `expkit_operands_test::" in f.message
    assert f.message.endswith("lists the op under expect.allow")
    assert forbidden(tr[cheat], tr["matmul"], Expect(allow=("aten::mm",))).ok


def test_an_honest_blocked_product_shares_the_op_but_not_the_call(tr):
    assert [c for c in calls_of(tr["blocked"].meta) if c.name == "aten::mm"]
    f = forbidden(tr["blocked"], tr["matmul"])
    assert f.ok, f.message
    assert "its 2 call(s) on its own operands" in f.message  # aten::matmul and the aten::mm in it


def test_a_reassociated_square_chain_is_not_the_baselines_chain(tr):
    f = forbidden(tr["right"], tr["left"])
    assert f.ok, f.message


def test_allowing_an_outer_op_allows_what_it_runs(tr):
    # both sides enter through aten::matmul; allowing it must lift the aten::mm inside too
    assert not forbidden(tr["matmul"], tr["matmul"]).ok
    assert forbidden(tr["matmul"], tr["matmul"], Expect(allow=("aten::matmul",))).ok
    assert baseline_calls(tr["matmul"], ("aten::matmul",)) == ()


def test_the_calls_cross_the_channel(tr):
    again = trace_from_dict(trace_to_dict(tr["reach"]))
    assert calls_of(again.meta) == calls_of(tr["reach"].meta)
    assert not forbidden(again, trace_from_dict(trace_to_dict(tr["matmul"]))).ok


# --- labels, framework spans and fake tensors ---------------------------------------------


def test_dispatcher_ops_and_labels():
    assert is_dispatcher_op("aten::mm") and is_dispatcher_op("adv::gemv") and is_dispatcher_op("aten::add.Tensor")
    for label in ("TorchDynamo Cache Lookup", "Torch-Compiled Region: 0/0", "CompiledFunction",
                  "autograd::engine::evaluate_function: MmBackward0", "## Call CompiledFxGraph f ##",
                  "expkit::harness_stream_marker extra", "dynamo", "_compile.compile_inner (dynamo_timed)"):
        assert not is_dispatcher_op(label), label


def _ev(name, t, dur, depth, tid=1, cat="cpu_op"):
    return OpEvent(name, None, float(t), float(dur), tid, depth)


def test_framework_spans_are_not_the_baselines_work():
    """Regression (audits): the spans torch.compile and autograd put around work became forbidden."""
    base = Trace((
        _ev("TorchDynamo Cache Lookup", 0, 1, 0),
        _ev("Torch-Compiled Region: 0/0", 2, 50, 0),
        _ev("CompiledFunction", 3, 40, 1),
        _ev("aten::mm", 4, 10, 2),
        _ev("autograd::engine::evaluate_function: MmBackward0", 60, 20, 0),
        _ev("aten::mm", 61, 10, 1),
    ), (), (), {"activities": ("cpu",)})
    ops, _ = baseline_fingerprint(base)
    assert ops == ("aten::mm",)  # the outermost dispatcher op under the labels
    honest_compiled = Trace((_ev("TorchDynamo Cache Lookup", 0, 1, 0), _ev("Torch-Compiled Region: 0/0", 2, 50, 0),
                             _ev("CompiledFunction", 3, 40, 1), _ev("my::fused", 4, 10, 2)), (), (),
                            {"activities": ("cpu",)})
    assert forbidden(honest_compiled, base).ok


def test_fake_tensor_ops_compute_nothing():
    """Regression (audits, torch.compile): Dynamo tracing on fake tensors inside a profiled call
    looked like the baseline's ops."""
    fake = (Operand(NONE, (8, 8), "torch.float32"),) * 2
    held = (Operand(HELD, (8, 8), "torch.float32"),) * 2
    base = Trace((), (), (), {"activities": ("cpu",), "calls": [
        OpCall("aten::mul", held, True, "aten::mul").to_plain()]})
    cand = Trace((), (), (), {"activities": ("cpu",), "calls": [
        OpCall("aten::mul", fake, True, "dynamo", 1).to_plain(),
        OpCall("my::op", (Operand(MADE, (8,), "torch.float32"),), True, "my::op").to_plain()]})
    assert forbidden(cand, base).ok
    real = Trace((), (), (), {"activities": ("cpu",), "calls": [OpCall("aten::mul", held, False, "my::op").to_plain()]})
    f = forbidden(real, base)
    assert not f.ok and f.message == ("baseline op `aten::mul` ran in the candidate (under `my::op`); "
                                      "reuse judged by op names (no kernel recorded)")


def test_a_baseline_with_labels_only_around_sdpa_still_forbids_sdpa():
    q = k = v = torch.randn(1, 2, 8, 4)

    def labelled():
        with torch.profiler.record_function("my baseline"):
            return F.scaled_dot_product_attention(q, k, v)

    base = capture(labelled, cuda=False)[1]
    assert "aten::scaled_dot_product_attention" in baseline_fingerprint(base)[0]


@torch.library.custom_op("expkit_operands_test::fused_softmax", mutates_args=())
def _fused_softmax(x: Tensor) -> Tensor:
    """What a compiler's generated kernel would be: one op, no aten op on the inputs."""
    out = torch.empty_like(x)
    out.copy_(x.softmax(-1).contiguous())
    return out


def _fusing_backend(gm, example_inputs):
    """A torch.compile backend that traces the graph (Dynamo's fake-tensor ops) and runs one fused op."""
    return lambda *args: (torch.ops.expkit_operands_test.fused_softmax(args[-1]),)


def test_a_recompile_inside_the_profiled_call_is_not_the_baselines_work():
    """Regression (audits, torch.compile): the preflight's poison turns deterministic mode on,
    Dynamo guards on it, and the first call without it recompiles; where that call was the
    profiled one, Dynamo's tracing ops (on fake tensors, under `dynamo`) looked like the
    baseline's ops. The bench now profiles a warm call; the rule holds even where it did not."""

    def manual_softmax(x):
        e = torch.exp(x - x.amax(dim=-1, keepdim=True))
        return e / e.sum(dim=-1, keepdim=True)

    compiled = torch.compile(manual_softmax, backend=_fusing_backend, dynamic=False)
    x = torch.randn(8, 32)
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        compiled(x)  # compiled under the poison's deterministic mode
    finally:
        torch.use_deterministic_algorithms(was)
    cand = capture(lambda: compiled(x), cuda=False)[1]  # recompiles here, under the profiler
    traced = [c for c in calls_of(cand.meta) if c.name == "aten::exp"]
    assert traced and all(not c.computes for c in traced)  # Dynamo's tracing, on fake tensors
    base = capture(lambda: manual_softmax(x), cuda=False)[1]  # eager: aten::exp, sum, div at the top
    assert "aten::exp" in baseline_fingerprint(base)[0]
    f = forbidden(cand, base)
    assert f.ok, f.message


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_op_tree_rule_on_the_gpu():
    """Device storages are classed as on the CPU; the kernel rule comes on top."""
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(256, 512, generator=g, device="cuda")
    b = torch.randn(512, 128, generator=g, device="cuda")
    base = capture(lambda: torch.matmul(a, b), cuda=True)[1]
    cheat = capture(lambda: torch.ops.aten.mm(a.clone(), b.clone()), cuda=True)[1]
    honest = capture(lambda: sum(torch.mm(a[:, s:s + 128], b[s:s + 128]) for s in range(0, 512, 128)),
                     cuda=True)[1]
    kernels_aside = Expect(allow=("re:^(?!aten::)",))  # every kernel allowed: the op rule alone
    f = forbidden(cheat, base, kernels_aside)
    assert not f.ok and "the baseline's call `aten::mm` on its own operands" in f.message
    h = forbidden(honest, base, kernels_aside)
    assert h.ok, h.message
