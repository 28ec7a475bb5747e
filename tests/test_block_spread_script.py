"""benchmarks/block_spread.py: the spread it reports is computed from a run's samples."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "block_spread.py"


def _script():
    spec = importlib.util.spec_from_file_location("block_spread", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _rows(baseline, candidate, replicate="0", case="c"):
    out = []
    for i, (b, c) in enumerate(zip(baseline, candidate)):
        out.append({"case": case, "replicate": replicate, "side": "baseline", "round": str(i), "seconds": str(b)})
        out.append({"case": case, "replicate": replicate, "side": "candidate", "round": str(i), "seconds": str(c)})
    return out


def test_steady_blocks_have_no_spread():
    s = _script().spread(_rows([2.0] * 5, [1.0] * 5))
    assert s == {"iqr": 0.0, "q05_q95": 0.0, "sd_log_ratio": 0.0}


def test_the_spread_is_relative_to_each_processs_median_and_the_ratio_is_paired():
    mod = _script()
    # Both sides slower together in round 2: no spread in the ratio, some in the blocks.
    together = mod.spread(_rows([1, 1, 2, 1], [0.5, 0.5, 1.0, 0.5]))
    assert together["sd_log_ratio"] == pytest.approx(0.0)
    assert together["q05_q95"] > 0.8
    # One side alone: the ratio moves by log 2 in one round of four.
    alone = mod.spread(_rows([1, 1, 2, 1], [0.5] * 4))
    assert alone["sd_log_ratio"] == pytest.approx(math.log(2) / 2)
    # A second process ten times slower spreads nothing: each is taken against its own median.
    two = mod.spread(_rows([1, 1], [0.5, 0.5]) + _rows([10, 10], [5, 5], replicate="1"))
    assert two == {"iqr": 0.0, "q05_q95": 0.0, "sd_log_ratio": 0.0}
