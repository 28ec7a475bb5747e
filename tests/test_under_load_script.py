"""benchmarks/under_load.py: one honest manifest and one cheat, with no busy process (a real run each);
benchmarks/share_estimators.py, which starts its busy processes through under_load.py's ``spinning``."""

from __future__ import annotations

import sys
from pathlib import Path

import repo_scripts

sys.path.insert(0, str(Path(__file__).parent / "adversarial"))
import test_adversarial as T  # noqa: E402


def _rows(capsys):
    return [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and "---" not in line][1:]


def test_an_honest_manifest_gets_a_row_with_no_alarm_and_each_sides_wait(monkeypatch, capsys):
    monkeypatch.setattr(T, "HONEST", ("honest_gemv",))
    assert repo_scripts.load("benchmarks/under_load.py").main(["--busy", "0"]) == 0
    (row,) = _rows(capsys)
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[0] == "honest_gemv" and cells[2] == "none", row
    assert cells[4].startswith("c b ") and ", c c " in cells[4] and cells[4].count("%") == 2, row


def test_a_cheat_gets_a_row_saying_its_check_caught_it(monkeypatch, capsys):
    monkeypatch.setattr(T, "BAD", {"stale_buffer": T.BAD["stale_buffer"]})
    monkeypatch.setattr(T, "AWAITING_CALL_SITE", {})
    assert repo_scripts.load("benchmarks/under_load.py").main(["--busy", "1", "--bad"]) == 0
    (row,) = _rows(capsys)
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[:3] == ["stale_buffer", "invalid", "yes"] and "output" in cells[3], row


def test_a_prevented_cheat_gets_a_row_per_repeat_saying_whether_it_was_supported(monkeypatch, capsys):
    monkeypatch.setattr(T, "PREVENTED", ("sibling_trace",))
    assert repo_scripts.load("benchmarks/under_load.py").main(["--busy", "0", "--prevented", "--repeat", "2"]) == 0
    rows = [[c.strip() for c in r.strip("|").split("|")] for r in _rows(capsys)]
    assert [r[0] for r in rows] == ["sibling_trace", "sibling_trace"], rows
    assert all(r[2] == ("**no**" if r[1] == "supported" else "yes") for r in rows), rows


def test_the_share_probe_prints_a_row_per_load_and_candidate_with_the_figures_that_agree_on_one_thread(capsys):
    """benchmarks/share_estimators.py on one thread doing the product itself: every count of
    its threads is about one, on a quiet host and beside one busy process."""
    script = repo_scripts.load("benchmarks/share_estimators.py")
    assert script.main(["--busy", "0,1", "--blocks", "3", "--block-ms", "5", "--only", "one thread (mm)"]) == 0
    rows = _rows(capsys)
    assert [r.split("|")[1].strip() for r in rows] == ["0", "1"], rows
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[1] == "one thread (mm)" and cells[7] == "1", row
        assert all(0.5 < float(x) < 1.3 for x in cells[2:7]), row
