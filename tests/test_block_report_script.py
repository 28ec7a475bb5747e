"""benchmarks/block_report.py: its hook's log read back, the GPU records summarised, and
the hook itself on a faked timer (the script's runs are for the device)."""

from __future__ import annotations

import os
from types import SimpleNamespace

import repo_scripts


def _script():
    return repo_scripts.load("benchmarks/block_report.py")


def test_summarise_reads_a_line_of_the_hook_per_block():
    # pid calls chunks attempts queue hold span envelope record wall hold_ok source pre first last push
    # buffers buffer_s start_s record_s
    rows = [["1", "8", "1", "1", "0.0016", "0.003", "0.007", "0.010", "0.002", "0.014", "1", "kernel", "0",
             "10", "20", "30", "1", "1.5", "130", "900"],
            ["2", "8", "1", "2", "0.0024", "0.003", "0.007", "0.012", "0.002", "0.016", "0", "kernel", "0",
             "10", "20", "30", "1", "1.5", "150", "1100"]]
    got = _script().summarise(rows)
    assert got["queue us a call"] == 250.0  # (200 + 300) / 2
    assert got["retried"] == 0.5 and got["hold ok"] == 0.5
    assert abs(got["beyond envelope and record ms"] - 2.0) < 1e-9
    assert got["recorder start us"] == 140.0 and got["first event record us"] == 1000.0
    assert _script().summarise([]) == {}


def test_timeline_splits_a_blocks_records_by_tag(tmp_path, capsys):
    # the hold (tag 0), a flush (1), a call (2), a flush, a call: ticks in ns
    (tmp_path / "7-20.txt").write_text("kernel 0 0 1000 7\nkernel 1 1000 1500 7\nkernel 2 1600 2600 7\n"
                                       "kernel 1 2700 3000 7\nkernel 3 3100 4100 7\n")
    _script().timeline(tmp_path)
    row = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| 7-20")][0]
    assert [c.strip() for c in row.split("|")[1:-1]] == ["7-20.txt", "5", "0.4", "1.0", "0.1", "3.1"]


def test_the_hook_logs_each_block_of_a_timer(tmp_path, monkeypatch):
    from expkit.timing import cuda_timer

    log = tmp_path / "blocks.log"
    monkeypatch.setenv("EXPKIT_DEBUG_BLOCKS", str(log))

    def sample(self, fn, number):
        self.last_block = SimpleNamespace(calls=number, chunks=1, attempts=1, queue_s=1e-3, hold_s=2e-3,
                                          span_s=3e-3, envelope_s=4e-3, record_s=5e-4, hold_ok=True,
                                          source="kernel")
        return 1e-4

    monkeypatch.setattr(cuda_timer.CudaTimer, "sample", sample)
    from expkit.timing import cupti_recorder

    for name in ("push", "start"):
        monkeypatch.setattr(cupti_recorder.CuptiRecorder, name, getattr(cupti_recorder.CuptiRecorder, name))
    monkeypatch.setattr(cupti_recorder, "_callbacks", cupti_recorder._callbacks)
    import torch

    monkeypatch.setattr(torch.cuda.Event, "record", torch.cuda.Event.record)
    exec(_script().HOOK, {})
    timer = SimpleNamespace(last_block=None, _recorder=None)
    cuda_timer.CudaTimer.sample(timer, lambda: None, 8)
    cuda_timer.CudaTimer.sample(timer, lambda: None, 8)
    lines = log.read_text().splitlines()
    assert len(lines) == 2 and lines[0].split()[:3] == [str(os.getpid()), "8", "1"]
    assert len(lines[0].split()) == 20
