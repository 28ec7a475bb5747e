"""benchmarks/recheck_aftermath.py: round 1 and rounds 2-9 against each process's median block."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "recheck_aftermath.py"


def _script():
    spec = importlib.util.spec_from_file_location("recheck_aftermath", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _rows(side, seconds, replicate="0", case="c"):
    return [{"case": case, "side": side, "replicate": replicate, "round": str(i), "seconds": str(s)}
            for i, s in enumerate(seconds)]


def test_a_slow_second_round_shows_against_the_processs_median():
    steady = [1.0] * 11
    slow = [1.0, 1.2] + [1.0] * 9
    got = _script().aftermath(_rows("baseline", steady) + _rows("candidate", slow))
    assert got[("c", "baseline")] == ([1.0], [1.0])
    assert got[("c", "candidate")][0] == [pytest.approx(1.2)]
    assert got[("c", "candidate")][1] == [pytest.approx(1.0)]


def test_each_process_is_taken_against_its_own_median():
    got = _script().aftermath(_rows("candidate", [1.0] * 10) + _rows("candidate", [3.0, 6.0] + [3.0] * 8,
                                                                      replicate="1"))
    assert got[("c", "candidate")][0] == [pytest.approx(1.0), pytest.approx(2.0)]


def test_a_process_too_short_to_have_later_rounds_is_left_out():
    assert _script().aftermath(_rows("candidate", [1.0, 1.1])) == {}


def test_the_move_is_round_1s_share_of_the_processs_log_ratio_of_medians():
    mod = _script()
    rows = _rows("baseline", [2.0] * 11) + _rows("candidate", [1.0, 3.0] + [1.0] * 9)
    assert mod.shift(rows)["c"] == [pytest.approx(0.0)]  # one slow block of eleven leaves the median
    rows = _rows("baseline", [2.0] * 3) + _rows("candidate", [1.0, 1.5, 1.0])
    assert mod.shift(rows)["c"] == [pytest.approx(0.0)]
    rows = _rows("baseline", [2.0] * 4) + _rows("candidate", [1.0, 1.5, 1.0, 1.5])
    # median candidate 1.25 with round 1, 1.0 without: the speedup reads 1.6 where it is 2
    assert mod.shift(rows)["c"] == [pytest.approx(math.log(1.6) - math.log(2.0))]
