"""Record the real torch.profiler traces that tests/test_trace.py and
tests/test_expectations.py read, trimmed to the events expkit's parser uses.

Usage (on a machine with a CUDA GPU, nvcc and ninja):

    python scripts/record_trace_fixtures.py OUT_DIR [--gemm]

Writes into OUT_DIR:

* ``attn_basic_k128.json`` / ``attn_vectorized_k384.json`` -- two toy CUDA kernels
  built with ``torch.utils.cpp_extension.load_inline`` (CuPy as fallback where the
  build fails), launched with 128 and 384 threads per block from the custom ops
  ``expkit_examples::attn_basic`` and ``expkit_examples::attn_vectorized``. They stand
  in for the regression story's old and "vectorized" kernels: both scale a float
  tensor; the 384-thread one loads float4 through 6144 B of static shared memory, so
  launch checks on shared memory have something to read. What they compute does not
  matter here, only their names and launch configuration.
* ``sdpa_fp16.json`` -- ``F.scaled_dot_product_attention`` in fp16 with torch's own
  backend choice; ``sdpa_cudnn_fp16.json`` -- the same forced onto the cuDNN backend.
  (Recorded 2026-11-21 on an H100 with torch 2.11.0+cu130, both ran the same cuDNN
  kernel with block [384,1,1]; on other versions the default may pick another.)
* ``side_stream_mm.json`` -- a matmul on a side stream, not joined to the current one.
* ``cpu_only.json`` -- a CPU-only recording (``activities=[CPU]``) of a custom op that
  passes through to SDPA.
* ``record_log.txt`` -- what ran and what was kept (the 2026-11-21 one is kept
  beside the fixtures).

With ``--gemm`` it records only these (issue 51: one torch call, different kernels), and
its log goes to ``gemm_record_log.txt``:

* ``gemm_fp64_of_fp32.json`` -- ``(a.double() @ b.double()).float()`` on fp32 1024x1024
  inputs (a DGEMM); ``gemm_fp32.json`` -- ``a @ b`` on the same (an SGEMM);
* ``gemm_fp32_of_fp16.json`` -- ``(a.float() @ b.float()).half()`` on fp16 inputs;
  ``gemm_fp16.json`` -- ``a @ b`` on them (an HGEMM).

Each trace is recorded with :func:`expkit.checks.recording.record_chrome_trace` (so the harness
stream marker is in it, as in real use), after a warm-up call, then trimmed: kept are
the trace's top-level version fields and ``deviceProperties`` of the device used, and
the ``"ph": "X"`` events of categories ``cpu_op``, ``user_annotation``, ``kernel``,
``gpu_memcpy``, ``gpu_memset``, plus ``cuda_runtime``/``cuda_driver`` launch records
of kept kernels. Values and field names are left as kineto wrote them. A top-level
``expkit_fixture`` note records the GPU, driver, torch version and date.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from expkit.checks.recording import record_chrome_trace  # noqa: E402

KEEP_CATEGORIES = ("cpu_op", "user_annotation", "kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")
KEEP_TOP_KEYS = ("schemaVersion", "cuda_runtime_version", "cuda_driver_version", "cupti_version",
                 "displayTimeUnit", "baseTimeNanoseconds", "expkit_activities")
MAX_BYTES = 50_000

CUDA_SRC = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void attn_basic_k128(const float* __restrict__ x, float* __restrict__ y, float scale, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] * scale;
}

__global__ void attn_vectorized_k384(const float4* __restrict__ x, float4* __restrict__ y, float scale, int n4) {
  __shared__ float4 stage[384];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n4) stage[threadIdx.x] = x[i];
  __syncthreads();
  if (i < n4) {
    float4 v = stage[threadIdx.x];
    v.x *= scale; v.y *= scale; v.z *= scale; v.w *= scale;
    y[i] = v;
  }
}

torch::Tensor attn_basic(torch::Tensor x, double scale) {
  auto y = torch::empty_like(x);
  int n = (int)x.numel();
  attn_basic_k128<<<(n + 127) / 128, 128, 0, at::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), y.data_ptr<float>(), (float)scale, n);
  return y;
}

torch::Tensor attn_vectorized(torch::Tensor x, double scale) {
  auto y = torch::empty_like(x);
  int n4 = (int)(x.numel() / 4);
  attn_vectorized_k384<<<(n4 + 383) / 384, 384, 0, at::cuda::getCurrentCUDAStream()>>>(
      reinterpret_cast<const float4*>(x.data_ptr<float>()), reinterpret_cast<float4*>(y.data_ptr<float>()),
      (float)scale, n4);
  return y;
}
"""
CPP_SRC = """
torch::Tensor attn_basic(torch::Tensor x, double scale);
torch::Tensor attn_vectorized(torch::Tensor x, double scale);
"""

