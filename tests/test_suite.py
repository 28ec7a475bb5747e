"""Suites: expansion, exit codes, fault diagnosis, GPU placement, and whole suites.

The whole-suite tests start real worker processes (a fork server that imports torch
once, then a fork per manifest) on the tiny manifests of tests/data/suite/.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from expkit.report import session as ses
from expkit.suites import manifest_process, stack_dumps
from expkit.report import store
from expkit.core.errors import ConfigError, ExpkitError
from expkit.suites.launchers import LocalLauncher, visible_gpus
from expkit.manifest.settings import LauncherSettings
from expkit.suites.suite import Row, exit_code, expand, is_suite, run_suite
from expkit.bench.processes.diagnose import diagnose
from expkit.suites.manifest_process import Job, Outcome

ROOT = Path(__file__).parent.parent
SUITE = Path(__file__).parent / "data" / "suite"
FAST = ["measure=quick", "measure.min_seconds=0.05", "measure.max_seconds=0.3", "measure.warmup_seconds=0.01",
        "oracle.trials=1"]
# The candidate's fault must reach the suite's worker, not the runner's isolated process.
FAULTS = FAST + ["launcher.timeout_seconds=10", "defences.isolate=false"]


# --- units --------------------------------------------------------------------------


def test_expand_folder_glob_and_list(tmp_path):
    names = [p.name for p in expand([str(SUITE)])]
    assert names == ["broken.yaml", "crash.yaml", "cuda-abort.yaml", "hang.yaml", "healthy.yaml"]
    assert [p.name for p in expand([str(SUITE / "h*.yaml"), str(SUITE / "hang.yaml")])] == ["hang.yaml", "healthy.yaml"]
    assert [p.name for p in expand([str(ROOT / "tests" / "data" / "**" / "healthy.yaml")])] == ["healthy.yaml"]
    with pytest.raises(ExpkitError, match="matches no file"):
        expand([str(tmp_path / "*.yaml")])
    with pytest.raises(ExpkitError, match="holds no manifest"):
        expand([str(tmp_path)])
    assert is_suite([str(SUITE)]) and is_suite(["a.yaml", "b.yaml"]) and is_suite(["m/*.yaml"])
    assert not is_suite([str(SUITE / "healthy.yaml")])


@pytest.mark.parametrize("outcomes, code", [
    (["supported", "supported"], 0),
    (["supported", "inconclusive"], 4),
    (["inconclusive", "error"], 2),
    (["refuted", "error"], 1),
    (["error", "invalid", "refuted"], 3),
    (["error"], 2),
])
def test_exit_code_is_the_worst_outcome(outcomes, code):
    rows = [Row(f"r{i}", "m.yaml", "error" if w == "error" else "done", None if w == "error" else w)
            for i, w in enumerate(outcomes)]
    assert exit_code(rows) == code


def test_diagnose_names_signal_timeout_and_cuda_error():
    dump = ('Fatal Python error: Segmentation fault\n\nCurrent thread 0x00007f00 (most recent call first):\n'
            '  File "/usr/lib/python3.11/ctypes/__init__.py", line 519 in string_at\n'
            '  File "/home/u/kern.py", line 12 in launch\n')
    text = diagnose(-signal.SIGSEGV, timed_out=False, timeout=60, tail=dump)
    assert text.startswith("killed by SIGSEGV") and "called from kern.py:12 in launch" in text
    assert "out-of-memory" in diagnose(-signal.SIGKILL, timed_out=False, timeout=60, tail="")
    hung = 'Thread 0x00007f01 (most recent call first):\n  File "/home/u/kern.py", line 40 in spin\n'
    text = diagnose(-signal.SIGKILL, timed_out=True, timeout=5, tail=hung)
    assert text == "timed out after 5 s (launcher.timeout_seconds) and was killed; it was in kern.py:40 in spin"
    helper_first = ('Thread 0x00007f02 (most recent call first):\n'
                    f'  File "{Path(diagnose.__code__.co_filename).parent}/channel.py", line 102 in read_exact\n\n'
                    'Current thread 0x00007f01 (most recent call first):\n  File "/home/u/kern.py", line 40 in spin\n')
    text = diagnose(-signal.SIGKILL, timed_out=True, timeout=5, tail=helper_first)
    assert text.endswith("it was in kern.py:40 in spin")  # the thread in the user's code, not the harness's
    hooked = ('Current thread 0x00007f01 (most recent call first):\n'
              f'  File "{Path(diagnose.__code__.co_filename).parents[1]}/defences/fallback.py", line 46 in local\n'
              '  File "/home/u/kern.py", line 40 in spin\n')
    text = diagnose(-signal.SIGKILL, timed_out=True, timeout=5, tail=hooked)
    assert text.endswith("it was in kern.py:40 in spin")  # expkit's trace hook around the line is not news
    # faulthandler writes "line ???" for a frame whose line it cannot tell (the hook, caught
    # mid-call): the dump is still read, after the harness's own wait that comes first
    unknown_line = hooked.replace("line 46 in local", "line ??? in local")
    text = diagnose(-signal.SIGKILL, timed_out=True, timeout=5, tail=[helper_first.split("\n\n")[0], unknown_line])
    assert text.endswith("it was in kern.py:40 in spin"), text
    cuda = "Traceback (most recent call last):\n  ...\ntorch.AcceleratorError: CUDA error: an illegal memory access " \
           "was encountered\nCUDA kernel errors might be asynchronously reported\n"
    text = diagnose(-signal.SIGABRT, timed_out=False, timeout=60, tail=cuda)
    assert text.startswith("killed by SIGABRT") and "CUDA: torch.AcceleratorError: CUDA error: an illegal" in text
    text = diagnose(1, timed_out=False, timeout=60, tail="boom\nValueError: bad shape\n")
    assert text == "exited with status 1 without writing result.json: ValueError: bad shape"


def test_visible_gpus_follows_cuda_visible_devices():
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "2,3"}) == ["2", "3"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "0,-1,1"}) == ["0"]  # CUDA stops at an invalid entry
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == []
    assert visible_gpus({}, nvml_count=lambda: 2) == ["0", "1"]
    assert visible_gpus({}, nvml_count=lambda: 1 / 0) == []


class FakeSupervisor:
    """Records when each job ran and where; sleeps instead of running a worker."""

    def __init__(self, seconds=0.05):
        self.seconds, self.spans, self.lock = seconds, [], threading.Lock()

    def __call__(self, job, start, cancel=None):
        t0 = time.monotonic()
        time.sleep(self.seconds)
        with self.lock:
            self.spans.append((job, t0, time.monotonic()))
        return Outcome(job.run_dir, "done", "supported", 0, seconds=self.seconds)


def _overlap(a, b):
    return a[1] < b[2] and b[1] < a[2]


@pytest.mark.parametrize("parallel_cpu", [False, True])
def test_local_launcher_gives_each_gpu_one_worker_and_cpu_runs_alone(parallel_cpu):
    fake = FakeSupervisor()
    settings = LauncherSettings(parallel_cpu=parallel_cpu, cpu_workers=2)
    launcher = LocalLauncher(settings, gpus=["0", "1"], supervisor=fake)
    jobs = [Job(f"m{i}.yaml", f"/tmp/r{i}", device="cuda") for i in range(5)]
    jobs += [Job(f"c{i}.yaml", f"/tmp/c{i}", device="cpu") for i in range(3)]
    done = []
    launcher.run(jobs, lambda j: None, lambda j, o: done.append(j.run_dir))
    assert sorted(done) == sorted(j.run_dir for j in jobs)
    gpu = [s for s in fake.spans if s[0].device == "cuda"]
    cpu = [s for s in fake.spans if s[0].device == "cpu"]
    assert {s[0].gpu for s in gpu} == {"0", "1"}
    assert not any(_overlap(a, b) for i, a in enumerate(gpu) for b in gpu[i + 1:] if a[0].gpu == b[0].gpu)
    assert all(s[0].gpu is None for s in cpu)
    if parallel_cpu:
        assert all(s[0].threads == max(1, (os.cpu_count() or 1) // 2) for s in cpu)
    else:
        # CPU manifests wait for every GPU worker and never run beside anything.
        assert min(s[1] for s in cpu) >= max(s[2] for s in gpu)
        assert not any(_overlap(a, b) for i, a in enumerate(cpu) for b in cpu[i + 1:])


def test_local_launcher_refuses_gpu_jobs_without_gpus():
    with pytest.raises(ConfigError, match="sees no GPU"):
        LocalLauncher(LauncherSettings(), gpus=[], supervisor=FakeSupervisor()).run(
            [Job("m.yaml", "/tmp/r", device="cuda")], lambda j: None, lambda j, o: None)


def test_resume_keeps_measurement_settings(tmp_path):
    session = ses.open_session(tmp_path / "s")
    store.write_json(session / "suite.json", {"schema_version": 1, "overrides": ["measure=quick"]})
    with pytest.raises(ConfigError, match="only launcher settings may change"):
        run_suite(resume=session, overrides=["measure=rigorous"])
    with pytest.raises(ExpkitError, match="not a session folder"):
        run_suite(resume=tmp_path)


class InterruptedLauncher:
    """Ends one job with a usage error, then behaves as if Ctrl-C was pressed."""

    def gpus(self):
        return []

    def run(self, jobs, on_start, on_done):
        on_start(jobs[0])
        on_done(jobs[0], Outcome(jobs[0].run_dir, "error", None, 2, "cannot import module 'x'"))
        on_start(jobs[1])
        raise KeyboardInterrupt


def test_interrupted_suite_keeps_its_state_for_resume(tmp_path):
    out = run_suite([str(SUITE / "crash.yaml"), str(SUITE / "hang.yaml"), str(SUITE / "healthy.yaml")], FAST,
                    out=tmp_path / "s", launcher=InterruptedLauncher())
    assert out.interrupted and out.exit_code == 130
    assert [(r.run, r.status) for r in out.rows] == [("crash", "error"), ("hang", "unfinished"),
                                                      ("healthy", "unfinished")]
    runs = {r["run"]: r for r in json.loads((tmp_path / "s" / "session.json").read_text())["runs"]}
    assert runs["crash"]["status"] == "crashed" and "cannot import" in runs["crash"]["note"]
    assert runs["hang"]["status"] == "queued" and "--resume" in runs["hang"]["note"]
    assert (tmp_path / "s" / "session.md").is_file()


def test_cancelled_supervisor_kills_its_worker_and_leaves_no_result(tmp_path):
    cancel = threading.Event()
    cancel.set()
    job = Job(str(SUITE / "hang.yaml"), str(tmp_path / "r"), tuple(FAULTS), timeout=60)
    with pytest.raises(KeyboardInterrupt):
        manifest_process.supervise(job, "forkserver", cancel=cancel)
    assert not (tmp_path / "r" / "result.json").exists()


# --- whole suites ---------------------------------------------------------------------


def _rows(outcome):
    return {r.run: r for r in outcome.rows}


def test_fault_suite_keeps_the_healthy_result_and_names_each_cause(tmp_path):
    lines = []
    out = run_suite([str(SUITE)], FAULTS, out=tmp_path / "s", log=lines.append)
    rows = _rows(out)
    assert out.exit_code == 3 and not out.interrupted
    healthy = rows["healthy"]
    assert healthy.status == "done" and healthy.verdict != "invalid"
    assert healthy.result["measured"]["cases"]["n4096"]["speedup"] > 0
    for name, cause in (("crash", "killed by SIGSEGV"), ("hang", "timed out after 10 s"),
                        ("cuda-abort", "CUDA error: an illegal memory access")):
        r = rows[name]
        assert r.status == "crashed" and r.verdict == "invalid", (name, r)
        reasons = " ".join(r.result["reasons"])
        assert reasons.startswith("worker: ") and cause in reasons, (name, reasons)
        assert r.result["schema_version"] == store.RESULT_SCHEMA_VERSION
        assert (tmp_path / "s" / name / "report.md").is_file()
    assert "suite_kernels.py" in " ".join(rows["crash"].result["reasons"])  # the user's frame, not ctypes'
    assert "suite_kernels.py:" in rows["hang"].note and "in hang" in rows["hang"].note
    assert rows["broken"].status == "error" and "candidat: unknown key" in rows["broken"].note
    assert not (tmp_path / "s" / "broken" / "result.json").exists()
    # The session reads every run back, crashed ones included, and lists the broken one.
    s = ses.load_session(tmp_path / "s")
    assert {r.name: (r.result or {}).get("verdict") for r in s.runs} == {
        "broken": None, "crash": "invalid", "cuda-abort": "invalid", "hang": "invalid",
        "healthy": healthy.verdict}
    text = (tmp_path / "s" / "session.md").read_text()
    assert "candidat" in text and "SIGSEGV" in text
    assert any(line.startswith("done   hang: INVALID") for line in lines)
    for name in ("crash", "hang", "healthy"):
        w = json.loads((tmp_path / "s" / name / "worker.json").read_text())
        assert w["start_method"] == "forkserver" and w["timed_out"] == (name == "hang")
        assert (tmp_path / "s" / name / "worker.stdout").read_text().startswith("expkit worker pid")


def _two_healthy(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "suite_kernels.py").write_text((SUITE / "suite_kernels.py").read_text())
    for name in ("a", "b"):
        (folder / f"{name}.yaml").write_text((SUITE / "healthy.yaml").read_text().replace("name: healthy",
                                                                                           f"name: {name}"))
    return folder


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc and SIGKILL")
def test_killed_suite_keeps_finished_runs_and_resume_runs_the_rest(tmp_path, capsys):
    from expkit.cli import main

    folder = _two_healthy(tmp_path)
    session = tmp_path / "s"
    # A list of manifests is a suite too; SIGKILL leaves no chance to clean up.
    proc = subprocess.Popen([sys.executable, "-m", "expkit", "run", str(folder / "a.yaml"), str(folder / "b.yaml"),
                             *FAST, "--out", str(session)], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not (session / "a" / "result.json").is_file():
        assert proc.poll() is None and time.monotonic() < deadline, "the suite ended before its first result"
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    first = (session / "a" / "result.json").read_bytes()
    assert not (session / "b" / "result.json").exists()
    out_b = session / "b" / "worker.stdout"
    if out_b.is_file() and out_b.read_text():  # b had started: its worker must die with the suite
        pid = int(out_b.read_text().split()[3].rstrip(":"))
        deadline = time.monotonic() + 10
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(pid), "the worker outlived the killed suite"
    code = main(["run", "--resume", str(session), "--quiet"])
    text = capsys.readouterr().out
    assert (session / "a" / "result.json").read_bytes() == first  # not run again
    res_b = store.load_result(session / "b" / "result.json")
    assert res_b["verdict"] != "invalid" and "| a |" in text and "| b |" in text and "2 run(s)" in text
    words = [store.load_result(session / r / "result.json")["verdict"] for r in ("a", "b")]
    assert code == exit_code([Row(r, "m", "done", w) for r, w in zip("ab", words)])
    assert json.loads((session / "b" / "job.json").read_text())["overrides"] == FAST
    statuses = {r["run"]: r["status"] for r in json.loads((session / "session.json").read_text())["runs"]}
    assert statuses["b"] == "done" and statuses["a"] in ("running", "done")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_workers_see_only_their_gpu(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "k.py").write_text("import torch\n"
                                 "def inputs(p, g, d):\n    return (torch.randn(1 << 20, generator=g, device=d),)\n"
                                 "def relu(x):\n    return torch.relu(x)\n"
                                 "def clamp(x):\n    return x.clamp_min(0)\n")
    n = max(2, torch.cuda.device_count())
    for i in range(n):
        (folder / f"g{i}.yaml").write_text(f"name: g{i}\nclaim: {{speedup: 1.0, tolerance: 0.5}}\n"
                                           "baseline: k:relu\ncandidate: k:clamp\ninputs: {factory: k:inputs}\n"
                                           "cases: [{name: c}]\ndevice: cuda\n")
    out = run_suite([str(folder)], FAST, out=tmp_path / "s")
    gpus = visible_gpus()
    for r in out.rows:
        assert r.status == "done", r
        w = json.loads((tmp_path / "s" / r.run / "worker.json").read_text())
        env = json.loads((tmp_path / "s" / r.run / "env.json").read_text())
        assert w["gpu"] in gpus and env["gpu"]["visible_devices"] == w["gpu"] and env["gpu"]["index"] == 0


class _Running:
    """A job's process that has not ended: ``wait`` times out."""

    def wait(self, timeout):
        time.sleep(timeout)
        return None


