"""``benchmarks/clock_rules.py --per-call``: the allowance a call each manifest's runs need.

Seeded rows (side, envelope, timed, calls, harness) in the shape the load script records:
64 calls a request, the harness at 8 us a call, honest rows leaving ``behind`` seconds a call
outside their spans, cheat rows with half their timed seconds moved out of the reply."""

from __future__ import annotations

import json
import random

from tests.repo_scripts import load

rules = load("benchmarks/clock_rules.py")


def _rows(rng: random.Random, *, per_call: float, behind: float = 0.0, moved: float = 0.0) -> list:
    calls, harness = 64, 8e-6
    out = []
    for side in ("baseline", "candidate") * 20:
        left, hidden = (behind, moved) if side == "candidate" else (0.0, 0.0)
        timed = calls * per_call
        lag = 0.0008 + 0.0002 * rng.random()
        out.append([side, timed + calls * (harness + left) + lag, timed * (1 - hidden), calls,
                    calls * (harness + left) + timed * hidden])
    return out


def test_an_honest_run_needs_about_what_it_leaves_behind_beyond_the_other_terms():
    """12 us a call left behind, 0.77 ms a request; the other terms allow 0.628 ms of it
    (0.5 ms and a quarter of the harness's 0.512 ms), so it needs about 2.2 us a call more."""
    got = rules.per_call_needed(_rows(random.Random(1), per_call=35e-6, behind=12e-6))
    assert 1e-6 < got["quartile"] < 3.5e-6


def test_the_table_keeps_the_largest_need_of_an_honest_manifest_and_the_smallest_of_a_cheat(tmp_path, capsys):
    runs = [{"name": "honest_own_pool", "requests": _rows(random.Random(s), per_call=35e-6, behind=b)}
            for s, b in ((1, 0.0), (2, 12e-6))]
    runs += [{"name": "adaptive_reply_forger", "requests": _rows(random.Random(s), per_call=p, moved=0.5)}
             for s, p in ((3, 300e-6), (4, 100e-6))]
    rows = {r["name"]: r for r in rules.per_call_table(runs)}
    honest, cheat = rows["honest_own_pool"], rows["adaptive_reply_forger"]
    assert honest["kind"] == "honest" and 1e-6 < honest["quartile"] < 3.5e-6  # the 12 us run, not the 0
    # half of each 100 us call moved: 50 us a call, less what the other terms allow (~30 us)
    assert cheat["kind"] == "cheat" and 30e-6 < cheat["quartile"] < 50e-6
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in runs))
    assert rules.main(["--per-call", str(path)]) == 0
    out = capsys.readouterr().out
    assert "| honest_own_pool | honest | 2 |" in out and "| adaptive_reply_forger | cheat | 2 |" in out