CUPY_SRC = r"""
extern "C" __global__ void attn_basic_k128(const float* x, float* y, float scale, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] * scale;
}
extern "C" __global__ void attn_vectorized_k384(const float4* x, float4* y, float scale, int n4) {
  __shared__ float4 stage[384];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n4) stage[threadIdx.x] = x[i];
  __syncthreads();
  if (i < n4) { float4 v = stage[threadIdx.x]; v.x *= scale; v.y *= scale; v.z *= scale; v.w *= scale; y[i] = v; }
}
"""

LOG: list = []


def log(*parts: object) -> None:
    line = " ".join(str(p) for p in parts)
    LOG.append(line)
    print(line, flush=True)


def build_kernels():
    """Return (basic, vectorized, method): callables ``f(x, scale) -> y``."""
    try:
        from torch.utils.cpp_extension import load_inline

        major, minor = torch.cuda.get_device_capability()
        os.environ.setdefault("TORCH_CUDA_ARCH_LIST", f"{major}.{minor}")
        mod = load_inline("expkit_fixture_kernels", cpp_sources=CPP_SRC, cuda_sources=CUDA_SRC,
                          functions=["attn_basic", "attn_vectorized"], verbose=False,
                          extra_cuda_cflags=["-O2"])
        return mod.attn_basic, mod.attn_vectorized, "torch.utils.cpp_extension.load_inline"
    except Exception:  # noqa: BLE001 -- a build failure falls back to CuPy
        log("load_inline failed, falling back to CuPy:\n" + traceback.format_exc(limit=3))
    import cupy

    module = cupy.RawModule(code=CUPY_SRC)
    kb, kv = module.get_function("attn_basic_k128"), module.get_function("attn_vectorized_k384")

    def run(kernel, threads, per_thread):
        def f(x, scale):
            y = torch.empty_like(x)
            n = x.numel() // per_thread
            with cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
                kernel(((n + threads - 1) // threads,), (threads,),
                       (cupy.asarray(x), cupy.asarray(y), cupy.float32(scale), cupy.int32(n)))
            return y
        return f

    return run(kb, 128, 1), run(kv, 384, 4), "cupy.RawModule"


def define_ops(basic, vectorized) -> None:
    @torch.library.custom_op("expkit_examples::attn_basic", mutates_args=())
    def attn_basic(x: torch.Tensor) -> torch.Tensor:
        return basic(x, 0.5)

    @torch.library.custom_op("expkit_examples::attn_vectorized", mutates_args=())
    def attn_vectorized(x: torch.Tensor) -> torch.Tensor:
        return vectorized(x, 0.5)

    @torch.library.custom_op("expkit_examples::attn_passthrough", mutates_args=())
    def attn_passthrough(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v)


def driver_version() -> str:
    try:
        import pynvml

        pynvml.nvmlInit()
        v = pynvml.nvmlSystemGetDriverVersion()
        return v.decode() if isinstance(v, bytes) else str(v)
    except Exception:  # noqa: BLE001
        import subprocess

        try:
            return subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                  capture_output=True, text=True, timeout=20).stdout.strip()
        except Exception:  # noqa: BLE001
            return "unknown"


def trim(raw: dict, note: dict) -> dict:
    events = [e for e in raw.get("traceEvents", []) if e.get("ph") == "X"]
    kernels = [e for e in events if e.get("cat") in KEEP_CATEGORIES]
    corrs = {(e.get("args") or {}).get("correlation") for e in kernels if e.get("cat") == "kernel"}
    launches = [e for e in events if e.get("cat") in LAUNCH_CATEGORIES
                and (e.get("args") or {}).get("correlation") in corrs]
    kept = sorted(kernels + launches, key=lambda e: float(e.get("ts", 0)))
    dev = torch.cuda.current_device() if torch.cuda.is_available() else None
    props = [p for p in raw.get("deviceProperties", []) or [] if dev is None or p.get("id") == dev]
    out = {"expkit_fixture": note}
    out.update({k: raw[k] for k in KEEP_TOP_KEYS if k in raw})
    out["deviceProperties"] = props
    out["traceEvents"] = kept
    return out


def save(out_dir: Path, name: str, raw: dict, note: dict) -> None:
    data = trim(raw, note)
    text = json.dumps(data, indent=1)
    if len(text) > MAX_BYTES:
        text = json.dumps(data, separators=(",", ":"))
    path = out_dir / f"{name}.json"
    path.write_text(text)
    cats: dict = {}
    for e in data["traceEvents"]:
        cats[e.get("cat")] = cats.get(e.get("cat"), 0) + 1
    log(f"wrote {path.name}: {len(text)} bytes, events {cats}")
    for e in data["traceEvents"]:
        if e.get("cat") == "kernel":
            a = e.get("args", {})
            log(f"   kernel {e['name'][:90]!r} grid={a.get('grid')} block={a.get('block')} "
                f"regs={a.get('registers per thread')} smem={a.get('shared memory')} stream={a.get('stream')} "
                f"ext={a.get('External id')}")


