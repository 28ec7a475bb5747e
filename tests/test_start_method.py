"""How a worker process starts: fork only from a process that can fork safely.

The live GPU case (a test session whose ``skipif`` called ``torch.cuda.is_available()``,
then a run in that process) is ``tests/test_pytest_plugin.py``'s GPU test; here the
seams: the process's memory map and torch's own flag.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from expkit.bench.sides import endpoint, preload
from expkit.bench.processes import fork_safety


def _last_line_of_a_fresh_process(code: str) -> str:
    """What ``python -c code`` printed last, in a process that has imported nothing yet."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip().splitlines()[-1]


def test_the_driver_library_in_the_memory_map_marks_the_process(tmp_path: Path):
    with_driver = tmp_path / "maps-gpu"
    with_driver.write_bytes(b"7f00-7f10 r-xp 0 00:00 1 /usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04\n")
    without = tmp_path / "maps-cpu"
    without.write_bytes(b"7f00-7f10 r-xp 0 00:00 1 /usr/lib/libtorch_cpu.so\n")
    assert fork_safety._driver_loaded(str(with_driver))
    assert not fork_safety._driver_loaded(str(without))
    assert not fork_safety._driver_loaded(str(tmp_path / "missing"))


def test_the_driver_mapped_but_never_initialised_leaves_the_process_fit_to_fork(monkeypatch):
    """On a GPU machine ``import torch`` maps the driver library without initialising it
    (H100, torch 2.11: ``60f880e:scripts/debug_start.py``); such a process forks safely."""
    monkeypatch.setattr(fork_safety.torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(fork_safety, "_driver_loaded", lambda maps="": "/usr/lib/libcuda.so.1")
    monkeypatch.setattr(fork_safety, "_driver_initialised", lambda path: False)
    assert not fork_safety.cuda_initialised()


class _Driver:
    def __init__(self, rc: int) -> None:
        self.rc, self.calls = rc, 0

    def cuDeviceGetCount(self, ref) -> int:
        self.calls += 1
        return self.rc


@pytest.mark.parametrize("rc, initialised", [(3, False), (0, True), (100, True)])
def test_the_driver_is_asked_whether_it_was_initialised(rc, initialised):
    """Only CUDA_ERROR_NOT_INITIALIZED (3) means never initialised; success (0) or any other
    error (100, no device) counts as initialised: forking then costs nothing but speed."""
    driver = _Driver(rc)
    assert fork_safety._driver_initialised("/x/libcuda.so.1", load=lambda p: driver) is initialised
    assert driver.calls == 1


def test_a_driver_that_cannot_be_asked_counts_as_initialised():
    def refuse(path):
        raise OSError("not loaded")

    assert fork_safety._driver_initialised("/x/libcuda.so.1", load=refuse)


def test_the_mapped_driver_librarys_path_is_read_from_the_memory_map(tmp_path: Path):
    maps = tmp_path / "maps"
    maps.write_bytes(b"7f00-7f10 r-xp 00000000 00:00 1   /usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04\n")
    assert fork_safety._driver_loaded(str(maps)) == "/usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04"


def test_a_process_that_touched_the_driver_does_not_fork(monkeypatch):
    """``torch.cuda.is_available()`` initialises the driver without initialising torch's CUDA
    state; a child forked after it fails ("Cannot re-initialize CUDA in forked subprocess")."""
    monkeypatch.setattr(fork_safety.torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(fork_safety, "_driver_loaded", lambda maps="": "/usr/lib/libcuda.so.1")
    monkeypatch.setattr(fork_safety, "_driver_initialised", lambda path: True)
    assert fork_safety.cuda_initialised()
    assert not fork_safety.fork_is_safe()
    assert endpoint._context("auto").get_start_method() != "fork"
    with pytest.raises(endpoint.ExpkitError, match="initialised CUDA"):
        endpoint._context("fork")


def test_auto_asks_once_whether_the_process_may_fork(monkeypatch):
    """Each answer reads the process's memory map (2.6 ms with torch loaded on the 2-core
    machine); a pair resolves its start once for both workers and asks nothing twice."""
    asked = []
    monkeypatch.setattr(endpoint, "fork_unsafe_reason", lambda: asked.append(1) or None)
    monkeypatch.setattr(endpoint, "cuda_initialised", lambda: pytest.fail("CUDA's driver asked about again"))
    ctx, why = endpoint.start_context("auto")
    assert (ctx.get_start_method(), why, asked) == ("fork", None, [1])
    monkeypatch.setattr(endpoint, "fork_unsafe_reason", lambda: "2 Python threads: MainThread, pool")
    ctx, why = endpoint.start_context("auto")
    assert (ctx.get_start_method(), why) == ("forkserver", "2 Python threads: MainThread, pool")
    ctx, why = endpoint.start_context("spawn")
    assert (ctx.get_start_method(), why) == ("spawn", None)


def test_this_cpu_test_process_has_no_driver_loaded():
    assert not fork_safety._driver_loaded() or fork_safety.torch.cuda.is_available()


def test_a_parent_that_forks_its_workers_imports_the_preload_first():
    """Workers forked from a fresh parent inherit what it imported: without the preload
    each of honest-win's ten workers spent 0.83-0.94 s of its first call importing
    torch._dynamo and its dependencies (evidence/harness-cost/fork-preload-cpu.md)."""
    code = ("import sys; from expkit.bench.sides import endpoint as e; from expkit.bench.sides.preload import PRELOAD; "
            "assert e.fork_is_safe(); "
            "missing = [m for m in PRELOAD if m not in sys.modules]; assert 'torch._dynamo' in missing; "
            "e.warm_up_forkserver('auto'); "
            "print([m for m in PRELOAD if m not in sys.modules], e.fork_is_safe())")
    assert _last_line_of_a_fresh_process(code) == "[] True"


def test_a_preload_that_makes_forking_unsafe_starts_the_fork_server(monkeypatch):
    """Where an import of the preload leaves the process unsafe to fork (a library that maps
    the CUDA driver as it imports), the workers come from the fork server, started at once."""
    import multiprocessing.forkserver as fs

    safe = iter([True, False])
    started, imported = [], []
    monkeypatch.setattr(endpoint, "fork_is_safe", lambda: next(safe, False))
    monkeypatch.setattr(endpoint.importlib, "import_module", imported.append)
    monkeypatch.setattr(endpoint, "_context", lambda method, device="cpu": None)
    monkeypatch.setattr(fs, "ensure_running", lambda: started.append(True))
    endpoint.warm_up_forkserver("auto")
    assert imported == list(preload.PRELOAD) and started == [True]


@pytest.mark.parametrize("isolate, warmed", [("false", []), ("true", [("auto", "cpu")])])
def test_the_worker_start_is_warmed_only_where_workers_start(tmp_path, monkeypatch, isolate, warmed):
    """The preload (about a second) is for forked workers; a run with its sides in one
    process starts none. The run's device picks the preload (``preload.preload_for``)."""
    from expkit import runner

    calls = []
    monkeypatch.setattr(runner, "warm_up_forkserver", lambda *a: calls.append(a))

    def stop(*a, **k):
        raise RuntimeError("stop after the start")

    monkeypatch.setattr(runner, "open_pair", stop)
    manifest = Path(__file__).parents[1] / "manifests" / "examples" / "cpu" / "honest-win.yaml"
    with pytest.raises(RuntimeError, match="stop after the start"):
        runner.run_manifest(manifest, ["measure=quick", f"defences.isolate={isolate}"], tmp_path)
    assert calls == warmed


def test_the_parents_gpu_telemetry_never_initialises_cuda_here(monkeypatch):
    """The replicates' NVML log opens the GPU the baseline's worker reported, by its UUID.
    Asking torch here (``current_device``, ``get_device_properties``) initialised the driver
    in the parent on an H100, and every later replicate's workers came from the fork
    server: ``60f880e:scripts/debug_contexts.py`` at fbadffc showed the first pair forked and the
    other four started from it (evidence/harness-cost/gpu-memory-fork-start/raw.tar.xz:start_26_fbadffc.txt)."""
    from expkit.bench.sides import replicates
    from expkit.timing import telemetry

    asked = []

    def touched(*a, **k):
        asked.append(a)
        raise AssertionError("the parent asked torch.cuda")

    for name in ("current_device", "get_device_properties", "is_available", "device_count", "init"):
        monkeypatch.setattr(fork_safety.torch.cuda, name, touched)
    opened = []

    def fake_open(index, *, uuid=None, **k):
        opened.append((index, uuid))
        return telemetry.NullTelemetry("fake", index) if uuid == "GPU-gone" else "tel"

    monkeypatch.setattr(telemetry, "open_telemetry", fake_open)
    assert replicates._telemetry("cuda", {"index": 1, "uuid": "GPU-abc"}) == "tel"
    assert opened == [(1, "GPU-abc")]
    opened.clear()
    assert replicates._telemetry("cuda", {"index": 0, "uuid": "GPU-gone"}) == "tel"  # by index after the UUID
    assert opened == [(0, "GPU-gone"), (0, None)]
    assert replicates._telemetry("cpu", None) is None
    assert asked == []


def test_a_parent_that_computed_its_intervals_with_scipy_can_still_fork():
    """The parent's statistics load scipy, whose OpenBLAS starts a pool of idle threads (one
    per core) as it loads; the replicates of every KernelBench run on the H100 then came from
    the fork server (33 native threads against 16:
    evidence/harness-cost/gpu-memory-fork-start/raw.tar.xz:fork_safety_85c803d.txt). The bench loads scipy with
    its BLAS on one thread (expkit.bench.processes.blas), so no pool starts. (Counting the pool as
    harmless instead hung a forked worker of this suite on a lock.)"""
    code = ("from expkit.bench.processes import fork_safety as e; from scipy.stats import norm, t, bootstrap; "
            "import numpy as np; norm.ppf(0.975); t.ppf(0.975, 4); "
            "bootstrap((np.arange(50.0),), np.mean, n_resamples=200); a = np.random.rand(300, 300); a @ a; "
            "print(e.fork_unsafe_reason())")
    assert _last_line_of_a_fresh_process(code) == "None"


def test_a_parent_unfit_for_its_threads_names_the_new_ones(monkeypatch):
    """A count alone ("18 native threads, 16 once torch was imported", the H100's API path at
    82be6cb) says not whose the threads are; their names do."""
    monkeypatch.setattr(fork_safety, "native_thread_ids", lambda: fork_safety._TIDS_AT_IMPORT | {10**9, 10**9 + 1, 10**9 + 2})
    monkeypatch.setattr(fork_safety, "native_thread_names",
                        lambda: {**fork_safety._NAMES_AT_IMPORT, "cuda-EvtHandlr": 2, "OpenBLASThread": 1})
    why = fork_safety.fork_unsafe_reason()
    assert why is not None and "(new: OpenBLASThread, cuda-EvtHandlr x2)" in why, why


def test_a_thread_that_took_the_place_of_one_there_at_import_makes_the_parent_unfit(monkeypatch):
    """Counted, the threads matched: in a test session the thread there beside the main one
    when torch was imported had ended and another stood in its place, and a worker forked
    then hung in its first parallel op, in OpenMP's barrier. By id, the newcomer shows."""
    at_import = sorted(fork_safety._TIDS_AT_IMPORT)
    swapped = frozenset(at_import[:-1]) | {10**9}  # as many threads as at import, one of them new
    monkeypatch.setattr(fork_safety, "native_thread_ids", lambda: swapped)
    monkeypatch.setattr("threading.active_count", lambda: 1)  # one Python thread, as a fresh parent has
    why = fork_safety.fork_unsafe_reason()
    assert why is not None and "1 of them started since torch was imported" in why, why


def test_the_thread_names_count_every_native_thread():
    code = ("import os, torch; torch.set_num_threads(2); a = torch.rand(512, 512); a @ a; "
            "from expkit.bench.processes import fork_safety as e; n = e.native_thread_names(); "
            "print(sum(n.values()) == len(os.listdir('/proc/self/task')), len(n) >= 1)")
    assert _last_line_of_a_fresh_process(code) == "True True"


def test_a_parent_that_imported_the_bench_before_pandas_can_still_fork():
    """The API path of a script that imports ``expkit.bench`` first: pandas (and pyarrow,
    where installed) loads after the bench's thread count. On the H100 pyarrow's jemalloc
    thread (fork_safety_2ea6229.txt) then left the parent unfit, and every worker came from
    the fork server."""
    code = ("from expkit.bench.sides import endpoint; from expkit.bench.processes import fork_safety as e; import pandas; from expkit.report import store; "
            "print(e.fork_unsafe_reason())")
    assert _last_line_of_a_fresh_process(code) == "None"


def test_threads_the_parents_nvml_starts_leave_it_fit_to_fork_and_others_do_not(monkeypatch):
    """NVML's ``nvmlInit`` starts a native thread (``cuda0000340000f`` on the H100), and the
    parent opens NVML for its clock log after the first pair forked: by id, every later
    replicate's pair then came from the fork server (``tests/gpu/test_gpu_start.py`` failed
    at 0955cf7 on the H100). No worker forked after it calls NVML, so that thread does not
    make a fork unsafe; a thread that starts outside such a block still does."""
    from expkit.bench.sides import replicates
    from expkit.timing import telemetry

    tids = set(fork_safety._TIDS_AT_IMPORT)
    monkeypatch.setattr(fork_safety, "native_thread_ids", lambda: frozenset(tids))
    monkeypatch.setattr(fork_safety, "_TOLERATED", set())
    monkeypatch.setattr("threading.active_count", lambda: 1)
    monkeypatch.setattr(fork_safety, "cuda_initialised", lambda: False)

    def nvml_init(index, *, uuid=None, **k):
        tids.add(10**9)  # the thread NVML starts
        return "tel"

    monkeypatch.setattr(telemetry, "open_telemetry", nvml_init)
    assert fork_safety.fork_unsafe_reason() is None
    assert replicates._telemetry("cuda", {"index": 0, "uuid": "GPU-abc"}) == "tel"
    assert fork_safety.fork_unsafe_reason() is None
    tids.add(10**9 + 1)  # a thread started by anything else
    why = fork_safety.fork_unsafe_reason()
    assert why is not None and "1 of them started since torch was imported" in why, why


def test_a_thread_nvmls_sampler_starts_during_a_case_leaves_the_parent_fit_to_fork(monkeypatch):
    """NVML may start its native thread on any call, not only ``nvmlInit``: its sampler
    calls it all through a case. A thread started while a case's telemetry window is open
    is tolerated; one started after the window closed is not."""
    from types import SimpleNamespace

    from expkit.bench.sides import replicates

    tids = set(fork_safety._TIDS_AT_IMPORT)
    monkeypatch.setattr(fork_safety, "native_thread_ids", lambda: frozenset(tids))
    monkeypatch.setattr(fork_safety, "_TOLERATED", set())
    monkeypatch.setattr("threading.active_count", lambda: 1)
    monkeypatch.setattr(fork_safety, "cuda_initialised", lambda: False)

    class Sampler:
        def start(self):
            pass

        def stop(self):
            tids.add(10**9)  # NVML's thread, started by a sample taken during the case
            return "log"

    rep = replicates._Replicate(SimpleNamespace(tel=Sampler()), pair=None, r=0)
    rep._start_window()
    assert rep._stop_window() == "log"
    assert fork_safety.fork_unsafe_reason() is None
    assert rep._stop_window() is None  # a closed window stays closed
    tids.add(10**9 + 1)
    assert fork_safety.fork_unsafe_reason() is not None


def test_a_forked_child_of_a_fit_parent_can_fork_its_own_workers():
    """A suite's or an audit's manifest process is forked from a fork server that imported
    this module: its one thread is its own, not one of those counted at import, and its
    workers must still fork (on the GPU every later replicate came from the fork server)."""
    code = ("import os, sys; from expkit.bench.processes import fork_safety as e; "
            "assert e.fork_unsafe_reason() is None, e.fork_unsafe_reason(); pid = os.fork()\n"
            "if pid == 0:\n    print(e.fork_unsafe_reason()); sys.stdout.flush(); os._exit(0)\n"
            "os.waitpid(pid, 0)")
    assert _last_line_of_a_fresh_process(code) == "None"


def test_a_forked_child_of_an_unfit_parent_is_unfit_too():
    code = ("import os, sys, threading; from expkit.bench.processes import fork_safety as e; "
            "stop = threading.Event(); threading.Thread(target=stop.wait, daemon=True).start(); pid = os.fork()\n"
            "if pid == 0:\n    print(e.fork_unsafe_reason()); sys.stdout.flush(); os._exit(0)\n"
            "os.waitpid(pid, 0); stop.set()")
    assert _last_line_of_a_fresh_process(code).startswith("its parent was not fit to fork when it forked (2 Python")


def test_the_suites_fork_server_imports_the_benchs_gpu_preload_and_the_supervisor_no_torch():
    """A manifest process forks its workers from itself: what the bench would import there
    before forking, the suite's fork server has imported once for every manifest."""
    code = ("import sys, importlib; from expkit.suites import manifest_process as m; "
            "clean = 'torch' not in sys.modules; [importlib.import_module(n) for n in m.PRELOAD]; "
            "from expkit.bench.sides.preload import preload_for; "
            "print(clean, [n for n in preload_for('cuda') if n not in sys.modules])")
    assert _last_line_of_a_fresh_process(code) == "True []"
