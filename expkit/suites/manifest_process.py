"""One manifest in its own process, and the supervisor that watches it.

``python -m expkit.suites.manifest_process RUN_DIR`` runs the job described by ``RUN_DIR/job.json``
(a manifest, its overrides, its GPU) into ``RUN_DIR``, exactly as ``expkit run
MANIFEST --out RUN_DIR`` would; its stdout and stderr go to ``worker.stdout`` and
``worker.stderr`` there. The parent never reads the worker's output as data: the
run folder's ``result.json`` is the only answer, and its absence is the news.

:func:`supervise` starts a worker, enforces the time limit and, when the worker
ends without a ``result.json``, says why in one line and writes an ``invalid``
result itself (through :func:`expkit.runner.write_invalid_run`, in the runner's own
schema) so that the rest of a suite goes on and the session still reads every run:

* killed by a signal: the signal's name (SIGSEGV, SIGABRT, ...); SIGKILL is named
  together with its usual sender, the kernel's out-of-memory killer;
* over its time limit: killed, with the frame it was in (at the limit the
  supervisor sends SIGUSR1, on which ``faulthandler`` dumps every Python stack,
  then SIGKILL a second later); where the innermost frame is library code (ctypes,
  torch), the innermost frame of the user's own code is named too;
* exited without a result: its exit status and the last exception line;
* and in each case the last CUDA error line of ``worker.stderr`` (an illegal
  address, out of memory, a device-side assert), which names the fault better
  than the signal does.

A worker that raises a user error (a reference that does not import, a GPU
manifest on a machine without one) writes ``worker.error`` and exits 2: that is a
usage error, reported as such, and no result is invented for it.

Two ways to start a worker (``launcher.start``):

``forkserver`` (the local launcher's default)
    Python's ``multiprocessing`` fork server, started once per suite with torch and
    expkit already imported; each worker is a fork of it. Starting and ending a
    worker costs 0.06 s this way against 2.2 s for a fresh interpreter
    (on a 2-core VM; evidence/README.md), and every worker starts from the same
    pristine state (never from a previous manifest's). The server imports but never
    touches CUDA, so forking it is safe and each child can still choose its GPU
    through ``CUDA_VISIBLE_DEVICES``.
``spawn``
    ``python -m expkit.suites.manifest_process RUN_DIR`` in a fresh interpreter: slower, shares
    nothing, and what a SLURM job runs (:mod:`expkit.suites.launchers`).

Each worker runs in its own process group and is killed with it (a worker that
started a compiler or its own children leaves none behind), and on Linux asks to be
killed when its parent dies, so a suite that is itself killed leaves no orphan
holding a GPU.
"""

from __future__ import annotations

import datetime as _dt
import faulthandler
import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Optional, Sequence, Tuple

from ..bench.processes.diagnose import WORKER_OUTPUT_ENV, diagnose
from ..bench.processes.lifetime import die_with_parent
from ..bench.processes.shm_files import remove_files_of_folders
from ..core.errors import ExpkitError
from ..core.findings import Finding
from ..manifest.settings import Settings
from ..verdict.rules import EXIT_CODES
from .stack_dumps import STDERR, WORKERS, await_dumps, size, stderr_files, stderr_tails

JOB = "job.json"
WORKER = "worker.json"  # how the worker ended: its run time, exit code, GPU, the supervisor's wall time
STDOUT = "worker.stdout"
ERROR = "worker.error"
RESULT = "result.json"  # store.RESULT, named here so that the supervisor need not import torch

DONE, ERROR_STATUS = "done", "error"

