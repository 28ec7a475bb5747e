"""Where the workers of a suite run: this machine's GPUs, or a SLURM cluster.

A launcher takes the suite's jobs (:class:`expkit.suites.manifest_process.Job`) and reports each
one's :class:`expkit.suites.manifest_process.Outcome` through ``on_done`` as it finishes, in the
calling thread, so the suite can record it in the session at once. Both launchers
run every manifest through :func:`expkit.suites.manifest_process.supervise`, so a crash, a hang or a
kill is diagnosed the same way wherever it happens.

``local`` (:class:`LocalLauncher`, the default)
    One worker per GPU at a time, each with ``CUDA_VISIBLE_DEVICES`` set to its own
    GPU, so that no two timings share a device. The GPUs are the entries of
    ``CUDA_VISIBLE_DEVICES`` where it is set, else every GPU NVML sees. GPU manifests
    go first; CPU manifests follow, one at a time, because timings taken side by side
    on one CPU disturb each other (and a GPU worker keeps a CPU core busy launching
    and synchronising). ``launcher.parallel_cpu=true`` runs CPU manifests
    ``launcher.cpu_workers`` at a time (default: half the cores) alongside the rest,
    each limited to its share of the cores' torch threads: faster, and the report's
    timings are then those of a shared machine.
``slurm`` (:class:`SubmititLauncher`)
    One submitit job per manifest, submitted as job arrays (GPU manifests with
    ``launcher.gpus_per_task`` GPUs, CPU manifests with none) and gathered as they
    finish, polling every ``launcher.poll_seconds``. Each job runs the supervisor on
    its node, which starts the worker in a fresh interpreter. submitit is the engine
    (its executors, pickling, job folders and SLURM scripts); ``launcher.cluster=local``
    swaps SLURM for submitit's local executor, which is how the tests run this path.
    A job that ends without an answer from its supervisor (a node failure, a
    preemption, a SLURM time limit) is a usage error for that manifest, not a
    verdict: nothing was tested, and ``--resume`` submits it again.
"""

from __future__ import annotations

import dataclasses
import math
import os
import threading
import time
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, Callable, Deque, Dict, List, Optional, Protocol, Sequence, Tuple

import pynvml

from ..core.errors import ConfigError
from ..manifest.settings import LauncherSettings
from .manifest_process import ERROR_STATUS, Job, Outcome, supervise, warm_up

OnStart = Callable[[Job], None]
OnDone = Callable[[Job, Outcome], None]


class Launcher(Protocol):
    name: str

    def gpus(self) -> Optional[List[str]]:
        """GPUs jobs may use (None: the launcher finds them elsewhere, e.g. on cluster nodes)."""

    def run(self, jobs: Sequence[Job], on_start: OnStart, on_done: OnDone) -> None:
        """Run every job; call ``on_done`` for each as it ends. KeyboardInterrupt stops them all."""


def visible_gpus(environ: Optional[Dict[str, str]] = None, nvml_count: Optional[Callable[[], int]] = None) -> List[str]:
    """The GPUs a local suite may use, as ``CUDA_VISIBLE_DEVICES`` entries.

    ``CUDA_VISIBLE_DEVICES`` wins where set (an empty value hides every GPU; CUDA
    ignores the entries from the first invalid one on, e.g. ``-1``); otherwise NVML's
    device count, which needs no CUDA context (the suite process never creates one).
    """
    env = os.environ if environ is None else environ
    if "CUDA_VISIBLE_DEVICES" in env:
        out = []
        for entry in (s.strip() for s in env["CUDA_VISIBLE_DEVICES"].split(",")):
            if not entry or entry.startswith("-"):
                break
            out.append(entry)
        return out
    count = nvml_count or _nvml_count
    try:
        return [str(i) for i in range(count())]
    except Exception:  # no driver, no NVML: no GPU
        return []


def _nvml_count() -> int:

    pynvml.nvmlInit()
    try:
        return int(pynvml.nvmlDeviceGetCount())
    finally:
        pynvml.nvmlShutdown()


