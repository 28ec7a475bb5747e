"""benchmarks/kernelbench_batch_eval.py (KernelBench's own batch loop over a generation run) and
benchmarks/batch_beside.py (an audit's cost beside it), on the CPU: KernelBench's evaluation is
stood in for by a module with its entry point, so the loop itself is what is tested."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import kernelbench_batch_eval as kbe  # noqa: E402

# KernelBench's entry point, its signature kept: runs both models on the CPU and compares.
FAKE_EVAL = textwrap.dedent('''
    import os, types
    import torch

    def eval_kernel_against_ref(original_model_src, custom_model_src, seed_num=42, num_correct_trials=1,
                                num_perf_trials=10, measure_performance=False, timing_method="cuda_event",
                                verbose=False, build_dir=None, device=None, backend="cuda",
                                precision=torch.float32, **kw):
        ref, new = {}, {}
        exec(original_model_src, ref)
        exec(custom_model_src, new)
        torch.manual_seed(seed_num)
        x = ref["get_inputs"]()
        ok = torch.allclose(ref["Model"]()(*x), new["ModelNew"]()(*x))
        seen = {"trials": (num_correct_trials, num_perf_trials), "timing": timing_method,
                "cache": os.environ.get("TORCHINDUCTOR_CACHE_DIR")}
        return types.SimpleNamespace(compiled=True, correctness=ok, runtime=2.0 if ok else -1.0,
                                     ref_runtime=4.0 if ok else -1.0, metadata=seen)
''')

PROBLEM = textwrap.dedent('''
    import torch
    class Model(torch.nn.Module):
        def forward(self, x):
            return x * 2
    def get_inputs():
        return [torch.randn(8)]
    def get_init_inputs():
        return []
''')


def _setup(tmp_path: Path, samples: tuple = (0, 1, 2), lost: bool = True) -> tuple:
    """KernelBench's stand-in, one problem (7) and a run of its ``samples`` (0 copies the
    reference, 1 is wrong, 2 hangs), with, where ``lost``, a candidate of a problem not there (9)."""
    kb = tmp_path / "kb"
    (kb / "src" / "kernelbench").mkdir(parents=True)
    (kb / "src" / "kernelbench" / "eval.py").write_text(FAKE_EVAL)
    problems = tmp_path / "problems"
    (problems / "level1").mkdir(parents=True)
    (problems / "level1" / "7_Double.py").write_text(PROBLEM)
    run = tmp_path / "run"
    run.mkdir()
    tails = {0: "class ModelNew(Model):\n    pass\n",
             1: "class ModelNew(Model):\n    def forward(self, x):\n        return x * 2 + 1\n",
             2: "import time\nclass ModelNew(Model):\n    def forward(self, x):\n        time.sleep(600)\n"}
    for sample in samples:
        (run / f"level_1_problem_7_sample_{sample}_kernel.py").write_text(PROBLEM + tails[sample])
    if lost:
        (run / "level_1_problem_9_sample_0_kernel.py").write_text(PROBLEM + tails[0])  # no problem file
    return kb, problems, run


def test_each_candidate_is_judged_in_its_own_spawned_process(tmp_path):
    kb, problems, run = _setup(tmp_path, samples=(0, 1))
    results = tmp_path / "out" / "kb.jsonl"
    results.parent.mkdir()
    recs = kbe.run(kb, run, problems, results, timeout=30.0)  # room for a spawn on a busy host
    by = {r["candidate"]: r for r in recs}
    assert [r["candidate"] for r in recs] == ["level_1_problem_7_sample_0", "level_1_problem_7_sample_1",
                                              "level_1_problem_9_sample_0"]
    ok, wrong, lost = (by[f"level_1_problem_{p}_sample_{s}"] for p, s in ((7, 0), (7, 1), (9, 0)))
    assert ok["result"] == "correct" and ok["speedup"] == 2.0
    # KernelBench's batch settings reached its entry point, and the candidate's own compile cache
    assert ok["metadata"]["trials"] == "(5, 100)" and ok["metadata"]["timing"] == "cuda_event"
    assert ok["metadata"]["cache"].endswith("level_1_problem_7_sample_0_kernel/inductor")
    assert wrong["result"] == "incorrect" and wrong["speedup"] is None
    assert lost["result"] == "no-problem" and "level1/9_*.py" in lost["error"]
    # every record is on disk, one line each, as it ended
    assert [json.loads(line)["candidate"] for line in results.read_text().splitlines()] == [r["candidate"] for r in recs]


def test_a_hang_is_a_timeout(tmp_path):
    """A hang is a timeout whatever its process's start cost, so a short limit judges it."""
    kb, problems, run = _setup(tmp_path, samples=(2,), lost=False)
    (hung,) = kbe.run(kb, run, problems, tmp_path / "kb.jsonl", timeout=5.0)
    assert hung["candidate"] == "level_1_problem_7_sample_2"
    assert hung["result"] == "timeout" and 5.0 <= hung["wall_s"] < 65.0


def test_no_candidate_starts_once_the_budget_is_spent(tmp_path):
    kb, problems, run = _setup(tmp_path)
    assert kbe.run(kb, run, problems, tmp_path / "kb.jsonl", timeout=20.0, budget=0.0) == []


