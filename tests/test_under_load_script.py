"""benchmarks/under_load.py: one honest manifest and one cheat, with no busy process (a real run each)."""

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
