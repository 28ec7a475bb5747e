"""benchmarks/audit_cost.py: an audit's cost by kind of candidate, from the audit folder alone."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _audit(tmp_path: Path) -> Path:
    audit = tmp_path / "a"
    audit.mkdir()
    (audit / "audit.json").write_text(json.dumps({"wall_seconds": 30.0, "slots": 2}))
    records = [  # (candidate, sample, attempt, final, preset, verdict, seconds, stages)
        ("p1_s0", 0, 1, False, "quick", "inconclusive", 10.0, {"start": 1.0, "preflight": 2.0, "measure": 6.0}),
        ("p1_s0", 0, 2, True, "default", "supported", 20.0, {"start": 1.0, "preflight": 2.0, "measure": 16.0}),
        ("p2_s0", 0, 1, True, "quick", "supported", 12.0, {"start": 3.0, "preflight": 4.0, "measure": 4.0}),
        ("p1_s2", 2, 1, True, "quick", "invalid", 2.0, {"start": 0.5, "preflight": 1.0}),
    ]
    lines = []
    for name, sample, attempt, final, preset, verdict, seconds, stages in records:
        run = f"{name}-{attempt}"
        (audit / run).mkdir()
        (audit / run / "result.json").write_text(json.dumps({"stages": stages}))
        lines.append(json.dumps({"candidate": name, "sample": sample, "attempt": attempt, "final": final,
                                 "preset": preset, "verdict": verdict, "seconds": seconds, "run_dir": run}))
    (audit / "candidates.jsonl").write_text("\n".join(lines) + "\n")
    return audit


def test_the_table_counts_final_verdicts_first_attempts_and_every_attempts_seconds(tmp_path):
    audit = _audit(tmp_path)
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "audit_cost.py"), str(audit),
                          "--kinds", "0=identity,2=wrong", "--tsv", str(tmp_path / "s.tsv")],
                         capture_output=True, text=True, check=True).stdout
    rows = {line.split(" | ")[0].strip("| "): line for line in out.splitlines() if line.startswith("| ")}
    # identity: two final verdicts; first attempts 10 and 12 s (median 11); 42 worker seconds over three attempts
    assert rows["identity"] == "| identity | 2 | 2 supported | 11.0 (10.0-12.0) | 42 | 2.0, 3.0, 5.0 |"
    assert rows["wrong"] == "| wrong | 1 | 1 invalid | 2.0 (2.0-2.0) | 2 | 0.5, 1.0, - |"
    assert "3 candidates with a final verdict, 4 attempts, 2 workers at a time; wall 30 s (10.00 s a candidate)" in out
    tsv = (tmp_path / "s.tsv").read_text().splitlines()
    assert len(tsv) == 5 and tsv[2].split("\t")[:5] == ["p1_s0", "2", "default", "supported", "20.000"]


def test_a_folder_that_is_no_audit_and_a_bad_kinds_list_are_one_line_each(tmp_path):
    script = str(ROOT / "benchmarks" / "audit_cost.py")
    for args, says in (([str(tmp_path)], "not an audit folder"),
                       ([str(_audit(tmp_path)), "--kinds", "identity"], "--kinds 'identity': give sample=name pairs")):
        proc = subprocess.run([sys.executable, script, *args], capture_output=True, text=True)
        assert proc.returncode == 2 and says in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_the_retries_table_sets_the_budgets_estimate_beside_what_each_retry_took(tmp_path):
    """p1_s0's first pass: 10 s, 6 of them measuring, its processes 6 rounds each; default asks
    10 rounds, so the estimate is twice 4 + 6 x 10/6 = 28 s, against 100 s (ten times the
    seconds: quick's 3 s cap to default's 30) before; the retry took 20 s."""
    audit = _audit(tmp_path)
    run = audit / "p1_s0-1" / "result.json"
    result = json.loads(run.read_text())
    result["measured"] = {"cases": {"c": {"per_process": [{"rounds": 6}, {"rounds": 6}, {"rounds": 7}]}}}
    run.write_text(json.dumps(result))
    (audit / "audit.json").write_text(json.dumps({"wall_seconds": 30.0, "slots": 2, "overrides": []}))
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "audit_cost.py"), str(audit), "--retries"],
                         capture_output=True, text=True, check=True).stdout
    rows = [line for line in out.splitlines() if line.startswith("| p")]
    assert rows == ["| p1_s0 | 1 | 10.0 | measure=default | 28.0 | 100.0 | measure=default | 20.0 |"]


def test_the_requests_table_gives_each_sides_median_request_seconds_by_kind(tmp_path):
    """Two identity first attempts whose baselines' blocks took 3 and 5 s: median 4; the
    retry (attempt 2) is not a first attempt and is left out."""
    audit = _audit(tmp_path)
    for run, block, timed in (("p1_s0-1", 3.0, 0.5), ("p2_s0-1", 5.0, 0.7), ("p1_s0-2", 99.0, 9.0)):
        path = audit / run / "result.json"
        result = json.loads(path.read_text())
        result["memory"] = {"measured": {"baseline": {"requests": {"block": {"seconds": block, "count": 7},
                                                                   "hello": {"seconds": 0.001, "count": 3}}},
                                         "candidate": {"requests": {"block": {"seconds": 1.0, "count": 7}}}}}
        result["measured"] = {"cases": {"c": {"timed_seconds": timed}}}
        path.write_text(json.dumps(result))
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "audit_cost.py"), str(audit),
                          "--kinds", "0=identity,2=wrong", "--requests"], capture_output=True, text=True,
                         check=True).stdout
    rows = {tuple(c.strip() for c in line.strip("|").split("|")[:2]): line for line in out.splitlines()
            if line.startswith("| ") and "median" not in line}
    assert rows[("baseline", "block")] == "| baseline | block | 4.000 | - |"
    assert rows[("candidate", "block")] == "| candidate | block | 1.000 | - |"
    assert rows[("measurement", "timed calls")] == "| measurement | timed calls | 0.600 | - |"
    assert rows[("measurement", "stage wall")] == "| measurement | stage wall | 5.000 | - |"
    assert ("baseline", "hello") not in rows  # under 5 ms in every kind
