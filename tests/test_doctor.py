"""``expkit doctor``: each line's wording on fake machines, and a real run on this one."""

from __future__ import annotations

import json
import os
import re
from dataclasses import replace
from pathlib import Path

import pytest

from expkit.bench.processes.shm_files import SHM_DIR
from expkit.cli import doctor, main
from expkit.cli.doctor import MISSING, NOTE, OK, Check, Machine

ROOT = Path(__file__).resolve().parent.parent


class NVMLError(Exception):
    pass


class LibraryNotFound(NVMLError):
    def __str__(self):
        return "NVML Shared Library Not Found"


class FakeNvml:
    """The pynvml calls the doctor makes (through timing.telemetry), with fixed readings."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 1, 2, 0
    NVMLError = NVMLError

    def __init__(self, sm_now: float = 1980.0, missing: bool = False) -> None:
        self.sm_now, self.missing = sm_now, missing

    def nvmlInit(self):
        if self.missing:
            raise LibraryNotFound()

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetName(self, h):
        return "NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetUUID(self, h):
        return "GPU-1"

    def nvmlSystemGetDriverVersion(self):
        return "580.159.04"

    def nvmlSystemGetCudaDriverVersion(self):
        return 13000

    def nvmlDeviceGetEccMode(self, h):
        return [1, 1]

    def nvmlDeviceGetMigMode(self, h):
        return [0, 0]

    def nvmlDeviceGetPowerManagementLimit(self, h):
        return 700_000

    def nvmlDeviceGetMaxClockInfo(self, h, clock):
        return 1980 if clock == self.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetClockInfo(self, h, clock):
        return self.sm_now if clock == self.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetTemperature(self, h, sensor):
        return 40

    def nvmlDeviceGetPowerUsage(self, h):
        return 100_000

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return 0


GPU_BOX = Machine(nvml=lambda: FakeNvml(), torch=lambda: ("2.11.0+cu130", True, "1 device(s), CUDA 13.0: H100"),
                  importable=lambda name: name == "cupti", which=lambda name: "/usr/local/cuda/bin/ncu",
                  loadavg=lambda: (0.5, 0.4, 0.3), cpus=lambda: 16, cpu_quota=lambda: None,
                  start_methods=lambda: ["fork", "spawn", "forkserver"], settings=lambda: "/x/conf",
                  python="3.12.3 (/usr/bin/python3)", system="Linux 6.8 x86_64", shm_left=lambda: [],
                  shm_free=lambda: 64 << 20)
LAPTOP = replace(GPU_BOX, nvml=lambda: FakeNvml(missing=True), torch=lambda: ("2.13.0+cpu", False, "a CPU-only build"),
                 importable=lambda name: False, which=lambda name: None, loadavg=lambda: (2.5, 2.0, 1.0),
                 cpus=lambda: 2, start_methods=lambda: ["spawn"])


def by_name(checks):
    return {c.name: c for c in checks}


def test_a_gpu_machine_with_everything_is_all_ok():
    checks = by_name(doctor.diagnose(GPU_BOX))
    assert checks["GPU (NVML)"] == Check("GPU (NVML)", OK, "NVIDIA H100 80GB HBM3, driver 580.159.04, CUDA driver 13.0")
    assert checks["clocks"].status == OK and checks["clocks"].found == "SM clock 1980 of 1980 MHz (100%) now"
    assert checks["CUPTI (cupti-python)"].status == OK and "measure.timer=kernel" in checks["CUPTI (cupti-python)"].found
    assert all(c.cost == "" for c in checks.values()), [c for c in checks.values() if c.cost]


def test_an_idle_clock_is_a_note_with_the_rule_that_applies():
    clocks = by_name(doctor.diagnose(replace(GPU_BOX, nvml=lambda: FakeNvml(sm_now=345))))["clocks"]
    assert clocks.status == NOTE and "345 of 1980 MHz (17%)" in clocks.found
    assert "under 60% of the maximum SM clock are left out" in clocks.cost


def test_each_missing_piece_says_what_it_costs_and_where_that_was_measured():
    checks = by_name(doctor.diagnose(LAPTOP))
    assert checks["torch"].status == MISSING and "`device: cuda` manifests stop before running" in checks["torch"].cost
    assert checks["NVML"].status == MISSING and "NVML Shared Library Not Found" in checks["NVML"].found
    assert "clocks" not in checks
    cupti = checks["CUPTI (cupti-python)"]
    assert cupti.cost.startswith("(GPU runs only) ") and "benchmarks/README.md" in cupti.cost
    assert checks["ncu"].cost.startswith("(GPU runs only) ")
    assert "1.72 s a manifest against 0.03 s" in checks["fork server"].cost
    assert "suite_overhead.md" in checks["fork server"].cost
    assert checks["CPU"].status == NOTE and "looks shared" in checks["CPU"].found


def test_every_measured_figure_in_a_cost_is_in_the_file_it_names():
    """A cost quotes a number only from the committed measurement it cites."""
    sources = {"benchmarks/README.md": ROOT / "benchmarks" / "README.md",
               "suite_overhead.md": ROOT / "evidence" / "harness-cost" / "suite" / "suite_overhead.md"}
    costs = [v for k, v in vars(doctor).items() if k.startswith("COST_") and isinstance(v, str)]
    for cost in costs:
        figures = re.findall(r"\d+\.\d+ ?(?:us|s)\b", cost)
        if not figures:
            continue
        cited = [p for name, p in sources.items() if name in cost]
        assert cited, f"a figure without a source: {cost}"
        text = " ".join(p.read_text() for p in cited)
        for f in figures:
            number = f.split()[0].rstrip("us")
            assert number in text, f"{f} is not in {cited}"


def test_cpu_quota_and_affinity_decide_shared():
    quiet = by_name(doctor.diagnose(replace(GPU_BOX, loadavg=lambda: (1.5, 1, 1), cpus=lambda: 16,
                                            cpu_quota=lambda: 2.0)))["CPU"]
    assert quiet.status == NOTE and "cgroup quota 2 CPUs" in quiet.found  # 1.5 busy of 2 allowed
    assert by_name(doctor.diagnose(replace(GPU_BOX, loadavg=lambda: (14.0, 1, 1))))["CPU"].status == OK


def test_broken_settings_are_a_missing_line_not_a_crash():
    def broken():
        raise RuntimeError("no conf/")
    line = by_name(doctor.diagnose(replace(GPU_BOX, settings=broken)))["settings (conf/)"]
    assert line.status == MISSING and "RuntimeError: no conf/" in line.found


GOLDEN = """\
ok  expkit                {version}, Python 3.12.3 (/usr/bin/python3), Linux 6.8 x86_64
--  torch                 2.13.0+cpu, no CUDA (a CPU-only build)
                          costs: `device: cuda` manifests stop before running (exit 2, see runner.run_manifest); `device: cpu` manifests run
