"""Achieved fraction of peak against the GPU catalog's figures, worked by hand."""

import pytest

from expkit.manifest import catalog
from expkit.verdict.roofline import OVER_PEAK_NOTE, Work, peaks_for, roofline, side_rates


def measured(tb, tc):
    return {"baseline": {"median": tb}, "candidate": {"median": tc}}


def test_memory_bound_case_on_an_h100():
    spec = catalog.lookup("h100-sxm")
    bw, fp16 = spec.memory_bandwidth_gbs * 1e9, spec.fp16_tflops * 1e12
    # 1 GFLOP over 1 GB: intensity 1 FLOP/B, far below any GPU's ridge point -> memory-bound.
    work = Work(flops=1e9, bytes=1e9, precision="fp16")
    t = 2e9 / bw  # half the bandwidth
    out = roofline({"c": measured(2 * t, t)}, {"c": work}, "NVIDIA H100 80GB HBM3")  # as the driver says
    row = out["cases"]["c"]
    assert out["device"]["key"] == "h100-sxm"
    assert row["bound"] == "memory" and row["intensity"] == pytest.approx(1.0)
    assert row["candidate"]["memory_fraction"] == pytest.approx(0.5)
    assert row["candidate"]["compute_fraction"] == pytest.approx(1e9 / t / fp16)
    # Attainable at I = 1 is the bandwidth, so the roofline fraction equals the memory fraction.
    assert row["candidate"]["roofline_fraction"] == pytest.approx(0.5)
    assert row["baseline"]["roofline_fraction"] == pytest.approx(0.25)
    assert row["note"] == ""


def test_a_fraction_above_peak_is_called_out():
    spec = catalog.lookup("l4")
    t = 1e9 / (spec.memory_bandwidth_gbs * 1e9) / 2  # twice the DRAM bandwidth: impossible from DRAM
    out = roofline({"c": measured(t, t)}, {"c": Work(bytes=1e9)}, "NVIDIA L4")
    assert out["cases"]["c"]["candidate"]["memory_fraction"] == pytest.approx(2.0)
    assert out["cases"]["c"]["note"] == OVER_PEAK_NOTE


def test_cpu_and_unknown_devices_get_rates_only():
    out = roofline({"c": measured(1.0, 0.5)}, {"c": Work(flops=1e9, bytes=1e6, precision="fp32")}, None)
    row = out["cases"]["c"]["candidate"]
    assert row["flops_per_second"] == pytest.approx(2e9) and row["compute_fraction"] is None
    assert out["device"] is None and "CPU" in out["notes"][0]
    assert peaks_for("Some Future GPU", "fp32") is None


def test_no_declared_work_means_no_roofline_block():
    assert roofline({"c": measured(1.0, 0.5)}, {"c": Work()}, None) is None
    assert side_rates(Work(flops=1.0), 0.0, None)["flops_per_second"] is None