#: Modules the fork server imports once, so that workers start without importing them:
#: what a run imports (found by listing the modules a run_manifest call added). A
#: missing one only costs time. None touches CUDA on import; numpy's BLAS may start
#: its thread pool there, and forks of the server run torch ops normally (as torch's
#: DataLoader workers, forks of a process that imported torch, do). The last one imports
#: the bench's own preload for a GPU run (``bench.sides.preload.preload_for("cuda")``:
#: ``torch._dynamo``, cupti-python, Triton's key): each manifest process forks its workers
#: from itself and would otherwise import them again, once per manifest. And torch.compile's
#: stack, which each process of a compiled candidate would otherwise import itself
#: (``bench.processes.compile_stack``: imported without starting the CUDA driver).
PRELOAD = ("torch", "expkit.runner", "expkit.checks.trace", "expkit.checks.expectations", "expkit.report",
           "expkit.manifest.kernelbench", "expkit.bench.sides.endpoint", "expkit.report.plots",
           "expkit.verdict.roofline", "expkit.verdict.savings", "hydra", "omegaconf", "hydra.compose", "pandas",
           "matplotlib.pyplot", "expkit.bench.sides.preload_all", "expkit.bench.processes.compile_stack")

#: Sent to a worker's process group before it is killed for time: faulthandler dumps
#: every Python stack to the worker's stderr (the runner's own isolated worker, a fork,
#: inherits the handler and dumps to its own stderr file).
DUMP_SIGNAL = signal.SIGUSR1
#: The most seconds the supervisor waits for that dump before the kill; it kills as soon as
#: every stderr file of the job's processes holds a dump written since the signal.
DUMP_GRACE = 5.0

@dataclass(frozen=True)
class Job:
    """What one worker runs: a manifest into a run folder, with settings and a device."""

    manifest: str
    run_dir: str
    overrides: Tuple[str, ...] = ()
    device: str = "cpu"
    gpu: Optional[str] = None  # this worker's CUDA_VISIBLE_DEVICES; None leaves it as inherited
    timeout: float = 1800.0
    cwd: str = field(default_factory=os.getcwd)
    threads: Optional[int] = None  # torch intra-op threads; None keeps torch's default
    #: Environment variables set in the worker before the manifest runs (``expkit audit``
    #: gives each candidate its own compile caches this way); every process it starts inherits them.
    env: Tuple[Tuple[str, str], ...] = ()
    #: Whether the run's report draws its figures; ``expkit audit`` leaves them to ``expkit report``.
    plots: bool = True

    def write(self) -> Path:
        path = Path(self.run_dir) / JOB
        _atomic_write(path, json.dumps(asdict(self), indent=2) + "\n")
        return path

    @classmethod
    def read(cls, run_dir: Path) -> "Job":
        data = json.loads((Path(run_dir) / JOB).read_text())
        data["overrides"] = tuple(data.get("overrides", ()))
        data["env"] = tuple(tuple(kv) for kv in data.get("env", ()))
        return cls(**data)


@dataclass(frozen=True)
class Outcome:
    """How a worker ended, as the supervisor saw it.

    ``status`` is ``done`` (a result.json exists: the runner's, or the supervisor's
    ``invalid`` one for a crash, in which case ``crashed`` is True and ``cause`` says
    why) or ``error`` (a usage error; ``cause`` is its message; no result.json).
    """

    run_dir: str
    status: str
    verdict: Optional[str]
    exit_code: int
    cause: str = ""
    crashed: bool = False
    seconds: float = 0.0
    returncode: Optional[int] = None


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


# --- inside the worker -------------------------------------------------------------


