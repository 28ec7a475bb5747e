"""benchmarks/defence_overhead.py: which settings each run gets (the runs themselves are faked)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import expkit.runner
import repo_scripts

ROOT = Path(__file__).resolve().parents[1]


def _script():
    return repo_scripts.load("benchmarks/defence_overhead.py")


def _runs(monkeypatch, argv):
    seen = []

    def fake(manifest, overrides, out_dir=None):
        seen.append(list(overrides))
        cases = {"c": {"wall_seconds": 1.0, "timed_seconds": 0.5, "speedup": 1.0}}
        return SimpleNamespace(result={"measured": {"cases": cases}, "verdict": "supported", "checks": []})

    monkeypatch.setattr(expkit.runner, "run_manifest", fake)
    assert _script().main(argv) == 0
    return seen


def test_runs_pin_the_timed_work_unless_asked_to_measure_as_shipped(monkeypatch, capsys):
    manifest = str(ROOT / "manifests/examples/cpu/honest-win.yaml")
    pinned = _runs(monkeypatch, [manifest, "--repeats", "1", "--max-seconds", "2"])
    # two warm-ups (0.2 s each), "off" first so that the "on" one starts the fork server,
    # then one run each way, alternating on and off
    assert [o for o in pinned[2] if o.startswith("measure.")] == ["measure.max_seconds=2.0", "measure.target_ci=0.0"]
    assert [o[-1] for o in pinned] == ["defences.enabled=false", "defences.enabled=true",
                                       "defences.enabled=true", "defences.enabled=false"]
    shipped = _runs(monkeypatch, [manifest, "--repeats", "1", "--as-shipped"])
    assert [o for o in shipped[2] if o.startswith("measure.")] == []  # quick's own target and budget
    assert shipped[2][0] == "measure=quick"
    assert "| honest-win.yaml | on | 1 |" in capsys.readouterr().out
