"""benchmarks/ab_overhead_table.py: two snapshots' defence_overhead.py runs in one table."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "ab_overhead_table.py"


def _run(measure_on: float, measure_off: float, wall_on: float, wall_off: float) -> dict:
    def one(phase, wall):
        return {"wall": wall, "measure_wall": phase, "timed": 1.0, "verdict": "supported",
                "speedups": {"c": 2.0}, "alarms": []}
    return {"/x/m.yaml": {"on": [one(measure_on, wall_on)], "off": [one(measure_off, wall_off)]}}


def test_each_snapshot_gets_its_own_overhead_from_its_files(tmp_path):
    (tmp_path / "old-1.json").write_text(json.dumps(_run(3.0, 2.0, 6.0, 4.0)))
    (tmp_path / "overhead-new-1.json").write_text(json.dumps(_run(2.2, 2.0, 4.4, 4.0)))
    out = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True,
                         check=True).stdout
    assert "| m.yaml | old | +50.0% | +50.0% |" in out
    assert "| m.yaml | new | +10.0% | +10.0% |" in out
    assert "| m.yaml | new | on | 1 | 2.20 (2.20-2.20) | 4.40 | 2.00 |" in out


def test_a_folder_without_runs_is_one_line_naming_it(tmp_path):
    got = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True)
    want = f"{tmp_path}: no defence_overhead.py --json files (*.json) there"
    assert got.returncode == 1 and got.stderr.strip() == want
