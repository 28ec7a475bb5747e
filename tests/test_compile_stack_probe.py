"""benchmarks/probes/compile_stack_cuda.py: what torch.compile's stack touches on import, run on the CPU."""

import os
import subprocess
import sys

from repo_scripts import ROOT


def _probe(*args: str) -> str:
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "probes" / "compile_stack_cuda.py"), "--imports",
                          "--modules", "torch._inductor.compile_fx", *args],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def test_it_names_what_was_imported_first_and_counts_the_threads_around_each_import():
    text = _probe("--preload", "torch.profiler,no_such_module")
    assert "## importing torch._inductor.compile_fx" in text
    assert "imported first: torch.profiler,no_such_module; native threads " in text  # a missing one is skipped
    assert "torch._inductor.compile_fx: native threads " in text


def test_by_default_the_worker_servers_preload_is_imported_first():
    assert "imported first: the worker server preload;" in _probe()


def test_a_module_that_cannot_be_imported_is_one_line():
    """Without --imports too: the probe's one mode is its default."""
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "probes" / "compile_stack_cuda.py"),
                          "--modules", "no_such_stack_module", "--preload", ""],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0 and "Traceback" not in out.stdout + out.stderr
    assert "no_such_stack_module: cannot be imported here (ModuleNotFoundError" in out.stdout


def test_a_thread_an_import_starts_is_named(tmp_path):
    (tmp_path / "starts_a_thread.py").write_text(
        "import threading, time\nthreading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "probes" / "compile_stack_cuda.py"),
                          "--modules", "starts_a_thread", "--preload", ""],
                         capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    line = next(x for x in out.stdout.splitlines() if x.startswith("starts_a_thread: native threads "))
    before, after = line.split("native threads ")[1].split(" (")[0].split(" -> ")
    assert int(after) == int(before) + 1 and "(new: " in line, line