def main() -> int:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    out_dir = Path(args[0] if args else "tests/data/traces")
    out_dir.mkdir(parents=True, exist_ok=True)
    if not torch.cuda.is_available():
        log("no CUDA device: nothing recorded")
        return 1
    base_note = {
        "gpu": torch.cuda.get_device_name(),
        "driver": driver_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "recorded_by": "scripts/record_trace_fixtures.py",
    }
    log("device:", base_note)

    def record(name: str, fn, *, cuda: bool = True, what: str = "") -> None:
        try:
            fn()  # warm-up: lazy init, autotuning, handle creation stay out of the trace
            torch.cuda.synchronize()
            _, raw = record_chrome_trace(fn, cuda=cuda)
            save(out_dir, name, raw, dict(base_note, name=name, what=what,
                                          activities=["cpu", "cuda"] if cuda else ["cpu"]))
        except Exception:  # noqa: BLE001 -- record what we can
            log(f"FAILED {name}:\n" + traceback.format_exc(limit=4))

    if "--gemm" in sys.argv:
        return record_gemms(out_dir, record)

    try:
        basic, vectorized, method = build_kernels()
        define_ops(basic, vectorized)
        base_note["kernels_built_with"] = method
        log("kernels built with", method)
        x = torch.randn(1 << 20, device="cuda")
        record("attn_basic_k128", lambda: torch.ops.expkit_examples.attn_basic(x),
               what="custom op expkit_examples::attn_basic launching attn_basic_k128, block 128")
        record("attn_vectorized_k384", lambda: torch.ops.expkit_examples.attn_vectorized(x),
               what="custom op expkit_examples::attn_vectorized launching attn_vectorized_k384, block 384")
    except Exception:  # noqa: BLE001
        log("FAILED kernels:\n" + traceback.format_exc(limit=4))
        define_ops(lambda x, s: x * s, lambda x, s: x * s)

    q, k, v = (torch.randn(2, 8, 512, 64, device="cuda", dtype=torch.float16) for _ in range(3))
    record("sdpa_fp16", lambda: F.scaled_dot_product_attention(q, k, v),
           what="F.scaled_dot_product_attention fp16 (2,8,512,64), default backend choice")
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        def cudnn_sdpa():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(q, k, v)

        record("sdpa_cudnn_fp16", cudnn_sdpa,
               what="F.scaled_dot_product_attention fp16 (2,8,512,64) forced onto SDPBackend.CUDNN_ATTENTION")
    except Exception:  # noqa: BLE001
        log("FAILED sdpa_cudnn_fp16:\n" + traceback.format_exc(limit=4))

    a, b = (torch.randn(1024, 1024, device="cuda") for _ in range(2))
    side = torch.cuda.Stream()

    def side_mm():
        with torch.cuda.stream(side):
            return a @ b  # deliberately not joined back to the current stream

    record("side_stream_mm", side_mm, what="a @ b (fp32 1024x1024) on a side torch.cuda.Stream, no wait_stream")

    qc, kc, vc = (t.float().cpu() for t in (q, k, v))
    record("cpu_only", lambda: torch.ops.expkit_examples.attn_passthrough(qc, kc, vc), cuda=False,
           what="activities=[CPU] only: custom op expkit_examples::attn_passthrough calling SDPA on CPU fp32")

    (out_dir / "record_log.txt").write_text("\n".join(LOG) + "\n")
    return 0


def record_gemms(out_dir: Path, record) -> int:
    a32, b32 = (torch.randn(1024, 1024, device="cuda") for _ in range(2))
    a16, b16 = a32.half(), b32.half()
    record("gemm_fp64_of_fp32", lambda: (a32.double() @ b32.double()).float(),
           what="(a.double() @ b.double()).float(), fp32 1024x1024 inputs: a DGEMM")
    record("gemm_fp32", lambda: a32 @ b32, what="a @ b, fp32 1024x1024: an SGEMM")
    record("gemm_fp32_of_fp16", lambda: (a16.float() @ b16.float()).half(),
           what="(a.float() @ b.float()).half(), fp16 1024x1024 inputs: an SGEMM")
    record("gemm_fp16", lambda: a16 @ b16, what="a @ b, fp16 1024x1024: an HGEMM")
    (out_dir / "gemm_record_log.txt").write_text("\n".join(LOG) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
