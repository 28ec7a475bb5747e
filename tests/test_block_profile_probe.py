"""benchmarks/probes/block_profile.py: its tables, from profiles and held-run logs written here."""

import cProfile
import json

from repo_scripts import load

probe = load("benchmarks/probes/block_profile.py")


def _busy(n: int) -> int:
    return sum(i * i for i in range(n))


def test_each_roles_profiles_are_merged_and_listed_by_cumulative_seconds(tmp_path, capsys):
    for name, n in (("baseline-11.pstats", 200_000), ("baseline-12.pstats", 100_000), ("candidate-13.pstats", 1000)):
        prof = cProfile.Profile()
        prof.enable()
        _busy(n)
        prof.disable()
        prof.dump_stats(str(tmp_path / name))
    probe.report(tmp_path, top=5)
    out = capsys.readouterr().out
    assert "## baseline: 2 worker process(es)" in out and "## candidate: 1 worker process(es)" in out
    baseline = out.split("## candidate")[0]
    row = next(line for line in baseline.splitlines() if line.startswith("| _busy ("))
    assert row.split(" | ")[1] == "2"  # one call in each of the two baseline processes, merged


def test_held_runs_are_listed_per_process_in_order_in_milliseconds(tmp_path, capsys):
    runs = [{"role": "baseline", "n": 1, "hold_s": 1e-4, "held_s": 1e-4, "queue_s": 0.0015, "span_s": 0.0357,
             "ok": True, "wall_s": 8.7797},
            {"role": "baseline", "n": 2, "hold_s": 0.0023, "held_s": 0.0023, "queue_s": 0.0011, "span_s": 0.0379,
             "ok": False, "wall_s": 0.0386}]
    (tmp_path / "held-626.jsonl").write_text("".join(json.dumps(r) + "\n" for r in runs))
    probe.held_runs(tmp_path)
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("baseline held-626: n, hold asked (ms)")
    assert lines[1:] == ["  1, 0.1, 0.1, 1.5, 35.7, 8779.7, True", "  2, 2.3, 2.3, 1.1, 37.9, 38.6, False"]
