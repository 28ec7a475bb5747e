"""benchmarks/kernelbench_beside.py joins a sweep's records with KernelBench's own evaluation's."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "kernelbench_beside.py"


def _write(path: Path, recs):
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def test_each_problem_run_by_both_is_one_row_from_its_latest_records(tmp_path):
    sweep = _write(tmp_path / "sweep.jsonl", [
        {"mode": "identity", "problem": "level1/19_ReLU.py", "verdict": "inconclusive", "wall_s": 40.0},
        {"mode": "identity", "problem": "level1/19_ReLU.py", "verdict": "supported", "wall_s": 20.0,
         "expkit_wall_s": 13.0, "peak_gpu_gib": 49.96, "plain_peak_gib": 12.0},
        {"mode": "identity", "problem": "level1/1_Square_matrix_multiplication_.py", "verdict": "supported",
         "wall_s": 18.0},
        {"mode": "identity", "problem": "level1/40_LayerNorm.py", "verdict": "supported", "wall_s": 19.0},
    ])
    kb = _write(tmp_path / "kb.jsonl", [
        {"mode": "kb-eval", "problem": "level1/19_ReLU.py", "result": "correct", "wall_s": 50.0, "peak_gpu_gib": 30.0},
        {"mode": "kb-eval", "problem": "level1/1_Square_matrix_multiplication_.py", "result": "correct",
         "wall_s": 3.0},
    ])
    out = subprocess.run([sys.executable, str(SCRIPT), "--sweep", str(sweep), "--kbeval", str(kb),
                          "--out", str(tmp_path / "t.md")], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = (tmp_path / "t.md").read_text().splitlines()
    rows = [line for line in lines if line.startswith("| ") and not line.startswith("| problem")]
    assert [r.split(" | ")[0] for r in rows] == ["| 1_Square_matrix_multiplication_", "| 19_ReLU"]  # 40 only in one
    relu = rows[1].split(" | ")
    assert relu[1:4] == ["supported", "20.0", "13.0"] and relu[6] == "0.40", relu  # the later record, 20 / 50
    assert "2 problems" in lines[-1] and "expkit slower on 1 of 2" in lines[-1], lines[-1]


def test_walls_are_compared_only_where_kernelbenchs_evaluation_finished(tmp_path):
    sweep = _write(tmp_path / "s.jsonl", [{"mode": "identity", "problem": f"level1/{n}_p.py", "wall_s": 15.0}
                                          for n in (1, 2)])
    kb = _write(tmp_path / "k.jsonl", [
        {"mode": "kb-eval", "problem": "level1/1_p.py", "result": "correct", "wall_s": 30.0},
        {"mode": "kb-eval", "problem": "level1/2_p.py", "result": "error", "wall_s": 2.0},
    ])
    out = subprocess.run([sys.executable, str(SCRIPT), "--sweep", str(sweep), "--kbeval", str(kb)],
                         capture_output=True, text=True, timeout=60)
    last = out.stdout.strip().splitlines()[-1]
    assert last.startswith("1 problems KernelBench's evaluation finished (1 more it did not)"), last
    assert "expkit slower on 0 of 1" in last, last


def test_files_with_no_problem_in_common_are_an_error(tmp_path):
    sweep = _write(tmp_path / "s.jsonl", [{"mode": "identity", "problem": "level1/1_a.py", "wall_s": 1.0}])
    kb = _write(tmp_path / "k.jsonl", [{"mode": "kb-eval", "problem": "level1/2_b.py", "wall_s": 1.0}])
    out = subprocess.run([sys.executable, str(SCRIPT), "--sweep", str(sweep), "--kbeval", str(kb)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "no problem is in both" in out.stderr


def test_a_later_file_holds_the_later_record(tmp_path):
    rec = {"mode": "identity", "problem": "level1/1_a.py", "verdict": "inconclusive", "wall_s": 9.0}
    old = _write(tmp_path / "old.jsonl", [rec])
    new = _write(tmp_path / "new.jsonl", [{**rec, "verdict": "supported"}])
    kb = _write(tmp_path / "k.jsonl", [{"mode": "kb-eval", "problem": "level1/1_a.py", "wall_s": 3.0}])
    out = subprocess.run([sys.executable, str(SCRIPT), "--sweep", str(old), str(new), "--kbeval", str(kb)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "| 1_a | supported | 9.0 |" in out.stdout, out.stdout
