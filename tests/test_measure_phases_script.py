"""benchmarks/measure_phases.py: the runs it makes and what it leaves behind (the runs are faked)."""

from __future__ import annotations

from types import SimpleNamespace

import expkit.runner
import repo_scripts
from expkit.bench.sides import replicates
from expkit.timing import measure

def _script():
    return repo_scripts.load("benchmarks/measure_phases.py")


def test_alternates_off_and_on_after_a_discarded_pair_and_puts_the_wrapped_parts_back(monkeypatch, capsys):
    seen = []

    def fake(manifest, overrides, out_dir=None):
        seen.append(overrides[1])
        measure._own_width(None, 0, None, None, 0)  # one stopping check, through the script's wrapper
        cases = {"c": {"timed_seconds": 0.25}}
        return SimpleNamespace(result={"measured": {"cases": cases}, "stages": {"measure": 1.0}})

    monkeypatch.setattr(expkit.runner, "run_manifest", fake)
    monkeypatch.setattr(measure, "_own_width", lambda *a: 0.1)
    before = (replicates.Replicates.open, measure._own_width)
    assert _script().main(["--rounds", "2"]) == 0
    assert seen == ["defences.enabled=false", "defences.enabled=true"] * 3
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| 1 ") or
            line.startswith("| 2 ")]
    assert len(rows) == 4 and all("| 0.250 |" in r and "(1)" in r for r in rows)  # round 0 not printed
    assert (replicates.Replicates.open, measure._own_width) == before
