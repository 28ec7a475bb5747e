"""``benchmarks/outside_clock_load.py``: one run of a manifest, its verdict, the clock's figures
and its block requests as the parent's clock saw them, with the overrides ``--set`` adds."""

from __future__ import annotations

from tests.repo_scripts import load

load_study = load("benchmarks/outside_clock_load.py")


def test_one_run_records_its_requests_and_honours_the_overrides_it_is_given(tmp_path):
    got = load_study.one(load_study._manifest("honest_gemv", tmp_path), tmp_path / "run",
                         ["measure.processes=2"])
    assert got["verdict"] in ("supported", "inconclusive", "refuted")
    sides = {row[0] for row in got["requests"]}
    assert sides == {"baseline", "candidate"} and all(len(row) == 5 for row in got["requests"])
    assert got["clock"]["requests"]["candidate"] == sum(1 for row in got["requests"] if row[0] == "candidate")
    assert "candidate_median_calls" in got["clock"]
    result = (tmp_path / "run" / "result.json").read_text()
    assert '"processes": 2' in result
