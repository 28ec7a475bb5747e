"""expkit.checks.trace: parsing real torch.profiler chrome traces and capturing new ones.

The fixtures under tests/data/traces/ were recorded on an H100 by
scripts/record_trace_fixtures.py (each carries an ``expkit_fixture`` note: GPU,
driver, torch, date) and trimmed to the events the parser reads; the values asserted
here are the ones CUPTI wrote there.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from expkit.checks.recording import capture
from expkit.checks.trace import (HARNESS_MARKER, KernelEvent, OpEvent, Trace, kernel_qualified_name,
                          kernel_short_name, parse_chrome_trace)

TRACES = Path(__file__).parent / "data" / "traces"
GPU_FIXTURES = ("attn_basic_k128", "attn_vectorized_k384", "sdpa_fp16", "sdpa_cudnn_fp16", "side_stream_mm")


def load(name: str) -> Trace:
    return parse_chrome_trace(TRACES / f"{name}.json")


# --- the recorded fixtures ---------------------------------------------------------


@pytest.mark.parametrize("name", GPU_FIXTURES + ("cpu_only",))
def test_fixture_is_small_and_says_where_it_came_from(name):
    path = TRACES / f"{name}.json"
    assert path.stat().st_size < 50_000
    note = json.loads(path.read_text())["expkit_fixture"]
    assert note["gpu"] and note["driver"] and note["date"] and note["name"] == name
    assert load(name).meta["expkit_fixture"]["gpu"] == note["gpu"]


@pytest.mark.parametrize("name", GPU_FIXTURES)
def test_harness_marker_gives_the_stream_and_leaves_the_trace(name):
    trace = load(name)
    assert trace.on_gpu
    assert trace.harness_stream == 7  # CUPTI's id of the legacy default stream in these recordings
    assert HARNESS_MARKER not in trace.op_names()
    assert "aten::fill_" not in trace.op_names()  # the marker's own op went with it
    assert not any("FillFunctor" in k.name for k in trace.kernels)


@pytest.mark.parametrize("name, op, kernel, grid, block, regs, smem", [
    ("attn_basic_k128", "expkit_examples::attn_basic", "attn_basic_k128", (8192, 1, 1), (128, 1, 1), 16, 0),
    ("attn_vectorized_k384", "expkit_examples::attn_vectorized", "attn_vectorized_k384",
     (683, 1, 1), (384, 1, 1), 16, 6144),
])
def test_custom_op_kernels(name, op, kernel, grid, block, regs, smem):
    trace = load(name)
    assert trace.op_names(top_level=True) == (op,)
    (k,) = trace.kernels
    assert k.short_name == kernel and k.name.startswith(kernel + "(")
    assert (k.grid, k.block, k.registers_per_thread, k.shared_memory) == (grid, block, regs, smem)
    assert k.stream == 7 and k.device == 0 and k.correlation is not None and k.dur_us > 0
    (top,) = trace.top_level_ops()
    # The kernel was launched straight from the custom op (pybind, no aten op between).
    assert k.external_id == top.external_id
    assert trace.kernels_of_op(top, nested=False) == (k,)
    assert trace.op_of_kernel(k) == top


def test_sdpa_kernel_links_to_the_innermost_op_and_through_nesting_to_the_top():
    trace = load("sdpa_fp16")
    (top,) = trace.top_level_ops()
    assert top.name == "aten::scaled_dot_product_attention"
    assert "aten::_scaled_dot_product_cudnn_attention" in trace.op_names()
    (k,) = trace.kernels
    assert k.short_name.startswith("cudnn_generated_fort_native_sdpa_sm90_flash_fprop")
    assert (k.grid, k.block, k.registers_per_thread, k.shared_memory) == ((64, 1, 1), (384, 1, 1), 168, 134144)
    assert trace.op_of_kernel(k).name == "aten::_cudnn_attention_forward"
    assert trace.kernels_of_op(top, nested=False) == ()
    assert trace.kernels_of_op(top) == (k,)
    assert trace.root_of(trace.op_of_kernel(k)) == top
    # memset records are a category of their own, not kernels
    assert all(not k.name.startswith("Memset") for k in trace.kernels)


def test_side_stream_kernel_keeps_its_stream():
    trace = load("side_stream_mm")
    assert trace.op_names(top_level=True) == ("aten::matmul",)
    (k,) = trace.kernels
    assert k.stream == 29 != trace.harness_stream
    assert trace.op_of_kernel(k).name == "aten::mm"
    assert k.grid == (8, 16, 1) and k.block == (128, 1, 1)


def test_cpu_only_recording_on_a_gpu_machine_is_not_a_gpu_trace():
    trace = load("cpu_only")
    # kineto writes device properties and CUDA versions whatever was recorded ...
    assert trace.device_properties and trace.meta["cuda_runtime_version"]
    assert not trace.on_gpu and trace.kernels == ()  # ... so they must not decide this
    raw = json.loads((TRACES / "cpu_only.json").read_text())
    del raw["expkit_activities"]  # a trace expkit did not record: inferred from the events
    assert not parse_chrome_trace(raw).on_gpu
    raw = json.loads((TRACES / "sdpa_fp16.json").read_text())
    del raw["expkit_activities"]
    assert parse_chrome_trace(raw).on_gpu
    assert trace.harness_stream is None
    assert [o.name for o in trace.top_level_ops()] == ["expkit_examples::attn_passthrough"]
    depth = {o.name: o.depth for o in trace.ops}
    assert depth["aten::scaled_dot_product_attention"] == 1
    assert depth["aten::_scaled_dot_product_flash_attention_for_cpu"] == 2


# --- tolerance to what kineto does or does not write ------------------------------------


def _op(name, ts, dur, ext, cat="cpu_op", tid=1):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur,
            "args": {"External id": ext}}


def test_bookkeeping_is_dropped_and_nesting_recomputed():
    data = {"traceEvents": [
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}},
        _op("ProfilerStep#3", 0, 100, 1, cat="user_annotation"),
        {"ph": "X", "cat": "python_function", "name": "test.py(12): f", "pid": 1, "tid": 1, "ts": 1, "dur": 90},
        _op("my::op", 2, 50, 2),
        _op("aten::mm", 3, 40, 3),
        _op("my::label", 60, 10, 4, cat="user_annotation"),
        {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": 5, "s": "t"},
        {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 3, "pid": 1, "tid": 1, "ts": 3},
    ]}
    trace = parse_chrome_trace(data)
    assert [(o.name, o.depth) for o in trace.ops] == [("my::op", 0), ("aten::mm", 1), ("my::label", 0)]
    assert trace.op_names(top_level=True) == ("my::op", "my::label")
    assert not trace.on_gpu


def test_missing_and_new_optional_fields():
    data = {"traceEvents": [
        _op("aten::mm", 10, 5, 7),
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 11, "dur": 1,
         "args": {"External id": 7, "correlation": 99}},
        # no External id (linked through the launch record's correlation), a 1-D block,
        # newer kineto's optional fields, no registers / shared memory at all
        {"ph": "X", "cat": "kernel", "name": "void ns::gemm<float>(float*)", "pid": 0, "tid": 13, "ts": 12,
         "dur": 3, "args": {"correlation": 99, "grid": [4], "block": [256], "graph id": 2, "priority": 0,
                            "occupancy": {"activeBlocksPerMultiprocessor": 2, "limitingFactors": ["regs"]}}},
        # a kernel with no args at all
        {"ph": "X", "cat": "kernel", "name": "bare", "pid": 0, "tid": 13, "ts": 20, "dur": 1},
    ]}
    trace = parse_chrome_trace(data)
    assert trace.on_gpu
    gemm, bare = trace.kernels
    assert gemm.external_id == 7 and trace.op_of_kernel(gemm).name == "aten::mm"
    assert (gemm.grid, gemm.block) == ((4, 1, 1), (256, 1, 1))
    assert gemm.registers_per_thread is None and gemm.shared_memory is None
    assert gemm.stream == 13 and gemm.device == 0  # fall back to tid / pid
    assert bare.block == () and bare.external_id is None and trace.op_of_kernel(bare) is None


def test_older_lowercase_external_id_is_read():
    data = {"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 0, "dur": 5,
         "args": {"external id": 4}},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 1,
         "args": {"external id": 4, "stream": 7, "block": [32, 1, 1], "grid": [1, 1, 1]}},
    ]}
    trace = parse_chrome_trace(data)
    assert trace.kernels_of_op(trace.ops[0]) == trace.kernels


def test_gzip_and_path_inputs(tmp_path):
    import gzip

    raw = (TRACES / "attn_basic_k128.json").read_text()
    gz = tmp_path / "t.json.gz"
    with gzip.open(gz, "wt") as f:
        f.write(raw)
    assert parse_chrome_trace(gz) == parse_chrome_trace(str(TRACES / "attn_basic_k128.json"))


@pytest.mark.parametrize("name, short, qualified", [
    ("attn_basic_k128(float const*, float*, float, int)", "attn_basic_k128", "attn_basic_k128"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >"
     "(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)",
     "vectorized_elementwise_kernel", "at::native::vectorized_elementwise_kernel"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float>(float*, float const*, int)",
     "cunn_SoftMaxForward", "at::native::{anonymous}::cunn_SoftMaxForward"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0",
     "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0",
     "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0"),
])
def test_kernel_names(name, short, qualified):
    assert kernel_short_name(name) == short
    assert kernel_qualified_name(name) == qualified


def test_events_are_frozen():
    trace = load("attn_basic_k128")
    with pytest.raises(AttributeError):
        trace.kernels[0].block = (384, 1, 1)  # type: ignore[misc]
    assert isinstance(trace.ops[0], OpEvent) and isinstance(trace.kernels[0], KernelEvent)


# --- capture ------------------------------------------------------------------------


@torch.library.custom_op("expkit_trace_test::scaled_softmax", mutates_args=())
def _scaled_softmax(x: torch.Tensor) -> torch.Tensor:
    return (x * 0.5).softmax(-1)


def test_capture_cpu_shows_the_custom_op_by_its_qualified_name():
    calls = []
    x = torch.randn(4, 8)

    def fn():
        calls.append(1)
        return torch.ops.expkit_trace_test.scaled_softmax(x)

    out, trace = capture(fn, cuda=False)
    assert len(calls) == 1
    torch.testing.assert_close(out, (x * 0.5).softmax(-1))
    assert trace.op_names(top_level=True) == ("expkit_trace_test::scaled_softmax",)
    (top,) = trace.top_level_ops()
    assert {"aten::mul", "aten::softmax"} <= {o.name for o in trace.descendants(top)}
    assert not trace.on_gpu and trace.kernels == () and trace.harness_stream is None
    assert "traceName" not in trace.meta  # the temp file is gone and not referenced


def test_capture_deletes_its_temp_file(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    capture(lambda: torch.ones(2) + 1, cuda=False)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_capture_cuda_records_kernels_and_the_harness_stream():
    a = torch.randn(256, 256, device="cuda")
    _, trace = capture(lambda: a @ a, cuda=True)
    assert trace.on_gpu and trace.harness_stream is not None
    assert trace.kernels and all(k.stream == trace.harness_stream for k in trace.kernels)
    assert all(k.block and k.grid for k in trace.kernels)
    (top,) = trace.top_level_ops()
    assert trace.kernels_of_op(top) == trace.kernels


def test_the_entry_spin_is_recorded_again_longer_when_the_call_outlasts_it(monkeypatch):
    # The join marker must be launched while the entry spin still runs, or an unjoined
    # side stream's kernels finish before it starts and read as ordered (the H100's
    # side_stream_late, 2026-11-23).
    from expkit.checks import recording

    seen = []
    host = iter([0.010, 0.001])  # a 10 ms call against a ~1 ms spin, then covered

    def once(fn, *, cuda, spin_cycles):
        seen.append(spin_cycles)
        return "out", {}, next(host)

    monkeypatch.setattr(recording, "record_once", once)
    result, raw = recording.record_chrome_trace(lambda: None, cuda=True)
    assert result == "out" and seen[0] == recording.ENTRY_SPIN_CYCLES
    assert seen[1] == int(4 * 0.010 * recording.MAX_SM_HZ)
    assert raw["expkit_entry_spin"]["covered"] and len(seen) == 2
    seen.clear()
    host = iter([0.0])
    recording.record_chrome_trace(lambda: None, cuda=False)
    assert len(seen) == 1  # no spin without CUDA: one recording