class LocalLauncher:
    """Workers on this machine; see the module docstring for the scheduling rule."""

    name = "local"

    def __init__(self, settings: LauncherSettings, gpus: Optional[Sequence[str]] = None,
                 supervisor: Callable[..., Outcome] = supervise) -> None:
        if settings.start not in ("forkserver", "spawn"):
            raise ConfigError(f"launcher.start={settings.start!r}: one of forkserver, spawn")
        self.settings = settings
        self._gpus = list(visible_gpus() if gpus is None else gpus)
        self._supervise = supervisor
        cores = os.cpu_count() or 1
        self.cpu_slots = max(1, settings.cpu_workers or cores // 2) if settings.parallel_cpu else 1
        # Parallel CPU workers split the cores between them instead of each taking all.
        self.cpu_threads = max(1, cores // self.cpu_slots) if self.cpu_slots > 1 else None

    def gpus(self) -> Optional[List[str]]:
        return list(self._gpus)

    def run(self, jobs: Sequence[Job], on_start: OnStart, on_done: OnDone) -> None:
        gpu_q: Deque[Job] = deque(j for j in jobs if j.device == "cuda")
        cpu_q: Deque[Job] = deque(j for j in jobs if j.device != "cuda")
        if gpu_q and not self._gpus:
            raise ConfigError("GPU manifests were given to a local launcher that sees no GPU")
        if not jobs:
            return
        if self._supervise is supervise:
            warm_up(self.settings.start)
        free = list(self._gpus)
        cancel = threading.Event()
        running: Dict[Future, Tuple[Job, Optional[str]]] = {}
        pool = ThreadPoolExecutor(max_workers=len(self._gpus) + self.cpu_slots, thread_name_prefix="expkit-worker")

        def start(job: Job, gpu: Optional[str]) -> None:
            if gpu is not None:
                job = dataclasses.replace(job, gpu=gpu)
            elif job.device != "cuda" and self.cpu_threads:
                job = dataclasses.replace(job, threads=self.cpu_threads)
            on_start(job)
            running[pool.submit(self._supervise, job, self.settings.start, cancel=cancel)] = (job, gpu)

        try:
            while gpu_q or cpu_q or running:
                while gpu_q and free:
                    start(gpu_q.popleft(), free.pop(0))
                gpu_busy = bool(gpu_q) or any(g is not None for _, g in running.values())
                if self.settings.parallel_cpu or not gpu_busy:
                    while cpu_q and sum(g is None for _, g in running.values()) < self.cpu_slots:
                        start(cpu_q.popleft(), None)
                done, _ = wait(list(running), timeout=0.5, return_when=FIRST_COMPLETED)
                for fut in done:
                    job, gpu = running.pop(fut)
                    if gpu is not None:
                        free.append(gpu)
                    on_done(job, _outcome(job, fut))
        except BaseException:
            cancel.set()
            wait(list(running), timeout=30)
            raise
        finally:
            pool.shutdown(wait=False, cancel_futures=True)


def _outcome(job: Job, fut: Future) -> Outcome:
    try:
        return fut.result()
    except KeyboardInterrupt:
        raise
    except Exception as e:  # the supervisor itself failed: nothing was tested
        return Outcome(job.run_dir, ERROR_STATUS, None, 2, f"the supervisor failed: {type(e).__name__}: {e}")


class SubmititLauncher:
    """One submitit job per manifest; see the module docstring."""

    name = "slurm"

    def __init__(self, settings: LauncherSettings, folder: Path) -> None:
        worker_limit = settings.timeout_seconds
        if settings.time_minutes * 60 < worker_limit + 60:
            raise ConfigError(
                f"launcher.time_minutes={settings.time_minutes} must exceed launcher.timeout_seconds="
                f"{worker_limit:g} by at least a minute, so the supervisor can record a worker that ran "
                f"out of time (e.g. launcher.time_minutes={math.ceil(worker_limit / 60) + 5})")
        self.settings = settings
        self.folder = Path(folder)
        #: The longest time limit a worker can be given inside one job (the supervisor keeps a minute).
        self.max_timeout = settings.time_minutes * 60 - 60

    def gpus(self) -> Optional[List[str]]:
        return None

    def parameters(self, device: str) -> Dict[str, Any]:
        """submitit's (AutoExecutor) parameters for one job of ``device``."""
        s = self.settings
        params: Dict[str, Any] = {"name": "expkit", "timeout_min": s.time_minutes, "nodes": 1, "tasks_per_node": 1,
                                  "gpus_per_node": s.gpus_per_task if device == "cuda" else 0,
                                  "cpus_per_task": s.cpus_per_task}
        if s.mem_gb is not None:
            params["mem_gb"] = s.mem_gb
        if s.partition:
            params["slurm_partition"] = s.partition
        if s.account:
            params["slurm_account"] = s.account
        return params

    def executor(self, device: str) -> Any:
        # lazy: submitit loads only for the SLURM launcher
        import submitit

        ex = submitit.AutoExecutor(folder=self.folder / "%j", cluster=self.settings.cluster)
        ex.update_parameters(**self.parameters(device))
        return ex

    def run(self, jobs: Sequence[Job], on_start: OnStart, on_done: OnDone) -> None:
        submitted: List[Tuple[Job, Any]] = []
        try:
            for device in ("cuda", "cpu"):
                group = [j for j in jobs if (j.device == "cuda") == (device == "cuda")]
                if not group:
                    continue
                ex = self.executor(device)
                with ex.batch():
                    futures = [ex.submit(supervise, j, "spawn") for j in group]
                submitted.extend(zip(group, futures))
            pending = list(submitted)
            started: set = set()
            while pending:
                still = []
                for j, f in pending:
                    done = f.done()
                    if j.run_dir not in started and (done or _state(f) not in ("PENDING", "UNKNOWN", "unknown")):
                        started.add(j.run_dir)  # queued in SLURM until now
                        on_start(j)
                    if done:
                        on_done(j, self._collect(j, f))
                    else:
                        still.append((j, f))
                pending = still
                if pending:
                    time.sleep(self.settings.poll_seconds)
        except BaseException:
            for _, f in submitted:
                try:
                    if not f.done():
                        f.cancel(check=False)
                except Exception:
                    pass
            raise

    def _collect(self, job: Job, f: Any) -> Outcome:
        try:
            return f.result()
        except Exception as e:
            first = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
            return Outcome(job.run_dir, ERROR_STATUS, None, 2,
                           f"job {getattr(f, 'job_id', '?')} ended without an answer from its supervisor "
                           f"(state {_state(f)}): {first}")


def _state(f: Any) -> str:
    try:
        return str(f.state)
    except Exception:
        return "unknown"


def make_launcher(settings: LauncherSettings, session_dir: Path) -> Launcher:
    if settings.name == "local":
        return LocalLauncher(settings)
    if settings.name == "slurm":
        return SubmititLauncher(settings, Path(session_dir) / ".submitit")
    raise ConfigError(f"launcher={settings.name!r}: one of local, slurm (conf/launcher/)")