def _redirect(run_dir: Path) -> None:
    """Point fds 1 and 2 at the run folder's files, so C-level output lands there too."""
    sys.stdout.flush()
    sys.stderr.flush()
    for fd, name in ((1, STDOUT), (2, STDERR)):
        f = os.open(run_dir / name, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(f, fd)
        os.close(f)


def worker_overrides(job: Job) -> Tuple[str, ...]:
    """The job's overrides, plus ``defences.start_method=fork`` for a CPU manifest.

    The runner runs the code under test in a process of its own (``bench/sides/endpoint.py``). Its
    default start, a fork server that imports torch, costs seconds; a plain fork costs
    milliseconds and is safe from a worker like this one, which has imported torch
    but run no torch op, started no thread and not touched CUDA. GPU manifests keep
    the default (asking whether a GPU is there may already initialise the driver),
    and so does a job whose overrides choose the start method themselves.
    """
    overrides = tuple(job.overrides)
    if job.device == "cuda" or any(o.lstrip("+~").startswith("defences.start_method") for o in overrides):
        return overrides


    defences = next((f for f in fields(Settings) if f.name == "defences"), None)
    if defences is None or "start_method" not in {f.name for f in fields(defences.default_factory())}:
        return overrides
    return overrides + ("defences.start_method=fork",)


def run_job(job: Job) -> int:
    """Run ``job`` in this process; returns the exit code (verdict's, or 2)."""

    run_dir = Path(job.run_dir)
    faulthandler.enable(all_threads=True)
    # The supervisor sends DUMP_SIGNAL just before it kills a worker that ran out of
    # time: the stacks say where it hung. A signal handler, not faulthandler's timer,
    # because the timer is a thread, and a process with a second thread cannot be
    # forked safely (the runner forks its own isolated worker from this one).
    faulthandler.register(DUMP_SIGNAL, all_threads=True)
    if job.gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = job.gpu
    os.environ.update(dict(job.env))
    try:
        os.chdir(job.cwd)  # relative paths in overrides mean what they meant to the suite
    except OSError:
        pass  # a cluster node without the submitting machine's folder: absolute paths still work

    try:
        if job.threads:
            # lazy: the supervisor imports this module and loads no torch (tests/test_start_method.py)
            import torch

            torch.set_num_threads(job.threads)
        if job.device == "cuda" and "torch" in sys.modules:
            # lazy: the supervisor imports this module and loads no torch (tests/test_start_method.py)
            import torch

            # A fork of a process that had initialised CUDA would inherit a broken
            # context and ignore CUDA_VISIBLE_DEVICES; the fork server never does.
            assert not torch.cuda.is_initialized(), "CUDA was initialised before the worker chose its GPU"
        # lazy: the supervisor imports this module and loads no torch (tests/test_start_method.py)
        from ..runner import run_manifest

        print(f"expkit worker pid {os.getpid()}: {job.manifest} -> {job.run_dir}"
              + (f" on CUDA_VISIBLE_DEVICES={job.gpu}" if job.gpu is not None else ""), flush=True)
        t0 = time.monotonic()
        outcome = run_manifest(job.manifest, worker_overrides(job), run_dir, plots=job.plots)
    except ExpkitError as e:
        _atomic_write(run_dir / ERROR, str(e) + "\n")
        print(f"error: {e}", file=sys.stderr, flush=True)
        return e.exit_code
    _atomic_write(run_dir / WORKER, json.dumps({"pid": os.getpid(), "run_seconds": time.monotonic() - t0,
                                                "exit_code": outcome.exit_code}) + "\n")
    print(f"verdict: {outcome.verdict}", flush=True)
    return outcome.exit_code


def _release_forkserver() -> None:
    """Close this worker's copy of the fork server's liveness pipe.

    The server exits when every holder of that pipe's write end has closed it, and
    it hands one to each child (so that children may fork through it too). A worker
    that kept its copy would keep the server alive after the suite died, and the
    server's death is what kills the worker (PR_SET_PDEATHSIG): a hung worker would
    outlive a killed suite. The attribute is CPython's (3.8 to 3.13); where it is
    missing nothing is closed and the worker ends at its own time limit only.
    """
    # lazy: the supervisor imports this module and loads no torch (tests/test_start_method.py)
    from ..bench.sides.worker import release_forkserver_pipe

    release_forkserver_pipe()


def _forked_main(job_json: str) -> None:
    """Entry point of a worker forked from the fork server."""
    data = json.loads(job_json)
    job = Job(**{**data, "overrides": tuple(data["overrides"]), "env": tuple(tuple(kv) for kv in data.get("env", ()))})
    os.setsid()
    _release_forkserver()
    die_with_parent()
    _redirect(Path(job.run_dir))
    code = run_job(job)
    sys.stdout.flush()
    sys.stderr.flush()
    # os._exit: skip multiprocessing's and torch's exit handlers, which belong to the
    # fork server's state, not this worker's.
    os._exit(code)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m expkit.suites.manifest_process RUN_DIR``: run RUN_DIR/job.json (stdio already redirected)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 1:
        print("usage: python -m expkit.suites.manifest_process RUN_DIR   (RUN_DIR holds job.json)", file=sys.stderr)
        return 2
    die_with_parent()
    return run_job(Job.read(Path(argv[0])))


# --- the supervisor ----------------------------------------------------------------


_FORKSERVER: Any = None


def _forkserver() -> Any:
    global _FORKSERVER
    if _FORKSERVER is None:

        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(list(PRELOAD))
        _FORKSERVER = ctx
    return _FORKSERVER


def _noop() -> None:
    os._exit(0)


def warm_up(start: str = "forkserver") -> float:
    """Start the fork server and wait until it has imported torch and expkit, so that
    no worker's time limit pays for those imports; returns the seconds it took."""
    t0 = time.monotonic()
    if start == "forkserver":
        # The server forks only once its imports are done: one empty child is the wait.
        p = _forkserver().Process(target=_noop)
        p.start()
        p.join()
    return time.monotonic() - t0


class _Proc:
    """A started worker: a Popen (spawn) or a multiprocessing Process (forkserver)."""

    def __init__(self, job: Job, start: str) -> None:
        self.start_method = start
        run_dir = Path(job.run_dir)
        if start == "forkserver":
            self.p = _forkserver().Process(target=_forked_main, args=(json.dumps(asdict(job)),), daemon=False)
            self.p.start()
            self.pid = self.p.pid
        elif start == "spawn":
            env = dict(os.environ)
            if job.gpu is not None:
                env["CUDA_VISIBLE_DEVICES"] = job.gpu
            pkg_root = str(Path(__file__).resolve().parents[2])  # the folder holding the expkit package
            env["PYTHONPATH"] = pkg_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
            with open(run_dir / STDOUT, "ab") as out, open(run_dir / STDERR, "ab") as err:
                self.p = subprocess.Popen([sys.executable, "-m", "expkit.suites.manifest_process", str(run_dir)],
                                          stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env, cwd=job.cwd,
                                          start_new_session=True)
            self.pid = self.p.pid
        else:
            raise ValueError(f"launcher.start must be forkserver or spawn, got {start!r}")

    def wait(self, timeout: Optional[float]) -> Optional[int]:
        """The exit code (negative: killed by that signal), or None if still running."""
        if self.start_method == "spawn":
            try:
                return self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                return None
        self.p.join(timeout)
        return self.p.exitcode

    def kill(self, sig: int = signal.SIGKILL) -> None:
        for target in (lambda: os.killpg(self.pid, sig), lambda: os.kill(self.pid, sig)):
            try:
                target()
            except (ProcessLookupError, PermissionError):
                pass


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def record_crash(job: Job, cause: str, *, started: str, wall: float) -> Outcome:
    """Write the ``invalid`` result of a worker that left none (see the module docstring)."""
    # lazy: the supervisor loads the runner, and torch with it, only to record a worker that left no result
    from ..runner import write_invalid_run

    message = f"{cause} (see {STDERR} in the run folder)"
    out = write_invalid_run(job.manifest, Path(job.run_dir), Finding("worker", False, message), job.overrides,
                            started=started, wall=wall)
    return Outcome(job.run_dir, DONE, out.verdict, out.exit_code, cause, crashed=True, seconds=wall)


def _record_worker(run_dir: Path, job: Job, start: str, **facts: Any) -> None:
    """Add the supervisor's view to ``worker.json`` (the worker wrote its run time there)."""
    path = run_dir / WORKER
    try:
        data = json.loads(path.read_text()) if path.is_file() else {}
    except ValueError:
        data = {}
    data.update({"start_method": start, "gpu": job.gpu, "timeout": job.timeout, "supervisor_seconds": facts["wall"],
                 "started": facts["started"], "returncode": facts["returncode"], "timed_out": facts["timed_out"]})
    _atomic_write(path, json.dumps(data, indent=2) + "\n")


def clear_run_dir(run_dir: Path) -> None:
    """Remove the files of an unfinished attempt (the folder has no result.json)."""
    for p in Path(run_dir).iterdir():
        if p.is_file() and p.name != JOB:
            p.unlink()
    shutil.rmtree(Path(run_dir) / WORKERS, ignore_errors=True)


def supervise(job: Job, start: str = "spawn", *, cancel: Any = None) -> Outcome:
    """Run ``job`` in a worker process, wait at most ``job.timeout`` seconds, diagnose.

    ``cancel`` (a ``threading.Event``) lets a suite stop waiting: the worker is
    killed and :class:`KeyboardInterrupt` raised, leaving the run folder without a
    result, so that ``--resume`` runs it again. This function is also what a
    submitit job runs on a cluster node (``start="spawn"``).
    """
    run_dir = Path(job.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    clear_run_dir(run_dir)
    workers = run_dir / WORKERS
    workers.mkdir()
    job = replace(job, env=tuple(job.env) + ((WORKER_OUTPUT_ENV, str(workers.resolve())),))
    job.write()
    started, t0 = _now(), time.monotonic()
    proc = _Proc(job, start)
    deadline = t0 + job.timeout if job.timeout > 0 else float("inf")
    rc, timed_out = None, False
    try:
        while True:
            step = min(0.2, max(0.0, deadline - time.monotonic()))
            rc = proc.wait(step)
            if rc is not None:
                break
            if cancel is not None and cancel.is_set():
                proc.kill()
                proc.wait(5)
                remove_files_of_folders(workers.iterdir())
                raise KeyboardInterrupt(f"suite interrupted while {job.manifest} ran")
            if time.monotonic() >= deadline:
                timed_out = True
                before = {p: size(p) for p in stderr_files(run_dir)}
                proc.kill(DUMP_SIGNAL)
                await_dumps(run_dir, before, proc, DUMP_GRACE)
                proc.kill()
                rc = proc.wait(10)
                break
    except BaseException:
        proc.kill()
        raise
    wall = time.monotonic() - t0
    # A side worker left open (the job crashed or was killed) could not remove its shared
    # files: removed here, once it has died with the job.
    remove_files_of_folders(workers.iterdir())
    try:
        workers.rmdir()  # empty unless a worker was killed before it closed: its output stays
    except OSError:
        pass
    _record_worker(run_dir, job, start, started=started, wall=wall, returncode=rc, timed_out=timed_out)
    if (run_dir / RESULT).is_file() and not timed_out:
        # The runner finished (a crash at interpreter exit, after the result was
        # written, does not undo it).
        verdict = json.loads((run_dir / RESULT).read_text())["verdict"]

        return Outcome(job.run_dir, DONE, verdict, EXIT_CODES[verdict], seconds=wall, returncode=rc)
    if rc == 2 and (run_dir / ERROR).is_file():
        message = (run_dir / ERROR).read_text().strip()
        return Outcome(job.run_dir, ERROR_STATUS, None, 2, message, seconds=wall, returncode=rc)
    if timed_out and (run_dir / RESULT).is_file():
        (run_dir / RESULT).unlink()  # written in the last instant: the limit still holds
    cause = diagnose(rc, timed_out=timed_out, timeout=job.timeout, tail=stderr_tails(run_dir))
    out = record_crash(job, cause, started=started, wall=wall)
    return Outcome(out.run_dir, out.status, out.verdict, out.exit_code, cause, True, wall, rc)


if __name__ == "__main__":
    sys.exit(main())
