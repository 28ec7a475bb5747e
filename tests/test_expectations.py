"""expkit.checks.expectations: each check passes on the right trace and fails, with a message
naming expected and observed, on the wrong one.

GPU cases read the real H100 traces in tests/data/traces/ (see test_trace.py); CPU
cases capture live traces of custom ops defined here under a test-only namespace.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from expkit.core.errors import ExpkitError
from expkit.checks.expectations import (Finding, baseline_fingerprint, check_expectations, matches_kernel,
                                 matches_op)
from expkit.manifest import Expect, LaunchExpect
from expkit.checks.recording import capture
from expkit.checks.trace import KernelEvent, OpEvent, Trace, parse_chrome_trace

TRACES = Path(__file__).parent / "data" / "traces"


def load(name: str) -> Trace:
    return parse_chrome_trace(TRACES / f"{name}.json")


def by_check(findings, check):
    return [f for f in findings if f.check == check]


def failed(findings):
    return [f for f in findings if not f.ok]


VECTORIZED = Expect(must_run=("attn_vectorized*",),
                    launch=(LaunchExpect("attn_vectorized*", block=(384, 1, 1)),))


# --- GPU: the regression story ---------------------------------------------------------


def test_intended_kernel_passes_every_check():
    findings = check_expectations(VECTORIZED, load("attn_vectorized_k384"), load("sdpa_fp16"))
    assert [f.check for f in findings] == ["identity", "forbidden", "launch", "stream"]
    assert failed(findings) == []
    assert "attn_vectorized_k384" in by_check(findings, "launch")[0].message


def test_old_kernel_ran_instead():
    findings = check_expectations(VECTORIZED, load("attn_basic_k128"), load("sdpa_fp16"))
    (identity,) = by_check(findings, "identity")
    assert not identity.ok
    assert identity.message == ("expected kernel matching `attn_vectorized*` with block [384,1,1]; "
                                "ran `attn_basic_k128` with block [128,1,1]")
    (launch,) = by_check(findings, "launch")
    assert not launch.ok and launch.message == identity.message
    assert by_check(findings, "stream")[0].ok and by_check(findings, "forbidden")[0].ok


def test_right_name_wrong_block():
    expect = Expect(launch=(LaunchExpect("attn_vectorized*", block=(128,)),))
    (launch,) = by_check(check_expectations(expect, load("attn_vectorized_k384"), load("sdpa_fp16")), "launch")
    assert not launch.ok
    assert launch.message == ("expected kernel matching `attn_vectorized*` with block [128,1,1]; "
                              "ran `attn_vectorized_k384` with block [384,1,1]")


def test_grid_registers_and_shared_memory_limits():
    cand, base = load("attn_vectorized_k384"), load("sdpa_fp16")

    def launch(**kw):
        expect = Expect(launch=(LaunchExpect("attn_vectorized_k384", block=(384, 1, 1), **kw),))
        return by_check(check_expectations(expect, cand, base), "launch")[0]

    over = launch(max_shared_memory=4096)
    assert not over.ok
    assert over.message == ("expected kernel matching `attn_vectorized_k384` with block [384,1,1], "
                            "shared memory <= 4096 B; ran `attn_vectorized_k384` with block [384,1,1], "
                            "shared memory 6144 B")
    assert launch(max_shared_memory=6144).ok
    assert not launch(max_registers=8).ok and "16 registers/thread" in launch(max_registers=8).message
    assert launch(max_registers=16).ok
    wrong_grid = launch(grid=(682, 1, 1))
    assert not wrong_grid.ok and "grid [682,1,1]" in wrong_grid.message and "grid [683,1,1]" in wrong_grid.message
    assert launch(grid=(683,), max_shared_memory=8192, max_registers=32).ok


@pytest.mark.parametrize("sdpa", ["sdpa_fp16", "sdpa_cudnn_fp16"])
def test_block_384_of_sdpa_is_not_the_claimed_kernel(sdpa):
    trace = load(sdpa)
    # the precondition that makes this test mean something: SDPA really ran 384 threads
    assert any(k.block == (384, 1, 1) for k in trace.kernels)
    findings = check_expectations(VECTORIZED, trace, load("attn_basic_k128"))
    assert not by_check(findings, "identity")[0].ok
    (launch,) = by_check(findings, "launch")
    assert not launch.ok
    assert "`cudnn_generated_fort_native_sdpa_sm90_flash_fprop" in launch.message
    assert "with block [384,1,1]" in launch.message
    # ... while the same block under SDPA's own name is found: only the name was missing
    own = Expect(launch=(LaunchExpect("cudnn_generated_*sdpa*", block=(384, 1, 1)),))
    assert by_check(check_expectations(own, trace, trace), "launch")[0].ok


def test_passthrough_to_the_baseline_is_forbidden_on_gpu():
    sdpa = load("sdpa_fp16")
    (forbidden,) = by_check(check_expectations(Expect(), sdpa, sdpa), "forbidden")
    assert not forbidden.ok
    # on the GPU what ran is compared: the kernel, not the op's name (issue 51)
    assert "baseline op `aten::scaled_dot_product_attention`" not in forbidden.message
    assert "; reuse judged by kernels, each by its full demangled name (a GPU trace)" in forbidden.message
    assert ("baseline kernel `cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_"
            "4x1x1_cga1x1x1_kernel0_0` ran in the candidate (launched by `aten::_cudnn_attention_forward` "
            "under `aten::scaled_dot_product_attention`)") in forbidden.message
    allowed = Expect(allow=("aten::scaled_dot_product_attention", "cudnn_generated_*"))
    assert by_check(check_expectations(allowed, sdpa, sdpa), "forbidden")[0].ok


def test_side_stream_is_named_with_both_streams():
    trace = load("side_stream_mm")
    (stream,) = by_check(check_expectations(Expect(), trace, load("sdpa_fp16")), "stream")
    assert not stream.ok
    assert stream.message == ("kernel `sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x64x8_stage3_warpsize2x2x1_"
                              "ffma_aligna4_alignc4_execute_kernel__5x_cublas` ran on stream 29; "
                              "the harness times stream 7")
    # an explicit harness stream wins over the marker's
    assert by_check(check_expectations(Expect(), trace, trace, harness_stream=29), "stream")[0].ok
    assert by_check(check_expectations(Expect(same_stream=False), trace, trace), "stream") == []


def test_unknown_harness_stream_is_not_a_pass():
    t = load("attn_basic_k128")
    bare = Trace(t.ops, t.kernels, t.device_properties, {"activities": ("cpu", "cuda")})
    (stream,) = by_check(check_expectations(Expect(), bare, bare), "stream")
    assert not stream.ok and "unknown" in stream.message


def test_gpu_trace_without_kernels_fails_launch():
    empty = Trace((OpEvent("my::noop", 1, 0.0, 1.0, 1, 0),), (), (), {"activities": ("cpu", "cuda"),
                                                                          "harness_stream": 7})
    findings = check_expectations(VECTORIZED, empty, empty)
    (launch,) = by_check(findings, "launch")
    assert not launch.ok and "ran no kernel" in launch.message
    assert not by_check(findings, "identity")[0].ok


def test_must_not_run_on_gpu_matches_kernels_too():
    expect = Expect(must_not_run=("*sdpa*",), forbid_baseline=False)
    (f, _stream) = check_expectations(expect, load("sdpa_fp16"), load("sdpa_fp16"))
    assert f.check == "forbidden" and not f.ok and "kernel `cudnn_generated" in f.message
    assert check_expectations(expect, load("attn_basic_k128"), load("sdpa_fp16"))[0].ok


# --- CPU: live captures of custom ops ---------------------------------------------------


@torch.library.custom_op("expkit_expect_test::attn_basic", mutates_args=())
def _attn_basic(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    scores = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5
    return scores.softmax(-1) @ v


@torch.library.custom_op("expkit_expect_test::attn_passthrough", mutates_args=())
def _attn_passthrough(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v)


@pytest.fixture(scope="module")
def cpu_traces():
    q, k, v = (torch.randn(1, 2, 16, 8) for _ in range(3))
    return {
        "baseline": capture(lambda: F.scaled_dot_product_attention(q, k, v), cuda=False)[1],
        "basic": capture(lambda: torch.ops.expkit_expect_test.attn_basic(q, k, v), cuda=False)[1],
        "passthrough": capture(lambda: torch.ops.expkit_expect_test.attn_passthrough(q, k, v), cuda=False)[1],
    }


def test_cpu_wrong_op_names_what_ran(cpu_traces):
    expect = Expect(must_run=("expkit_expect_test::attn_vectorized",))
    (identity, forbidden, _stream) = check_expectations(expect, cpu_traces["basic"], cpu_traces["baseline"])
    assert not identity.ok
    assert identity.message == ("expected op matching `expkit_expect_test::attn_vectorized`; "
                                "ran `expkit_expect_test::attn_basic`")
    assert forbidden.ok  # the honest op shares aten::matmul/softmax with SDPA's insides, not its identity


def test_cpu_passthrough_is_caught_and_allow_lifts_it(cpu_traces):
    expect = Expect(must_run=("expkit_expect_test::*",))
    findings = check_expectations(expect, cpu_traces["passthrough"], cpu_traces["baseline"])
    assert by_check(findings, "identity")[0].ok  # the wrapper's name alone proves nothing ...
    (forbidden,) = by_check(findings, "forbidden")  # ... the baseline under it does
    assert not forbidden.ok
    assert forbidden.message == ("baseline op `aten::scaled_dot_product_attention` ran in the candidate "
                                 "(under `expkit_expect_test::attn_passthrough`); reuse judged by op names "
                                 "(no kernel recorded)")
    allowed = Expect(must_run=("expkit_expect_test::*",), allow=("re:^aten::scaled_dot",))
    assert failed(check_expectations(allowed, cpu_traces["passthrough"], cpu_traces["baseline"])) == []


def test_cpu_must_not_run_regex(cpu_traces):
    expect = Expect(must_not_run=("re:^aten::_scaled_dot_product_",), forbid_baseline=False)
    (bad, _) = check_expectations(expect, cpu_traces["passthrough"], cpu_traces["baseline"])
    assert not bad.ok and "`aten::_scaled_dot_product_flash_attention_for_cpu`" in bad.message
    assert "(under `expkit_expect_test::attn_passthrough`)" in bad.message
    (good, _) = check_expectations(expect, cpu_traces["basic"], cpu_traces["baseline"])
    assert good.ok


def test_cpu_launch_and_stream_are_not_applicable(cpu_traces):
    findings = check_expectations(VECTORIZED, cpu_traces["basic"], cpu_traces["baseline"])
    for f in by_check(findings, "launch") + by_check(findings, "stream"):
        assert f.ok and f.message.startswith("not applicable")
    # the recorded CPU-only fixture (taken on a GPU machine) reads the same way
    cpu_fixture = load("cpu_only")
    for f in by_check(check_expectations(VECTORIZED, cpu_fixture, cpu_fixture), "launch"):
        assert f.ok and "not applicable" in f.message
    # CPU must_run looks at ops only, and so does its message
    (identity,) = by_check(findings, "identity")
    assert identity.message == "expected op matching `attn_vectorized*`; ran `expkit_expect_test::attn_basic`"


# --- the baseline fingerprint and pattern matching -----------------------------------------


def _trace(top_ops, nested=(), kernels=(), gpu=False):
    ops = []
    for i, name in enumerate(top_ops):
        ops.append(OpEvent(name, i + 1, i * 100.0, 50.0, 1, 0))
    for j, name in enumerate(nested):  # nested under the first top-level op
        ops.append(OpEvent(name, 100 + j, 1.0 + j, 1.0, 1, 1))
    ks = tuple(KernelEvent(n, (1, 1, 1), (128, 1, 1), 32, 0, 7, None, 1, 0.0, 1.0, 0) for n in kernels)
    return Trace(tuple(ops), ks, (), {"activities": ("cpu", "cuda") if gpu else ("cpu",), "harness_stream": 7})


def test_structural_ops_are_not_the_baselines_work():
    base = _trace(["aten::zeros", "aten::contiguous", "aten::empty_like", "aten::transpose", "aten::mm"],
                  kernels=["void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float> >(int)",
                           "void at::native::elementwise_kernel<128, 4, at::native::direct_copy_kernel_cuda>(int)",
                           "ampere_sgemm_128x64_nn"], gpu=True)
    ops, kernels = baseline_fingerprint(base)
    assert ops == ("aten::mm",)
    assert kernels == ("ampere_sgemm_128x64_nn",)
    # only the top level: a nested aten::mm in the baseline is an implementation detail
    assert baseline_fingerprint(_trace(["my::fused"], nested=["aten::mm"]))[0] == ("my::fused",)
    honest = _trace(["my::kernel"], nested=["aten::zeros", "aten::contiguous", "aten::empty_like"])
    assert check_expectations(Expect(), honest, base)[0].ok
    cheat = _trace(["my::kernel"], nested=["aten::zeros", "aten::mm"])
    (f, _) = check_expectations(Expect(), cheat, base)
    assert not f.ok and f.message == ("baseline op `aten::mm` ran in the candidate (under `my::kernel`); "
                                      "reuse judged by op names (no kernel recorded)")


def test_vacuous_fingerprint_says_so():
    base = _trace(["aten::zeros", "aten::clone"])
    (f, _) = check_expectations(Expect(), _trace(["aten::clone"]), base)
    assert f.ok and "vacuous" in f.message
    assert by_check(check_expectations(Expect(forbid_baseline=False), base, base), "forbidden") == []


def test_pattern_matching():
    name = "void ns::attn_vectorized_k384<64>(float4 const*, float4*)"
    assert matches_kernel("attn_vectorized*", name)
    assert matches_kernel("ns::attn_vectorized_k384", name)
    assert matches_kernel("re:vectorized_k\\d+<", name)
    assert not matches_kernel("Attn_vectorized*", name)  # case-sensitive
    assert not matches_kernel("attn_basic*", name)
    assert matches_op("expkit_examples::*", "expkit_examples::attn_basic")
    assert not matches_op("attn_basic", "expkit_examples::attn_basic")  # ops by qualified name
    with pytest.raises(ExpkitError, match="not a valid regular expression"):
        matches_op("re:attn(", "x")


def test_findings_are_frozen():
    f = Finding("identity", True, "ok")
    with pytest.raises(AttributeError):
        f.ok = False  # type: ignore[misc]


def _side_stream_with_markers(spin_end: float, join_start: float) -> Trace:
    """The side-stream matmul (its kernel runs 786349.352-786405.352 in the trace's
    microseconds, on stream 29) with the two markers capture() now records on stream 7:
    the entry marker's spin ending at ``spin_end`` and the join marker starting at
    ``join_start``."""
    import copy
    import json

    from expkit.checks.trace import HARNESS_JOIN

    raw = copy.deepcopy(json.loads((TRACES / "side_stream_mm.json").read_text()))
    base = 4393516000000.0
    raw["traceEvents"] += [
        # torch.cuda._sleep's spin is no dispatcher op: its kernel carries no External id and
        # belongs to the entry marker by its launch record (thread 395, inside the marker's span)
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": base + 786000.0, "dur": 5.0,
         "pid": 395, "tid": 395, "args": {"correlation": 9000}},
        {"ph": "X", "cat": "kernel", "name": "spin_kernel(long)", "ts": base + spin_end - 1000.0, "dur": 1000.0,
         "pid": 0, "tid": 7, "args": {"stream": 7, "correlation": 9000}},
        {"ph": "X", "cat": "user_annotation", "name": HARNESS_JOIN, "ts": base + 786360.0, "dur": 30.0,
         "pid": 395, "tid": 395, "args": {"External id": 9001}},
        {"ph": "X", "cat": "kernel", "name": "fill_kernel", "ts": base + join_start, "dur": 1.0,
         "pid": 0, "tid": 7, "args": {"External id": 9001, "stream": 7, "correlation": 9002}},
    ]
    return parse_chrome_trace(raw)


def test_a_library_stream_ordered_with_the_callers_is_in_the_call():
    # cuDNN's grouped convolutions run kernels on streams of their own, joined to the
    # caller's at both ends: KernelBench level-1 problem 72 was `invalid` on an H100 for it.
    t = _side_stream_with_markers(spin_end=786340.0, join_start=786410.0)
    assert t.harness_stream == 7 and t.meta["entry_end_us"] < t.meta["join_start_us"]
    assert [k.name for k in t.kernels if "spin" in k.name or "fill" in k.name] == []  # markers dropped
    (stream,) = by_check(check_expectations(Expect(), t, t), "stream")
    assert stream.ok and "1 of 1 candidate kernel(s) ran on stream(s) 29, each ordered" in stream.message


@pytest.mark.parametrize("spin_end, join_start, why", [
    (786360.0, 786410.0, "started during the entry spin: it did not wait for the caller's stream"),
    (786340.0, 786400.0, "still ran when the join marker started: the caller's stream did not wait for it"),
])
def test_a_side_stream_unordered_at_either_end_is_caught(spin_end, join_start, why):
    t = _side_stream_with_markers(spin_end, join_start)
    (stream,) = by_check(check_expectations(Expect(), t, t), "stream")
    assert not stream.ok, why
    assert "ran on stream 29; the harness times stream 7, unordered with it" in stream.message


# --- GPU: the reuse rule compares what ran (issue 51) ---------------------------------------

DGEMM = "void gemm_kernel<double, double, double, 128, 64>(double const*, double const*, double*)"
SGEMM = "void gemm_kernel<float, float, float, 128, 64>(float const*, float const*, float*)"


def test_on_gpu_a_shared_op_name_is_not_reuse_when_the_kernels_differ():
    """The issue's fp32 candidate against an fp64 reference: both call ``aten::matmul``; a
    DGEMM and an SGEMM are different work (here they differ only by their template's dtype)."""
    base = _trace(["aten::matmul"], kernels=[DGEMM], gpu=True)
    cand = _trace(["aten::matmul"], kernels=[SGEMM], gpu=True)
    (f, *_) = by_check(check_expectations(Expect(), cand, base), "forbidden")
    assert f.ok, f.message
    assert f.message == ("none of the baseline's 1 kernel(s) ran in the candidate; reuse judged by kernels, "
                         "each by its full demangled name (a GPU trace)")


def test_on_gpu_a_candidate_that_launches_the_baselines_kernel_is_still_caught():
    base = _trace(["aten::matmul"], kernels=[DGEMM], gpu=True)
    cand = _trace(["my::wrapper"], nested=["aten::mm"], kernels=[DGEMM], gpu=True)
    (f, *_) = by_check(check_expectations(Expect(), cand, base), "forbidden")
    assert not f.ok and "baseline kernel `gemm_kernel` ran in the candidate" in f.message
    assert "; reuse judged by kernels, each by its full demangled name (a GPU trace)" in f.message


def test_on_cpu_the_op_name_rule_stays_and_says_so():
    base = _trace(["aten::matmul"])
    cand = _trace(["aten::matmul"])
    (f, *_) = by_check(check_expectations(Expect(), cand, base), "forbidden")
    assert not f.ok and f.message.startswith("baseline op `aten::matmul` ran in the candidate")
    assert f.message.endswith("; reuse judged by op names (no kernel recorded)")


def test_on_gpu_a_baseline_with_only_structural_kernels_falls_back_to_op_names():
    fill = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float> >(int)"
    base = _trace(["aten::matmul"], kernels=[fill], gpu=True)
    (f, *_) = by_check(check_expectations(Expect(), _trace(["aten::matmul"], kernels=[SGEMM], gpu=True), base),
                       "forbidden")
    assert not f.ok and f.message.endswith("; reuse judged by op names (no kernel recorded)")


# Recorded on an H200 (tests/data/traces/gemm_record_log.txt): one torch call, different kernels.
SAME_CALL = [("gemm_fp64_of_fp32", "gemm_fp32"),  # DGEMM reference, SGEMM candidate
             ("gemm_fp32_of_fp16", "gemm_fp16")]  # SGEMM reference, HGEMM candidate


@pytest.mark.parametrize("base,cand", SAME_CALL)
def test_recorded_gemms_in_another_dtype_through_the_same_call_are_not_reuse(base, cand):
    b, c = load(base), load(cand)
    assert baseline_fingerprint(b)[0] == ("aten::matmul",) and "aten::matmul" in [o.name for o in c.ops]
    (f,) = by_check(check_expectations(Expect(), c, b), "forbidden")
    assert f.ok and f.message.endswith("reuse judged by kernels, each by its full demangled name (a GPU trace)")


@pytest.mark.parametrize("base,cand", [("gemm_fp64_of_fp32", "gemm_fp64_of_fp32"), ("gemm_fp32_of_fp16", "gemm_fp32")])
def test_recorded_gemms_that_launch_the_baselines_kernel_are_reuse(base, cand):
    """The baseline itself, and an fp32 product whose SGEMM is the one the fp16 reference runs."""
    (f,) = by_check(check_expectations(Expect(), load(cand), load(base)), "forbidden")
    assert not f.ok and "baseline kernel `sm" in f.message and "reuse judged by kernels" in f.message


def test_without_kernels_the_same_recorded_pair_is_judged_by_op_name():
    from dataclasses import replace

    cpu = lambda t: replace(t, kernels=(), meta={**t.meta, "activities": ("cpu",)})  # noqa: E731
    (f,) = by_check(check_expectations(Expect(), cpu(load("gemm_fp32")), cpu(load("gemm_fp64_of_fp32"))),
                    "forbidden")
    assert not f.ok and f.message.startswith("baseline op `aten::matmul` ran in the candidate")
    assert f.message.endswith("reuse judged by op names (no kernel recorded)")


# --- a manifest that names nothing the candidate must run (issue 51) ---------------------------------------------


def test_no_must_run_is_a_passing_identity_finding_that_says_the_kernel_was_not_identified():
    from expkit.checks.expectations import unidentified

    f = unidentified(Expect(), on_gpu=False)
    assert f is not None and f.check == "identity" and f.ok and not f.invalidates and f.case is None
    assert f.message.startswith("not checked: the intended kernel was not identified: the manifest names no "
                                "expect.must_run")
    assert unidentified(Expect(must_run=("x::y",)), on_gpu=False) is None
    launch = Expect(launch=(LaunchExpect("k*", block=(128, 1, 1)),))
    assert unidentified(launch, on_gpu=True) is None  # a GPU's launch check names the kernel
    assert unidentified(launch, on_gpu=False) is not None  # on the CPU it checks nothing
