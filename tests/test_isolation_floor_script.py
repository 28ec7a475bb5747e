"""benchmarks/isolation_floor.py: the checks it makes free, the runs it alternates, its table
(the runs themselves are faked)."""

from __future__ import annotations

from pathlib import Path

import repo_scripts
from expkit.bench.sides import serve, side
from expkit.checks import activity


def _script():
    return repo_scripts.load("benchmarks/isolation_floor.py")


def _keep_originals(monkeypatch):
    for mod, name in ((side, "settle"), (side, "after_block"), (side, "opening"), (serve, "opening")):
        monkeypatch.setattr(mod, name, getattr(mod, name))
    for name in ("begin", "end"):
        monkeypatch.setattr(activity.ResourceAccount, name, getattr(activity.ResourceAccount, name))


def test_free_checks_replaces_each_per_block_check_with_a_no_op(monkeypatch):
    _keep_originals(monkeypatch)
    before = side.after_block
    _script().free_checks()
    assert side.after_block is not before and side.after_block(None, None, None, None) == []
    assert side.opening(True) is None and serve.opening(True) is None and side.settle(None) == 0.0
    account = activity.ResourceAccount(1)
    account.begin()
    assert account.end() is None


def test_the_cli_mode_frees_the_checks_only_when_asked(monkeypatch):
    _keep_originals(monkeypatch)
    import expkit.cli.commands

    seen = []
    monkeypatch.setattr(expkit.cli.commands, "main", lambda argv: seen.append(side.after_block) or 0)
    script = _script()
    original = side.after_block
    monkeypatch.delenv(script.FLAG, raising=False)
    assert script.main(["--cli", "run", "x.yaml"]) == 0
    monkeypatch.setenv(script.FLAG, "1")
    assert script.main(["--cli", "run", "x.yaml"]) == 0
    assert seen[0] is original and seen[1] is not original


def test_alternates_the_variants_each_round_and_reports_the_excess(monkeypatch, capsys, tmp_path):
    script = _script()
    order = []
    phase = {"defended": 1.5, "isolation only": 1.2, "undefended": 1.0}

    def fake(manifest, variant, max_seconds, extra, out):
        order.append(variant)
        assert max_seconds == 0.5 and extra == ["measure.processes=1"]
        return phase[variant]

    monkeypatch.setattr(script, "run_once", fake)
    assert script.main([str(tmp_path / "a.yaml"), "--rounds", "2", "--max-seconds", "0.5", "--",
                        "measure.processes=1"]) == 0
    names = list(script.VARIANTS)
    assert order == names + names[1:] + names[:1]  # the second round starts one variant later
    out = capsys.readouterr().out
    assert "| a.yaml | defended | 2 | 1.50 (1.50-1.50) | +50.0% (+50.0% to +50.0% by round) " \
           "| +25.0% (+25.0% to +25.0% by round) |" in out
    assert "| a.yaml | isolation only | 2 | 1.20 (1.20-1.20) | +20.0% (+20.0% to +20.0% by round) |  |" in out
    assert "| a.yaml | undefended | 2 | 1.00 (1.00-1.00) |  |  |" in out


def test_the_excess_round_by_round_shows_how_far_a_median_can_move():
    script = _script()
    rows = {"g.yaml": {"defended": [3.5, 3.6, 3.7], "isolation only": [3.0, 3.3, 3.1], "undefended": [2.5, 2.6, 2.5]}}
    line = [r for r in script.table(rows) if "| defended |" in r][0]
    # median 3.6 over the isolation median 3.1: +16.1%; round by round 3.5/3.0, 3.6/3.3, 3.7/3.1
    assert line.endswith("| +16.1% (+9.1% to +19.4% by round) |"), line


def test_a_run_asks_for_its_variants_overrides_and_reads_the_measure_stage(monkeypatch, tmp_path):
    script = _script()
    calls = []

    def fake_run(args, env, **kw):
        calls.append((args, env.get(script.FLAG)))
        out = Path(args[args.index("--out") + 1])
        out.mkdir(parents=True, exist_ok=True)
        (out / "result.json").write_text('{"stages": {"measure": 2.5}}')

    monkeypatch.setattr(script.subprocess, "run", fake_run)
    assert script.run_once(tmp_path / "m.yaml", "isolation only", 2.0, [], tmp_path / "o1") == 2.5
    assert script.run_once(tmp_path / "m.yaml", "undefended", 2.0, [], tmp_path / "o2") == 2.5
    (bare, flag1), (off, flag2) = calls
    assert flag1 == "1" and flag2 is None
    assert "defences.start_method=fork" in bare and "defences.fresh=off" in bare
    assert "defences.enabled=false" in off and "defences.start_method=fork" not in off
