"""The verdict-validity benchmark runs (its --quick mode, numbers not judged) and the rerun table reads runs."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data" / "results"


@pytest.mark.slow
def test_verdict_validity_quick_runs_and_writes_its_table(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "verdict_validity.py"), "--quick",
                          "--jobs", "2", "--out", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    data = json.loads((tmp_path / "verdict_validity.json").read_text())
    md = (tmp_path / "verdict_validity.md").read_text()
    assert data["meta"]["quick"] and len(data["cells"]) == 3 * 6 * 2
    for cell in data["cells"]:
        s = cell["summary"]
        assert s["trials"] == data["meta"]["trials"][cell["preset"]] == 4 and 0 <= s["coverage"] <= 1
        assert s["processes"] == cell["settings"]["processes"]
        assert s["timed_s_mean"] > 0 and sum(s["stopped"].values()) == s["trials"]
    assert "## `default`" in md and "two-level bootstrap" in md


def test_rerun_agreement_counts_which_intervals_hold_which_estimates(tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import rerun_agreement

    from expkit.report import store

    for i, (speedup, lo, hi) in enumerate([(40.0, 38.0, 45.0), (44.0, 41.0, 47.0), (50.0, 49.0, 51.0)]):
        run = tmp_path / "aa" / f"run-{i + 1}"
        shutil.copytree(DATA / "synthetic-processes", run)
        data = json.loads((run / store.RESULT).read_text())
        for c in data["measured"]["cases"].values():
            c.update(speedup=speedup, ci_low=lo, ci_high=hi)
        store.write_json(run / store.RESULT, data)
    assert rerun_agreement.main([str(tmp_path / "aa"), "--out", str(tmp_path / "out")]) == 0
    got = json.loads((tmp_path / "out" / "rerun_agreement.json").read_text())
    case = got["groups"][str(tmp_path / "aa")]["cases"]["square-1024"]
    # run 1 [38, 45] holds run 2's 44; run 2 [41, 47] holds neither 40 nor 50; run 3 [49, 51] holds neither
    assert [r["holds_others"] for r in case["runs"]] == [1, 0, 0]
    assert case["pairs"] == 6 and case["pairs_held"] == 1
    assert case["estimates_spread"] == pytest.approx(10 / 44)
    assert "1 of 6" in (tmp_path / "out" / "rerun_agreement.md").read_text()
