"""The SLURM launcher: its submitit parameters, its limits, and a real run through
submitit's local executor (the same jobs, pickled and run in fresh processes, with
no SLURM behind them)."""

import json
from pathlib import Path

import pytest

from expkit.core.errors import ConfigError
from expkit.suites.launchers import LocalLauncher, SubmititLauncher, make_launcher
from expkit.manifest.settings import LauncherSettings, load_settings
from expkit.suites.suite import run_suite

SUITE = Path(__file__).parent / "data" / "suite"
FAST = ["measure=quick", "measure.min_seconds=0.05", "measure.max_seconds=0.3", "measure.warmup_seconds=0.01",
        "oracle.trials=1", "defences.isolate=false"]


def test_slurm_config_group_composes():
    s = load_settings(["launcher=slurm", "launcher.partition=gpu", "launcher.account=proj"]).launcher
    assert (s.name, s.cluster, s.partition, s.account, s.gpus_per_task) == ("slurm", "slurm", "gpu", "proj", 1)
    assert s.time_minutes * 60 >= s.timeout_seconds + 60
    assert load_settings([]).launcher.name == "local"


def test_slurm_parameters(tmp_path):
    s = LauncherSettings(name="slurm", partition="gpu", account="proj", gpus_per_task=1, cpus_per_task=6,
                         mem_gb=32, time_minutes=45, timeout_seconds=1800)
    launcher = make_launcher(s, tmp_path)
    assert isinstance(launcher, SubmititLauncher) and launcher.gpus() is None
    assert launcher.parameters("cuda") == {
        "name": "expkit", "timeout_min": 45, "nodes": 1, "tasks_per_node": 1, "gpus_per_node": 1,
        "cpus_per_task": 6, "mem_gb": 32, "slurm_partition": "gpu", "slurm_account": "proj"}
    assert launcher.parameters("cpu")["gpus_per_node"] == 0
    assert launcher.max_timeout == 45 * 60 - 60  # the most an audit's retry may be given, a minute kept
    # submitit accepts them (its local executor ignores the slurm_ ones; SLURM itself needs srun).
    local = make_launcher(LauncherSettings(name="slurm", cluster="local", partition="gpu", time_minutes=45), tmp_path)
    assert local.executor("cpu")._executor.parameters["timeout_min"] == 45
    assert isinstance(make_launcher(LauncherSettings(), tmp_path), LocalLauncher)


def test_slurm_time_limit_must_leave_room_for_the_supervisor(tmp_path):
    with pytest.raises(ConfigError, match="must exceed launcher.timeout_seconds"):
        SubmititLauncher(LauncherSettings(name="slurm", time_minutes=30, timeout_seconds=1800), tmp_path)
    with pytest.raises(ConfigError, match="one of local, slurm"):
        make_launcher(LauncherSettings(name="kubernetes"), tmp_path)


@pytest.mark.slow
def test_suite_through_submitit_local_executor(tmp_path):
    lines = []
    out = run_suite([str(SUITE / "healthy.yaml"), str(SUITE / "crash.yaml")],
                    FAST + ["launcher=slurm", "launcher.cluster=local", "launcher.poll_seconds=0.5",
                            "launcher.timeout_seconds=120", "launcher.time_minutes=5"],
                    out=tmp_path / "s", log=lines.append)
    rows = {r.run: r for r in out.rows}
    assert rows["healthy"].status == "done" and rows["healthy"].verdict != "invalid"
    assert rows["crash"].verdict == "invalid" and "killed by SIGSEGV" in rows["crash"].note
    assert out.exit_code == 3
    # Each manifest was its own submitit job: the job folders hold submitit's logs.
    jobs = [p for p in (tmp_path / "s" / ".submitit").iterdir() if p.is_dir() and p.name.isdigit()]
    assert len(jobs) == 2
    w = json.loads((tmp_path / "s" / "healthy" / "worker.json").read_text())
    assert w["start_method"] == "spawn"  # a fresh interpreter on the node


@pytest.mark.slow
def test_an_audit_runs_through_the_slurm_path(tmp_path):
    """``expkit audit`` through submitit's local executor: one job per attempt, in a fresh
    interpreter, with the candidate's own compile caches in its job's environment."""
    import shutil

    from expkit.suites.audit import run_audit

    data = Path(__file__).parent.parent / "examples" / "generation-run"
    run = tmp_path / "runs" / "r"
    run.mkdir(parents=True)
    shutil.copytree(data / "KernelBench", tmp_path / "KernelBench")
    shutil.copy(data / "runs" / "tiny" / "level_1_problem_2_sample_1_kernel.py", run)
    out = run_audit([str(run)], out=tmp_path / "a", device="cpu", preset="quick",
                    overrides=FAST[1:] + ["launcher=slurm", "launcher.cluster=local", "launcher.poll_seconds=0.5",
                                          "launcher.timeout_seconds=120", "launcher.time_minutes=5"])
    (rec,) = out.records
    assert rec["correct"] and rec["status"] == "done", rec
    job = json.loads((out.session_dir / rec["run_dir"] / "job.json").read_text())
    assert dict(job["env"])["TRITON_CACHE_DIR"].endswith("level_1_problem_2_sample_1/triton")
    assert json.loads((out.session_dir / rec["run_dir"] / "worker.json").read_text())["start_method"] == "spawn"