"""


def test_shared_files_left_by_ended_processes_are_a_note_with_their_size_and_the_command_that_frees_them():
    ok = by_name(doctor.diagnose(GPU_BOX))["shared memory"]
    assert ok.status == OK and ok.found == (f"{SHM_DIR}: 64.0 MiB free (a CPU run's tensors pass through it; "
                                            "EXPKIT_SHM_DIR picks another folder); no files left by ended expkit processes")
    left = replace(GPU_BOX, shm_left=lambda: [(f"{SHM_DIR}/expkit-41-aa", 3 << 20), (f"{SHM_DIR}/expkit-42-bb", 1 << 19)])
    c = by_name(doctor.diagnose(left))["shared memory"]
    assert c.status == NOTE and c.found.startswith(f"{SHM_DIR}: 64.0 MiB free (a CPU run's tensors pass through it")
    assert c.found.endswith("; 2 file(s), 3.5 MiB, left by expkit processes that ended without removing them")
    assert f"rm {SHM_DIR}/expkit-*" in c.cost and "while no expkit process runs" in c.cost


def test_render_one_line_per_check_with_costs_indented_under_it():
    from expkit.core.version import __version__

    text = doctor.render(doctor.diagnose(LAPTOP))
    assert text.startswith(GOLDEN.format(version=__version__))
    lines = text.splitlines()
    assert sum(1 for line in lines if not line.startswith(" ")) == len(doctor.diagnose(LAPTOP))


def test_doctor_runs_on_this_machine(capsys):
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    for name in ("expkit", "torch", "CUPTI (cupti-python)", "ncu", "CPU", "fork server", "settings (conf/)"):
        assert re.search(rf"^(ok|--|!!)  {re.escape(name)} ", out, re.M), name
    assert main(["doctor", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["status"] for r in rows} <= {OK, MISSING, NOTE} and rows[0]["name"] == "expkit"


@pytest.mark.gpu
def test_doctor_sees_the_gpu(capsys):
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^ok  torch .*CUDA: ", out, re.M) and re.search(r"^ok  GPU \(NVML\) ", out, re.M), out
    assert re.search(r"^(ok|!!)  clocks ", out, re.M), out
    print(out)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "doctor.txt").write_text(out)


def test_the_commands_page_shows_the_committed_cpu_output():
    committed = (ROOT / "evidence" / "usability" / "doctor-cpu.txt").read_text()
    assert f"```\n{committed}```" in (ROOT / "docs" / "commands.md").read_text()
    assert committed.startswith("ok  expkit ") and "fork server" in committed
