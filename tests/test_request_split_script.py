"""benchmarks/request_split.py: its logs joined across processes, the medians per worker,
and its hook on a real (short) CPU run, so that a renamed harness function breaks a test
rather than the next device session."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import repo_scripts

ROOT = Path(__file__).resolve().parents[1]


def _script():
    return repo_scripts.load("benchmarks/request_split.py")


def _write(folder: Path, pid: int, rows) -> None:
    (folder / f"{pid}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_split_joins_each_block_request_across_the_parent_and_its_worker(tmp_path):
    # The parent sends at 10.000 and its receive returns at 10.010; the worker's header
    # arrives at 10.001, decoded at 10.0012, handled 10.0013-10.0083 with a 5 ms sample
    # and a 1 ms collection inside, its reply sent from 10.0085.
    _write(tmp_path, 1, [["p_send", "baseline", "block", 10.000, 10.0001], ["p_recv", "baseline", None, 10.0001, 10.010]])
    _write(tmp_path, 2, [["role", "baseline"], ["recv", 3, "block", 9.9, 10.001, 10.0012],
                         ["sample", 8, 10.002, 10.007], ["handle", "block", 10.0013, 10.0083],
                         ["fn", "ledger.stop", 10.008, 10.0082], ["gc", 0, 10.003, 10.004],
                         ["send", 6, None, 10.0085, 10.009]])
    rows = _script().split(tmp_path)
    base = [r for r in rows if r.startswith("| baseline")][0]
    cells = [c.strip() for c in base.split("|")[1:-1]]
    assert cells[1] == "1"
    med = [float(c.split(" / ")[0]) for c in cells[2:11]]
    # deliver, decode, handle, in samples, reply, return, parent wait, gc in workers, gc in parent (ms)
    assert med == pytest.approx([1.0, 0.2, 7.0, 5.0, 0.2, 1.5, 10.0, 1.0, 0.0], abs=1e-6)
    assert "ledger.stop 0.200" in cells[11]
    assert [r for r in rows if r.startswith("| candidate")] == ["| candidate | 0 |"]


def test_per_process_tells_the_first_pair_from_later_ones(tmp_path):
    _write(tmp_path, 1, [["p_send", "baseline", "block", 0.0, 0.0]])
    _write(tmp_path, 5, [["role", "baseline"], ["handle", "judge", 0.0, 0.1], ["handle", "block", 1.0, 1.010],
                         ["fn", "sync after sample", 1.005, 1.006]])
    _write(tmp_path, 9, [["role", "baseline"], ["handle", "block", 2.0, 2.014],
                         ["fn", "sync after sample", 2.005, 2.009]])
    table = _script().per_process(tmp_path)
    assert table[2] == "| 5 | baseline | first (preflight) | 1 | 1.00 | - | 10.00 | - |"
    assert table[3] == "| 9 | baseline | later | 1 | 4.00 | - | 14.00 | - |"


def test_the_hook_logs_a_real_cpu_run(tmp_path, capsys):
    """The hook wraps the harness by name: a short defended CPU run logs every part."""
    rc = _script().main([str(ROOT / "manifests/examples/cpu/honest-win.yaml"), str(tmp_path),
                         "measure.max_seconds=0.05", "measure.processes=1", "measure.min_rounds=2"])
    assert rc == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if "baseline" in line or "candidate" in line]
    assert len(rows) == 2, out
    for part in ("ledger.stop", "after_block", "tamper_findings", "FunctionSnapshot.changed", "snapshot_state",
                 "host_rss", "relay.wait"):
        assert part in rows[0], (part, rows[0])
    rows = [json.loads(line) for f in (tmp_path / "logs-1").glob("*.jsonl") for line in f.read_text().splitlines()]
    assert sorted(r[1] for r in rows if r[0] == "role") == ["baseline", "candidate"]
