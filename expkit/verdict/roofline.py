"""Achieved fraction of the device's peak, where the manifest declares the work of a call.

A case may declare ``flops`` (floating-point operations of one call), ``bytes`` (bytes
that must cross DRAM at least once) and ``precision`` (which of the catalog's peak rates
applies). From the measured median time ``t`` of each side:

* achieved rates ``flops / t`` and ``bytes / t``;
* their fractions of the catalog's peak compute rate (``<precision>_tflops``) and DRAM
  bandwidth (``memory_bandwidth_gbs``) for the GPU that ran (``catalog.match_device``);
* with both, the roofline: arithmetic intensity ``I = flops / bytes``, the attainable rate
  ``min(peak_flops, I * peak_bandwidth)``, which of the two bounds it (memory below the
  ridge point ``peak_flops / peak_bandwidth``, compute above), and the achieved fraction of
  that attainable rate.

Approximations, stated in every report that shows these figures: the peaks are datasheet
figures (dense tensor rates, boost clocks), not what the chip sustains; ``bytes`` is the
user's count, and a working set that fits in L2 can exceed the DRAM "peak". A fraction
above 1 therefore means the declared work, the peak, or that assumption is wrong, and the
report says so instead of celebrating it. CPUs have no catalog entry, so a CPU run gets
achieved rates only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional

from ..manifest import catalog

OVER_PEAK_NOTE = ("above the device's peak: the declared flops or bytes, the catalog's peak, or the "
                  "assumption that every byte crosses DRAM is wrong")


@dataclass(frozen=True)
class Work:
    """The declared work of one call of a case (``None``: not declared)."""

    flops: Optional[float] = None
    bytes: Optional[float] = None
    precision: Optional[str] = None

    @property
    def declared(self) -> bool:
        return self.flops is not None or self.bytes is not None


@dataclass(frozen=True)
class Peaks:
    """One device's peak rates in FLOP/s and B/s, each with its catalog source."""

    device: str
    name: str
    flops: Optional[float]
    bandwidth: Optional[float]
    precision: Optional[str]
    flops_source: str = ""
    bandwidth_source: str = ""


def peaks_for(gpu_name: Optional[str], precision: Optional[str]) -> Optional[Peaks]:
    """Catalog peaks of the device that ran, or None (a CPU, or a GPU the catalog lacks)."""
    if not gpu_name:
        return None

    spec = catalog.match_device(gpu_name)
    if spec is None:
        return None
    tflops = getattr(spec, f"{precision}_tflops", None) if precision else None
    bw = spec.memory_bandwidth_gbs
    return Peaks(spec.key, spec.name, tflops * 1e12 if tflops else None, bw * 1e9 if bw else None, precision,
                 spec.sources.get(f"{precision}_tflops", "") if precision else "",
                 spec.sources.get("memory_bandwidth_gbs", ""))


def side_rates(work: Work, seconds: float, peaks: Optional[Peaks]) -> Dict[str, Any]:
    """Achieved rates of one side at ``seconds`` per call, and their fractions of ``peaks``."""
    out: Dict[str, Any] = {"seconds": seconds, "flops_per_second": None, "bytes_per_second": None,
                           "compute_fraction": None, "memory_fraction": None, "roofline_fraction": None}
    if not seconds or seconds <= 0:
        return out
    if work.flops is not None:
        out["flops_per_second"] = work.flops / seconds
        if peaks is not None and peaks.flops:
            out["compute_fraction"] = out["flops_per_second"] / peaks.flops
    if work.bytes is not None:
        out["bytes_per_second"] = work.bytes / seconds
        if peaks is not None and peaks.bandwidth:
            out["memory_fraction"] = out["bytes_per_second"] / peaks.bandwidth
    if work.flops is not None and work.bytes is not None and peaks is not None and peaks.flops and peaks.bandwidth:
        attainable = min(peaks.flops, work.flops / work.bytes * peaks.bandwidth)
        out["roofline_fraction"] = out["flops_per_second"] / attainable
    elif work.flops is None and out["memory_fraction"] is not None:
        # Only bytes declared: the kernel is taken as memory-bound, the usual reason to count bytes alone.
        out["roofline_fraction"] = out["memory_fraction"]
    return out


def roofline(cases: Mapping[str, Mapping[str, Any]], work: Mapping[str, Work],
             gpu_name: Optional[str]) -> Optional[Dict[str, Any]]:
    """The ``roofline`` block of ``result.json`` (schema 2), or None where no case declares work.

    ``cases`` is ``result["measured"]["cases"]``; ``work`` maps case names to declared work.
    """
    declared = {name: w for name, w in work.items() if w.declared}
    if not declared:
        return None
    rows: Dict[str, Any] = {}
    notes = []
    device = None
    for name, w in declared.items():
        c = cases.get(name)
        if c is None:
            continue
        try:
            peaks = peaks_for(gpu_name, w.precision)
        except Exception as e:  # a broken catalog must not lose a finished measurement
            peaks = None
            notes.append(f"GPU catalog unavailable ({e}): achieved rates only")
        if peaks is not None:
            device = {"key": peaks.device, "name": peaks.name}
        row: Dict[str, Any] = {
            "flops": w.flops, "bytes": w.bytes, "precision": w.precision,
            "intensity": (w.flops / w.bytes) if w.flops is not None and w.bytes else None,
            "peak_flops_per_second": peaks.flops if peaks else None,
            "peak_bytes_per_second": peaks.bandwidth if peaks else None,
            "peak_sources": {"flops": peaks.flops_source, "bytes": peaks.bandwidth_source} if peaks else None,
            "bound": None,
        }
        if peaks is not None and peaks.flops and peaks.bandwidth and row["intensity"] is not None:
            row["bound"] = "memory" if row["intensity"] < peaks.flops / peaks.bandwidth else "compute"
        for side in ("baseline", "candidate"):
            row[side] = side_rates(w, float(c[side]["median"]), peaks)
        over = [k for k in ("compute_fraction", "memory_fraction", "roofline_fraction")
                if (row["candidate"][k] or 0) > 1 or (row["baseline"][k] or 0) > 1]
        row["note"] = OVER_PEAK_NOTE if over else ""
        rows[name] = row
    if gpu_name is None:
        notes.append("CPU run: the GPU catalog has no peak figures for CPUs, so only achieved rates are given")
    elif device is None and not notes:
        notes.append(f"{gpu_name} is not in the GPU catalog (conf/catalog/gpus.yaml): achieved rates only")
    if any(w.flops is not None and w.precision is None for w in declared.values()):
        notes.append("a case declares flops without `precision`: no peak compute rate to compare against")
    return {"device": device, "cases": rows, "notes": list(dict.fromkeys(notes))}  # one note per cause
