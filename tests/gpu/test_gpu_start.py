"""How a GPU run's workers start (run on a CUDA GPU).

A fresh process that imported torch has the CUDA driver library mapped on a GPU machine
but has not initialised it: its workers fork from it, and use CUDA. One that called
``torch.cuda.is_available()`` has initialised it: its workers come from the fork server.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
ROOT = Path(__file__).resolve().parents[2]


def _python(code: str, *args: str, timeout: float = 120) -> str:
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout,
                         cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.strip().splitlines()[-1]


def test_the_driver_says_whether_this_process_initialised_it():
    code = ("from expkit.bench.processes import fork_safety as f; before = f.cuda_initialised(); import torch; "
            "torch.cuda.is_available(); print(before, f.cuda_initialised(), f._driver_loaded() is not None)")
    assert _python(code) == "False True True"


def test_a_cli_run_on_the_gpu_forks_its_workers_and_they_use_cuda(tmp_path):
    out = tmp_path / "honest"
    proc = subprocess.run([sys.executable, "-m", "expkit", "run", str(ROOT / "manifests/examples/gpu/honest.yaml"),
                           "measure=quick", "--out", str(out), "--quiet"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    result = json.loads((out / "result.json").read_text())
    d = result["defences"]
    assert d["start_method"] == "fork", d["start_method"]
    assert set(d["replicate_start_methods"]) == {"fork"}, d["replicate_start_methods"]
    assert proc.returncode == 0 and result["verdict"] == "supported", (result["reasons"], proc.stderr[-2000:])
    assert result["environment"]["gpu"]


def test_an_api_run_from_a_script_that_imported_the_bench_first_forks_its_workers(tmp_path):
    """``expkit.api.run`` in a script whose first import is ``expkit.bench``: pandas, loaded
    by the run after the bench counted its threads, brought pyarrow's jemalloc thread
    (fork_safety_2ea6229.txt)."""
    code = ("import json, sys; from expkit.bench.sides import endpoint; from expkit import api; "
            "api.run(sys.argv[1], out=sys.argv[2], overrides=['measure=quick'], plots=False); "
            "d = json.load(open(sys.argv[2] + '/result.json'))['defences']; "
            "print(json.dumps([d['start_method'], sorted(set(d['replicate_start_methods']))]))")
    got = json.loads(_python(code, str(ROOT / "manifests/examples/gpu/honest.yaml"), str(tmp_path / "api"),
                             timeout=300))
    assert got == ["fork", ["fork"]], got


def test_a_gpu_runs_preload_imports_cupti_and_caches_tritons_key_without_initialising_cuda():
    """Each GPU worker paid 0.19-0.21 s importing cupti-python and each Triton candidate's
    0.40 s hashing Triton's installation (evidence/harness-cost/gpu-worker-preload); the process the
    workers fork from now does both once, and stays fit to fork from."""
    code = ("import sys; from expkit.bench.sides import endpoint as e; from expkit.bench.processes import fork_safety as f; e.warm_up_forkserver('auto', 'cuda'); "
            "import torch; from triton.runtime.cache import triton_key; "
            "from expkit.bench.processes.gpu_preload import WARMED; "
            "print('cupti.cupti' in sys.modules, triton_key.cache_info().currsize, torch.cuda.is_initialized(), "
            "f.cuda_initialised(), f.fork_is_safe(), sorted(k for k, v in WARMED.items() if isinstance(v, float)))")
    assert _python(code) == "True 1 False False True ['cupti', 'triton_key']"


def test_a_suite_servers_preload_imports_the_compile_stack_without_starting_the_driver():
    """The suite's fork server imports torch.compile's stack and stays fit to fork workers that
    use CUDA (imported plainly, or under torch's NVML check, the stack's own availability check
    started a driver thread: evidence/harness-cost/compiled-warm-start); what the stack decided
    from the stand-in's answer is what it decides in a process that asked the driver, and no
    module kept the stand-in."""
    probe = ("import torch._inductor.runtime.benchmarking as b; "
             "print(getattr(b, 'use_experimental_benchmarker', None))")
    code = ("import importlib, sys, types, torch; from expkit.suites.manifest_process import PRELOAD; "
            "[importlib.import_module(m) for m in PRELOAD]; from expkit.bench.processes import fork_safety as f; "
            "from expkit.bench.processes.compile_stack import IMPORTED, STACK; "
            "held = [n for n, m in list(sys.modules.items()) for v in list(getattr(m, '__dict__', {}).values()) "
            "        if isinstance(v, types.FunctionType) and v.__qualname__ == '_stand_in.<locals>.is_available']; "
            "print(sorted(k for k, v in IMPORTED.items() if isinstance(v, float)) == sorted(STACK), held, "
            "torch.cuda.is_initialized(), f.cuda_initialised(), f.fork_is_safe(), "
            "getattr(sys.modules['torch._inductor.runtime.benchmarking'], 'use_experimental_benchmarker', None))")
    plain = _python("import torch; torch.cuda.is_available(); " + probe)
    assert _python(code) == f"True [] False False True {plain}"


def test_a_cpu_calls_drain_leaves_cuda_uninitialised_on_a_gpu_host():
    """A CPU run's workers on a GPU host used to create a CUDA context to drain a device they
    never used (evidence/harness-cost/relay-on-16-cores/requests-16core)."""
    code = ("import torch; from expkit.checks import preflight; "
            "out = preflight.call_synced(lambda a: a @ a, (torch.ones(64, 64),)); "
            "print(float(out[0, 0]), torch.cuda.is_available(), torch.cuda.is_initialized())")
    assert _python(code) == "64.0 True False"


def test_a_suite_runs_manifest_process_forks_its_own_workers(tmp_path):
    """A suite's (or an audit's) manifest process is forked from the suite's fork server: it
    is as fit to fork as that server, so every pair of its run forks from it. Before, it took
    its own main thread for one started since torch was imported, started a fork server of
    its own (importing torch again) and every pair came from there."""
    # A pattern makes `expkit run` a suite, of this one manifest.
    proc = subprocess.run([sys.executable, "-m", "expkit", "run", str(ROOT / "manifests/examples/gpu/hones[t].yaml"),
                           "measure=quick", "--out", str(tmp_path / "suite"), "--quiet"],
                          capture_output=True, text=True, timeout=400, cwd=ROOT)
    results = sorted((tmp_path / "suite").glob("*/result.json"))
    assert results, (proc.returncode, proc.stderr[-2000:])
    for path in results:
        d = json.loads(path.read_text())["defences"]
        assert (d["start_method"], sorted(set(d["replicate_start_methods"]))) == ("fork", ["fork"]), \
            (path.parent.name, d["start_method"], d["replicate_start_methods"])