def _audit(tmp_path: Path) -> Path:
    audit = tmp_path / "audit"
    audit.mkdir()
    (audit / "audit.json").write_text(json.dumps({"wall_seconds": 40.0, "slots": 1}))
    rows = [("level_1_problem_7_sample_0", 0, 1, False, "inconclusive", 10.0),
            ("level_1_problem_7_sample_0", 0, 2, True, "supported", 14.0),
            ("level_1_problem_7_sample_1", 1, 1, True, "supported", 30.0),
            ("level_1_problem_7_sample_2", 2, 1, True, "invalid", 2.0)]
    (audit / "candidates.jsonl").write_text("".join(
        json.dumps({"candidate": c, "problem": 7, "sample": s, "attempt": a, "final": f, "verdict": v,
                    "seconds": sec}) + "\n" for c, s, a, f, v, sec in rows))
    return audit


def test_the_table_sets_each_candidates_attempts_beside_kernelbenchs_wall(tmp_path):
    audit = _audit(tmp_path)
    kb = tmp_path / "kb.jsonl"
    kb.write_text("".join(json.dumps({"candidate": c, "result": r, "wall_s": w}) + "\n" for c, r, w in (
        ("level_1_problem_7_sample_0", "correct", 12.0), ("level_1_problem_7_sample_1", "correct", 20.0),
        ("level_1_problem_7_sample_9", "correct", 5.0))))
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "batch_beside.py"), str(audit), str(kb),
                          "--kinds", "0=identity,1=torch.compile,2=wrong"],
                         capture_output=True, text=True, check=True).stdout
    rows = {line.split(" | ")[0].strip("| "): line for line in out.splitlines() if line.startswith("| ")}
    # the identity's two attempts (10 + 14 s) against KernelBench's 12 s
    assert rows["identity"] == "| identity | 1 | 24.0 | 12.0 | 24.0 | 12.0 | 2.00 |"
    assert rows["**all**"] == "| **all** | 2 | 54.0 | 32.0 | 27.0 | 16.0 | 1.69 |"
    assert rows["level_1_problem_7_sample_0"] == "| level_1_problem_7_sample_0 | supported | 2 | 24.0 | correct | 12.0 | 2.00 |"
    assert "| 7 | 2 | 54.0 | 32.0 | 1.69 |" in out  # by problem
    assert "Left out, not finished by both: level_1_problem_7_sample_2, level_1_problem_7_sample_9." in out


def test_a_folder_that_is_no_audit_is_one_line(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "batch_beside.py"), str(tmp_path),
                           str(tmp_path / "kb.jsonl")], capture_output=True, text=True)
    assert proc.returncode == 2 and "not an audit folder" in proc.stderr and "Traceback" not in proc.stderr


def test_over_several_calls_a_problem_counts_where_both_finished_every_candidate(tmp_path):
    first, second = tmp_path / "1", tmp_path / "2"
    first.mkdir(), second.mkdir()
    audit1, audit2 = _audit(first), _audit(second)
    kb1, kb2 = first / "kb.jsonl", second / "kb.jsonl"
    names = ["level_1_problem_7_sample_0", "level_1_problem_7_sample_1", "level_1_problem_7_sample_2"]
    kb1.write_text("".join(json.dumps({"candidate": c, "result": "correct", "wall_s": 10.0}) + "\n" for c in names))
    kb2.write_text(json.dumps({"candidate": names[0], "result": "correct", "wall_s": 10.0}) + "\n")  # cut short
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "batch_beside.py"), str(audit1), str(kb1),
                          str(audit2), str(kb2)], capture_output=True, text=True, check=True).stdout
    # problem 7 from the first call, where KernelBench finished all three: 24 + 30 + 2 s against 30 s
    assert "| 7 | 1 | 3 | 56.0 | 30.0 | 1.87 |" in out
    assert "| **1 problems** | | 3 | 56.0 | 30.0 | 1.87 |" in out


def test_a_problem_the_audit_left_unfinished_is_not_counted_as_complete(tmp_path):
    audit = _audit(tmp_path)
    lines = [line for line in (audit / "candidates.jsonl").read_text().splitlines() if "sample_2" not in line]
    (audit / "candidates.jsonl").write_text("\n".join(lines) + "\n")  # the audit never finished sample 2
    kb = tmp_path / "kb.jsonl"
    kb.write_text("".join(json.dumps({"candidate": f"level_1_problem_7_sample_{s}", "result": "correct", "wall_s": 10.0})
                          + "\n" for s in range(3)))
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "batch_beside.py"), str(audit), str(kb),
                          str(audit), str(kb)], capture_output=True, text=True, check=True).stdout
    assert "| **0 problems** | | 0 | 0.0 | 0.0 | - |" in out


def test_a_kernelbench_folder_or_run_that_is_not_there_is_one_line(tmp_path):
    kb, problems, run = _setup(tmp_path)
    script = str(ROOT / "benchmarks" / "kernelbench_batch_eval.py")
    for args, says in (([str(tmp_path), str(run)], "no src/kernelbench/eval.py"),
                       ([str(kb), str(tmp_path / "none")], "no level_L_problem_P_sample_S_kernel.py files")):
        proc = subprocess.run([sys.executable, script, *args, "--problems-dir", str(problems),
                               "--results", str(tmp_path / "r.jsonl")], capture_output=True, text=True)
        assert proc.returncode == 2 and says in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
