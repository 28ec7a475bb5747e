"""The target check: would the candidate's kernels launch, and how well, on the claim's GPU?

A claim is made for a GPU (``target.gpu``, a catalog name, and/or explicit
``target.limits``). A kernel that needs more shared memory, threads or registers per
block than that GPU gives cannot launch there, even if it ran on the GPU in hand (the
seed story: a 160 KB tile on an L4 that gives a block 48 KB, 99 KB opt-in), so the run
is ``invalid`` for that claim. A kernel that launches but keeps far fewer warps resident
on the target than on the GPU in hand gets a warning: its speed will not transfer.
"""

from __future__ import annotations

import dataclasses
import math
from typing import List, Optional, Sequence

from ..core.findings import WARNING, Finding
from ..manifest.spec import Target
from ..manifest import catalog
from .occupancy import occupancy

# A kernel keeping under half the resident warps on the target that it keeps on the GPU
# in hand is flagged: latency hiding, and so speed, need not transfer.
OCCUPANCY_DROP = 0.5


def _target_spec(target: Target):

    if not target.gpu:
        return None
    spec = catalog.lookup(target.gpu)
    lim = target.limits
    changes = {}
    if lim.shared_memory_per_block is not None:
        changes["shared_memory_per_block_optin"] = lim.shared_memory_per_block
        changes["shared_memory_per_block"] = min(spec.shared_memory_per_block, lim.shared_memory_per_block)
    if lim.threads_per_block is not None:
        changes["max_threads_per_block"] = lim.threads_per_block
    if lim.registers_per_thread is not None:
        changes["max_registers_per_thread"] = lim.registers_per_thread
    return dataclasses.replace(spec, **changes) if changes else spec


def _desc(k) -> str:
    return (f"kernel `{k.short_name if hasattr(k, 'short_name') else k.name}` (block {list(k.block)}, "
            f"{k.registers_per_thread} registers/thread, {k.shared_memory} B shared memory)")


def _in_hand(gpu_name: Optional[str]):
    """The catalog's entry for the GPU the run is on, named by the worker that measured it.

    Never read through ``torch.cuda`` here: the runner's process calls this, and CUDA
    initialised in it sends every later worker to the fork server (on the H100 the honest
    GPU example's replicates did, in the GPU start tests)."""
    if not gpu_name:
        return None

    try:
        return catalog.match_device(gpu_name)
    except Exception:
        return None


def check_kernels(target: Target, kernels: Sequence, *, case: Optional[str] = None,
                  gpu_name: Optional[str] = None) -> List[Finding]:
    """Findings for each distinct launch configuration among ``kernels``; ``gpu_name`` is the
    GPU in hand (as the baseline's worker reported it), compared where it is not the target."""

    spec = _target_spec(target)
    lim = target.limits
    if spec is None and all(v is None for v in dataclasses.astuple(lim)):
        return []
    here = _in_hand(gpu_name)
    findings: List[Finding] = []
    seen = set()
    for k in kernels:
        if k.registers_per_thread is None or not k.block:
            continue  # memsets and copies carry no launch resources
        key = (k.name, tuple(k.block), k.registers_per_thread, k.shared_memory)
        if key in seen:
            continue
        seen.add(key)
        threads = math.prod(k.block)
        smem = k.shared_memory or 0
        if spec is None:
            problems = []
            if lim.threads_per_block is not None and threads > lim.threads_per_block:
                problems.append(f"{threads} threads per block; the target allows {lim.threads_per_block}")
            if lim.shared_memory_per_block is not None and smem > lim.shared_memory_per_block:
                problems.append(f"{smem} B shared memory per block; the target allows {lim.shared_memory_per_block} B")
            if lim.registers_per_thread is not None and k.registers_per_thread > lim.registers_per_thread:
                problems.append(f"{k.registers_per_thread} registers per thread; the target allows "
                                f"{lim.registers_per_thread}")
            if problems:
                findings.append(Finding("target", False, f"{_desc(k)} cannot launch on the target: needs "
                                        + "; ".join(problems), case))
            continue
        occ = occupancy(spec, threads, k.registers_per_thread, smem)
        if not occ.launchable:
            findings.append(Finding("target", False, f"{_desc(k)} cannot launch on {spec.name}: {occ.reason}", case))
            continue
        msg = (f"{_desc(k)} launches on {spec.name}: {occ.blocks_per_sm} blocks/SM, "
               f"{occ.warps_per_sm}/{occ.max_warps_per_sm} warps ({occ.fraction:.0%}), limited by {occ.limiter}"
               + (", needs the shared-memory opt-in" if occ.needs_opt_in else ""))
        ok = True
        if here is not None and here.key != spec.key:
            occ_here = occupancy(here, threads, k.registers_per_thread, smem)
            if occ_here.launchable and occ.fraction < OCCUPANCY_DROP * occ_here.fraction:
                ok = False
                msg += (f"; on the {here.name} in hand it keeps {occ_here.fraction:.0%}, so its speed here "
                        "need not transfer to the target")
        findings.append(Finding("occupancy", ok, msg, case, severity=WARNING))
    return findings


def catalog_mismatches(index: int = 0) -> List[Finding]:
    """The GPU in hand read from the device against its catalog entry; the device wins."""

    props = catalog.device_props(index)
    if props is None:
        return []
    spec = catalog.match_device(props.name)
    if spec is None:
        return [Finding("catalog", True, f"{props.name} is not in the GPU catalog; device values used",
                        severity=WARNING)]
    _, mismatches = catalog.reconcile(spec, props)
    return [Finding("catalog", False, m, severity=WARNING) for m in mismatches]
