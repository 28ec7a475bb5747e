"""Rewrite references to the old results folders (benchmarks/results/, reports/audits/) and debug scripts.

The evidence moved at 60f880e: folders named by date and machine became evidence/<topic>/<study>/;
inside a study, files other than its markdown are packed in ``raw.tar.xz``; per-commit CI logs,
plots and raw run tarballs were removed (still in git at 60f880e). This maps an old path, file or
folder, to where its content is now, from ``MOVED`` below and the tree as it is:

- a file still readable: its new path (a loose raw file: with ``.gz``);
- a file packed: ``STUDY/raw.tar.xz:MEMBER`` in prose, the archive itself in a markdown link;
- a removed file: ``60f880e:OLD`` (``git show 60f880e:OLD`` prints it);
- ``scripts/debug_*.py``: ``benchmarks/block_report.py`` and ``benchmarks/request_split.py`` for the two
  that had tests, ``60f880e:scripts/NAME.py`` for the removed ones.

    python scripts/moved_paths.py FILE...          # rewrite in place, print what changed
    python scripts/moved_paths.py --show OLD_PATH  # where one old path went
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tarfile
from functools import lru_cache
from pathlib import Path
from typing import Optional, Tuple

ROOT = Path(__file__).resolve().parents[1]
BASE = "60f880e"
OLD_ROOTS = ("benchmarks/results", "reports/audits")
R = "benchmarks/results/"
A = "reports/audits/"
E = "evidence/"
MOVED = {
 R+"allocator_81_conv_transposed_cpu.md": E+"kernelbench/allocator-81-conv-transposed-cpu.md",
 R+"block_checks_36c184b.md": E+"harness-cost/block-checks/block_checks_36c184b.md",
 R+"block_checks_652cd4b.md": E+"harness-cost/block-checks/block_checks_652cd4b.md",
 R+"block_floor": E+"harness-cost/block-floor",
 R+"block_length": E+"harness-cost/block-length",
 R+"block_requests": E+"harness-cost/block-requests",
 R+"check-chunks-cpu": E+"harness-cost/check-chunks",
 R+"ci-cpu": E+"ci/cpu-runs",
 R+"cpu-2026-11-26": E+"harness-cost/per-request-costs",
 R+"cpu-2026-11-26b": E+"harness-cost/block-request-parts",
 R+"cpu-2026-11-26c": E+"harness-cost/children-files-read",
 R+"cpu-2026-11-26d": E+"defences/interference-watch",
 R+"cpu-2026-11-26e": E+"defences/confine",
 R+"cpu-2026-11-26f": E+"defences/freeze",
 R+"cpu-2026-11-26g": E+"harness-cost/segments-and-calibration-once",
 R+"cpu-2026-11-26h": E+"harness-cost/work-around-each-call",
 R+"cpu-2026-11-27": E+"defences/busy-host",
 R+"cpu-2026-11-27b": E+"defences/busy-host-share-rule",
 R+"cpu-2026-11-27c": E+"harness-cost/default-cost-and-block-spread",
 R+"cpu-2026-11-27d": E+"harness-cost/default-cost-and-recheck",
 R+"cpu-2026-11-27e": E+"defences/busy-host-load-rule",
 R+"defence_overhead.json": E+"harness-cost/defence-overhead/defence_overhead.json",
 R+"defence_overhead.md": E+"harness-cost/defence-overhead/README.md",
 R+"defence_overhead_2026-11-24.md": E+"harness-cost/defence-overhead/timed_inputs_change.md",
 R+"defence_overhead_2026-11-25.md": E+"harness-cost/defence-overhead/settle_once.md",
 R+"defence_overhead_374f7ef.json": E+"harness-cost/defence-overhead/defence_overhead_374f7ef.json",
 R+"defence_overhead_58f93c6.json": E+"harness-cost/defence-overhead/defence_overhead_58f93c6.json",
 R+"defence_overhead_7f81c8d.json": E+"harness-cost/defence-overhead/defence_overhead_7f81c8d.json",
 R+"defence_overhead_as_shipped_1c7b7c1.json": E+"harness-cost/defence-overhead/as_shipped_1c7b7c1.json",
 R+"defence_overhead_as_shipped_1c7b7c1.md": E+"harness-cost/defence-overhead/as_shipped_1c7b7c1.md",
 R+"defence_overhead_b6a46ef_block10ms.json": E+"harness-cost/defence-overhead/defence_overhead_b6a46ef_block10ms.json",
 R+"defence_overhead_block_floor.json": E+"harness-cost/defence-overhead/defence_overhead_block_floor.json",
 R+"defence_overhead_c1de68b.json": E+"harness-cost/defence-overhead/defence_overhead_c1de68b.json",
 R+"defence_overhead_c1de68b.md": E+"harness-cost/defence-overhead/defence_overhead_c1de68b.md",
 R+"defence_overhead_cbe8cd4.json": E+"harness-cost/defence-overhead/defence_overhead_cbe8cd4.json",
 R+"defence_overhead_ef082f5.json": E+"harness-cost/defence-overhead/defence_overhead_ef082f5.json",
 R+"defence_overhead_ef082f5.md": E+"harness-cost/defence-overhead/defence_overhead_ef082f5.md",
 R+"defence_overhead_f0cde77.json": E+"harness-cost/defence-overhead/defence_overhead_f0cde77.json",
 R+"defence_overhead_issue13.md": E+"harness-cost/defence-overhead/issue13.md",
 R+"defence_overhead_issue13_after.json": E+"harness-cost/defence-overhead/issue13_after.json",
 R+"defence_overhead_issue13_before.json": E+"harness-cost/defence-overhead/issue13_before.json",
 R+"defence_overhead_settle_once.json": E+"harness-cost/defence-overhead/settle_once.json",
 R+"defence_overhead_tamper_fast.json": E+"harness-cost/defence-overhead/tamper_fast.json",
 R+"defence_overhead_timeline_cpu.md": E+"harness-cost/defence-overhead/timeline_cpu.md",
 R+"defence_profile_inprocess.md": E+"harness-cost/defence-overhead/profile_inprocess.md",
 R+"doctor-cpu.txt": E+"usability/doctor-cpu.txt",
 R+"fork_preload_cpu.md": E+"harness-cost/fork-preload-cpu.md",
 R+"gpu_block_cost": E+"harness-cost/gpu-block-cost",
 R+"gpu_preload": E+"harness-cost/gpu-worker-preload",
 R+"gpu_tests.log": E+"timing-fidelity/cuda-events/gpu_tests.log",
 R+"h100-2026-11-23/kernelbench-original-sizes": E+"kernelbench/original-sizes-first-runs",
 R+"h100-2026-11-23/kernelbench_l1_real_size.md": E+"kernelbench/original-sizes-first-runs/l1_real_size.md",
 R+"h100-2026-11-23/kernelbench_l1_real_size.jsonl": E+"kernelbench/original-sizes-first-runs/l1_real_size.jsonl",
 R+"h100-2026-11-23/kernelbench_after_timer_fix_b1dd7c7.md": E+"kernelbench/original-sizes-first-runs/after_timer_fix_b1dd7c7.md",
 R+"h100-2026-11-23/kernelbench_after_timer_fix_b1dd7c7.jsonl": E+"kernelbench/original-sizes-first-runs/after_timer_fix_b1dd7c7.jsonl",
 R+"h100-2026-11-23/contaminated-audits": E+"audits/contaminated",
 R+"h100-2026-11-23": E+"timing-fidelity/first-gpu-runs",
 R+"h100-2026-11-24/kernelbench-value-probe": E+"kernelbench/value-probe-gpu",
 R+"h100-2026-11-24/rerun": E+"verdicts/rerun-agreement-gpu",
 R+"h100-2026-11-24": E+"timing-fidelity/kernel-time-gpu",
 R+"h100-2026-11-25/kernelbench": E+"kernelbench/original-sizes",
 R+"h100-2026-11-25": E+"harness-cost/gpu-memory-fork-start",
 R+"h100-2026-11-25b": E+"harness-cost/block-floor-gpu",
 R+"h100-2026-11-25c": E+"harness-cost/worker-start-gpu",
 R+"h100-2026-11-26": E+"harness-cost/gpu-request-wait",
 R+"h100-2026-11-26b": E+"defences/confine-gpu",
 R+"h100-2026-11-26c": E+"defences/freeze-gpu",
 R+"h100-2026-11-27": E+"ci/gpu-suite/ad1af5f",
 R+"h100-2026-11-27j": E+"ci/gpu-suite/bab1090",
 R+"h200-2026-11-25d": E+"harness-cost/relay-on-16-cores",
 R+"h200-2026-11-26": E+"harness-cost/request-ledger-gpu",
 R+"h200-2026-11-26b": E+"harness-cost/segments-gpu",
 R+"h200-2026-11-26c": E+"ci/gpu-suite/c79dc2e",
 R+"h200-2026-11-26d": E+"harness-cost/gpu-flush-wait",
 R+"h200-2026-11-26e": E+"ci/gpu-suite/755c426",
 R+"h200-2026-11-26f": E+"harness-cost/gpu-example-three-ways",
 R+"h200-2026-11-27b": E+"ci/gpu-suite/929a4d0",
 R+"h200-2026-11-27c": E+"ci/gpu-suite/60de532",
 R+"h200-2026-11-27d": E+"ci/gpu-suite/9a3b4d6",
 R+"h200-2026-11-27e": E+"ci/gpu-suite/c690c76",
 R+"h200-2026-11-27f": E+"harness-cost/relay-batch-threads-gpu",
 R+"h200-2026-11-27g": E+"ci/gpu-suite/2016e69",
 R+"h200-2026-11-27h": E+"ci/gpu-suite/84dd6eb",
 R+"h200-2026-11-27i": E+"ci/gpu-suite/9e9cec8",
 R+"harness-cost-cpu": E+"harness-cost/cpu",
 R+"harness-cost-cpu/elementwise_2026-11-25.md": E+"harness-cost/cpu/elementwise.md",
 R+"harness-cost-cpu/profile_inprocess_2026-11-25.md": E+"harness-cost/cpu/profile_inprocess.md",
 R+"isolation_floor": E+"harness-cost/isolation-floor",
 R+"kernel_time_probe": E+"timing-fidelity/kernel-time-probe",
 R+"kernelbench_cpu_l1_shrink64_2026-11-23.jsonl": E+"kernelbench/cpu-l1-shrink64/identity.jsonl",
 R+"kernelbench_cpu_l1_shrink64_2026-11-23.md": E+"kernelbench/cpu-l1-shrink64/identity.md",
 R+"kernelbench_cpu_l1_shrink64_2026-11-23_after.jsonl": E+"kernelbench/cpu-l1-shrink64/identity_after_fixes.jsonl",
 R+"kernelbench_cpu_l1_shrink64_2026-11-23_after.md": E+"kernelbench/cpu-l1-shrink64/identity_after_fixes.md",
 R+"kernelbench_cpu_l1_shrink64_2026-11-24.jsonl": E+"kernelbench/cpu-l1-shrink64/value_probe.jsonl",
 R+"kernelbench_cpu_l1_shrink64_2026-11-24.md": E+"kernelbench/cpu-l1-shrink64/value_probe.md",
 R+"kernelbench_cpu_l1_shrink64_2026-11-24_fix79.jsonl": E+"kernelbench/cpu-l1-shrink64/value_probe_fix79.jsonl",
 R+"kernelbench_cpu_l1_shrink64_refuted17_quick3.jsonl": E+"kernelbench/cpu-l1-shrink64/refuted17_quick3.jsonl",
 R+"kernelbench_cpu_l1_shrink64_refuted17_quick3.md": E+"kernelbench/cpu-l1-shrink64/refuted17_quick3.md",
 R+"kernelbench_cpu_smoke.md": E+"kernelbench/cpu-smoke.md",
 R+"kernelbench_inventory.md": E+"kernelbench/inventory.md",
 R+"late_checks": E+"harness-cost/late-checks",
 R+"matrix_chain_quick_processes_cpu.md": E+"verdicts/matrix-chain-quick-processes-cpu.md",
 R+"measure_phases": E+"harness-cost/measure-phases",
 R+"ncu_cache_all.csv.gz": E+"timing-fidelity/cuda-events/ncu_cache_all.csv.gz",
 R+"ncu_cache_none.csv.gz": E+"timing-fidelity/cuda-events/ncu_cache_none.csv.gz",
 R+"oracle_margins.txt": E+"numerics/oracle_margins.txt",
 R+"pin_cores": E+"harness-cost/pin-cores",
 R+"poison_compiled.txt": E+"defences/poison_compiled.txt",
 R+"rerun-cpu-2026-11-23": E+"verdicts/rerun-agreement-cpu",
 R+"round_trip_and_prepare_cpu.md": E+"harness-cost/round-trip-and-prepare-cpu.md",
 R+"state_probes": E+"harness-cost/state-probes",
 R+"suite_overhead.json": E+"harness-cost/suite/suite_overhead.json",
 R+"suite_overhead.md": E+"harness-cost/suite/suite_overhead.md",
 R+"suite_scaling.json": E+"harness-cost/suite/suite_scaling.json",
 R+"suite_scaling.md": E+"harness-cost/suite/suite_scaling.md",
 R+"timing_fidelity.json": E+"timing-fidelity/timing_fidelity.json",
 R+"timing_fidelity.log": E+"timing-fidelity/timing_fidelity.log",
 R+"timing_fidelity.md": E+"timing-fidelity/timing_fidelity.md",
 R+"timing_fidelity_events_h200.json": E+"timing-fidelity/cuda-events/timing_fidelity.json",
 R+"timing_fidelity_events_h200.log": E+"timing-fidelity/cuda-events/timing_fidelity.log",
 R+"timing_fidelity_events_h200.md": E+"timing-fidelity/cuda-events/README.md",
 R+"verdict_validity.json": E+"verdicts/verdict_validity.json",
 R+"verdict_validity.log": E+"verdicts/verdict_validity.log",
 R+"verdict_validity.md": E+"verdicts/verdict_validity.md",
 R+"worker_start": E+"harness-cost/worker-start",
 A+"h100-2026-11-23": E+"audits/published-claims",
 A+"h100-2026-11-23-rerun": E+"audits/published-claims-rerun",
 A+"h100-2026-11-23-night": E+"audits/published-claims-night",
}
SPECIAL = {  # CI logs kept as the latest run or as findings
    R + "ci-cpu/ci_run_801dd12.md": E + "ci/latest-cpu.md",
    R + "ci-cpu/ci_run_d395532.md": E + "defences/ci-finding-renice-siblings.md",
    R + "ci-cpu/ci_run_00f1e34.md": E + "defences/ci-finding-extra-cores-supported.md",
}
SCRIPTS = {  # debug scripts: two tested ones became benchmarks, the rest were removed (still at 60f880e)
    "scripts/debug_block_report.py": "benchmarks/block_report.py",
    "scripts/debug_request_split.py": "benchmarks/request_split.py",
}
OLD_SCRIPT = re.compile(r"(?<![\w:/])scripts/(?:debug_[a-z_]+|probe_kernel_time)\.py")
OLD_PATH = re.compile(r"(?:benchmarks/results|reports/audits)(?:/[^\s)`\"'\],;|<>*{]*)?")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def new_path(old: str) -> Optional[str]:
    """The path ``old`` was moved to (before packing), or None if it was under no moved folder."""
    old = old.rstrip("/")
    if old in SPECIAL:
        return SPECIAL[old]
    keys = [k for k in MOVED if old == k or old.startswith(k + "/")]
    if not keys:
        return None
    k = max(keys, key=len)
    return MOVED[k] + old[len(k):]


@lru_cache(maxsize=None)
def _members(archive: str) -> frozenset:
    with tarfile.open(ROOT / archive) as t:
        return frozenset(t.getnames())


def locate(old: str) -> Tuple[str, Optional[str]]:
    """(path, member): where the content of ``old`` is now; member is None unless packed.
    A removed path gives (BASE + ":" + old, None)."""
    old = old.rstrip("/")
    if old in OLD_ROOTS:
        return ("evidence", None)
    new = new_path(old)
    if new is not None:
        if (ROOT / new).exists():
            return (new, None)
        if (ROOT / (new + ".gz")).exists():
            return (new + ".gz", None)
        parts = new.split("/")
        for depth in range(len(parts) - 1, 1, -1):
            study = "/".join(parts[:depth])
            archive = study + "/raw.tar.xz"
            if (ROOT / archive).exists():
                member = "/".join(parts[depth:])
                names = _members(archive)
                if member in names:
                    return (archive, member)
                if any(n.startswith(member + "/") for n in names):
                    return (archive, member + "/")
    return (f"{BASE}:{old}", None)


def rewrite(text: str, doc: str) -> str:
    """``text`` of the file ``doc`` (relative to the root) with old results paths replaced."""
    here = os.path.dirname(doc)

    def link(m: "re.Match[str]") -> str:
        target, _, frag = m.group(1).partition("#")
        if re.match(r"[a-z]+:", target):
            return m.group(0)
        full = os.path.normpath(os.path.join(here, target))
        if not full.startswith(OLD_ROOTS):
            return m.group(0)
        path, _member = locate(full)
        if path.startswith(BASE + ":"):
            path = "evidence/MOVED.md"
        return "](" + os.path.relpath(path, here or ".") + ("#" + frag if frag else "") + ")"

    def prose(m: "re.Match[str]") -> str:
        s, tail = m.group(0), ""
        while s and s[-1] in ".:":
            s, tail = s[:-1], s[-1] + tail
        path, member = locate(s)
        return (f"{path}:{member}" if member else path) + tail

    def script(m: "re.Match[str]") -> str:
        return SCRIPTS.get(m.group(0), f"{BASE}:{m.group(0)}")

    return OLD_SCRIPT.sub(script, OLD_PATH.sub(prose, LINK.sub(link, text)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*")
    ap.add_argument("--show", metavar="OLD_PATH")
    a = ap.parse_args(argv)
    if a.show:
        path, member = locate(a.show)
        print(f"{path}:{member}" if member else path)
        return 0
    for f in a.files:
        text = Path(f).read_text()
        new = rewrite(text, os.path.relpath(Path(f).resolve(), ROOT))
        if new != text:
            Path(f).write_text(new)
            print("rewrote", f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