def test_the_kill_waits_for_every_processs_dump_and_no_longer(tmp_path):
    """A loaded host can take more than a moment to run a side worker's dump handler: the
    supervisor waits until each stderr file holds a dump written since it asked, at most its
    grace, and not the whole grace once they all have."""
    (tmp_path / stack_dumps.STDERR).write_text("started\n")
    side = tmp_path / stack_dumps.WORKERS / "candidate-1"
    side.mkdir(parents=True)
    (side / "worker-stderr.txt").write_text("Thread 0x1 (most recent call first): an old dump\n")
    before = {p: p.stat().st_size for p in stack_dumps.stderr_files(tmp_path)}

    def dump_late():
        time.sleep(0.3)
        for p in before:
            with open(p, "a") as f:
                f.write('Current thread 0x2 (most recent call first):\n  File "k.py", line 3 in forward\n')

    writer = threading.Thread(target=dump_late)
    t0 = time.monotonic()
    writer.start()
    stack_dumps.await_dumps(tmp_path, before, _Running(), grace=5.0)
    waited = time.monotonic() - t0
    writer.join()
    assert 0.3 <= waited < 2.0
    t0 = time.monotonic()  # a file that never gets a dump: the whole grace, then the kill
    stack_dumps.await_dumps(tmp_path, {p: p.stat().st_size for p in before}, _Running(), grace=0.5)
    assert 0.5 <= time.monotonic() - t0 < 1.5
