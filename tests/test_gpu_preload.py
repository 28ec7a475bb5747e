"""The GPU preload: what the process the workers fork from does once for a GPU run.

On the CPU machine cupti-python and Triton are absent; stand-ins on the path show the
mechanism: a forked worker inherits the imported module and Triton's cached key, so its
own first call is a cache hit (on an H200 host each worker had spent 0.19-0.21 s and
0.40 s on them: evidence/harness-cost/gpu-worker-preload; the GPU test is in tests/gpu/test_gpu_start.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from expkit.bench.sides import preload

ROOT = Path(__file__).resolve().parents[1]

TRITON_CACHE = '''
import functools
CALLS = []

@functools.lru_cache(None)
def triton_key():
    CALLS.append(1)
    return "key"
'''


def _run(code: str, path: Path) -> str:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(path), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip().splitlines()[-1]


def test_only_a_gpu_run_preloads_the_gpu_libraries():
    assert preload.preload_for("cpu") == preload.PRELOAD
    assert "expkit.bench.processes.gpu_preload" not in preload.PRELOAD
    assert preload.preload_for("cuda") == preload.PRELOAD + ["expkit.bench.processes.gpu_preload"]


def test_a_forked_worker_inherits_the_cached_key_and_the_imported_module(tmp_path):
    (tmp_path / "triton" / "runtime").mkdir(parents=True)
    for d in ("triton", "triton/runtime", "cupti"):
        (tmp_path / d).mkdir(exist_ok=True)
        (tmp_path / d / "__init__.py").write_text("")
    (tmp_path / "triton" / "runtime" / "cache.py").write_text(TRITON_CACHE)
    (tmp_path / "cupti" / "cupti.py").write_text("")
    code = ("import os, sys; import expkit.bench.processes.gpu_preload as g; from triton.runtime import cache; "
            "pid = os.fork()\n"
            "if pid == 0:\n"
            "    cache.triton_key(); i = cache.triton_key.cache_info()\n"
            "    print(sorted(g.WARMED), 'cupti.cupti' in sys.modules, i.hits, i.misses, len(cache.CALLS),"
            " flush=True)\n"
            "    os._exit(0)\n"
            "os.waitpid(pid, 0)")
    assert _run(code, tmp_path) == "['cupti', 'triton_key'] True 1 1 1"


def test_missing_libraries_are_skipped_with_the_reason(tmp_path):
    for name in ("triton", "cupti"):  # stand-ins that fail as a missing library does, even where one is installed
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f"raise ImportError('no {name} here')")
    code = "from expkit.bench.processes.gpu_preload import WARMED; print(WARMED['cupti'], '|', WARMED['triton_key'])"
    assert _run(code, tmp_path) == "skipped: ImportError | skipped: ImportError"


def test_a_triton_without_a_cached_key_is_left_alone(tmp_path):
    (tmp_path / "triton" / "runtime").mkdir(parents=True)
    for d in ("triton", "triton/runtime"):
        (tmp_path / d / "__init__.py").write_text("")
    (tmp_path / "triton" / "runtime" / "cache.py").write_text("CALLS = []\ndef triton_key():\n    CALLS.append(1)\n")
    code = ("from expkit.bench.processes.gpu_preload import WARMED; from triton.runtime import cache; "
            "print(WARMED['triton_key'], len(cache.CALLS))")
    assert _run(code, tmp_path) == "skipped: not cached by this Triton 0"
