"""Theoretical occupancy: how many blocks of a kernel fit on one SM of a catalog GPU.

Occupancy is resident warps over the SM's maximum. Four resources cap the number of resident
blocks, and the smallest cap wins:

- threads: ``max_warps_per_sm // warps_per_block``, a partial warp counting as a whole one;
- blocks: the SM's hard limit on resident blocks;
- registers: registers go to warps, ``registers_per_thread * 32`` rounded up to a 256-register
  unit, and the register file is split across the SM's 4 sub-partitions, each of which must hold
  whole warps: ``blocks = (4 * ((registers_per_sm / 4) // regs_per_warp)) // warps_per_block``;
- shared memory: each block takes its shared memory plus a driver reserve (1 KiB per block on
  compute capability 8.0 and later), rounded up to the allocation unit (128 B on 8.x and 9.x,
  256 B on 7.x), out of the SM's shared memory.

A block is not launchable at all when it needs more threads than a block may have, more registers
per thread than the ISA allows, more registers per block than the register file's per-block limit
(checked, as the hardware does, with the warp count rounded up to the 4 sub-partitions), or more
shared memory than the opt-in maximum. Then ``launchable`` is False and ``reason`` names what it
needs and what the GPU allows. Shared memory above the 48 KiB default but within the opt-in
maximum is launchable only after ``cudaFuncSetAttribute(..., MaxDynamicSharedMemorySize, ...)``;
``needs_opt_in`` says so.

These are the rules of NVIDIA's occupancy calculator (``cuda_occupancy.h`` in the CUDA 12.6
toolkit: ``cudaOccMaxBlocksPerSMRegsLimit``, ``cudaOccMaxBlocksPerSMSmemLimit``,
``cudaOccMaxBlocksPerSMWarpsLimit``), restated from that header's logic, for the partitioned-
global-caching-off, default-carveout case that applies to every catalog GPU (cc 7.5 to 9.0).
Approximations, all in the direction of the calculator's own: the SM is assumed to give the
kernel its whole shared memory (the default carveout; a kernel that prefers L1 gets less), block
barriers and clusters are ignored (on Hopper, barriers only bind above 32 blocks per SM, which the
block limit already forbids), and register counts are those the compiler reports
(``cudaFuncGetAttributes().numRegs``), not the source's. The figure is an upper bound on what a
profiler's "achieved occupancy" can show; it says nothing about speed on its own.

Checked against the driver's own calculator (``cuOccupancyMaxActiveBlocksPerMultiprocessor``) by
``tests/test_occupancy.py::test_matches_the_cuda_occupancy_api`` on this project's device machines:
528 block shapes on an H100 SXM and 504 on an H200 (kernels of 24 to 249 registers,
32 to 1024 threads, 0 to 227 KiB of dynamic shared memory), no difference in blocks per SM. The
cc 7.5, 8.0, 8.6 and 8.9 rules were not checked on a device.

When two limits tie, ``limiter`` names the first of threads, blocks, registers, shared memory
(the hardware limits first: lowering a resource that ties with them gains nothing), and
``limiters`` lists all that bind.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

from ..manifest.catalog import GpuSpec

LIMITERS = ("threads", "blocks", "registers", "shared_memory")

# Allocation constants of the occupancy calculator, by compute-capability major
# (CUDA 12.6 cuda_occupancy.h: cudaOccRegAllocationGranularity, cudaOccSubPartitionsPerMultiprocessor,
# cudaOccSMemAllocationGranularity). The catalog holds cc 7.5 to 9.0 only.
_REGISTER_UNIT = {7: 256, 8: 256, 9: 256}     # registers, allocated per warp
_SUB_PARTITIONS = {7: 4, 8: 4, 9: 4}
_SMEM_UNIT = {7: 256, 8: 128, 9: 128}         # bytes


@dataclass(frozen=True)
class Occupancy:
    """How one block shape sits on one SM of ``gpu``. Zero blocks and a ``reason`` if it cannot."""

    gpu: str
    launchable: bool
    reason: str
    blocks_per_sm: int
    warps_per_sm: int
    max_warps_per_sm: int
    fraction: float
    limiter: str
    limiters: Tuple[str, ...]
    needs_opt_in: bool
    registers_per_block: int
    shared_memory_per_block_allocated: int

    def __post_init__(self) -> None:
        if self.limiter not in LIMITERS or not set(self.limiters) <= set(LIMITERS):
            raise ValueError(f"limiter must be one of {LIMITERS}")
        if self.launchable == bool(self.reason):
            raise ValueError("a reason is given exactly when the block is not launchable")
        if not 0.0 <= self.fraction <= 1.0:
            raise ValueError(f"fraction must be in [0, 1], got {self.fraction}")


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def occupancy(spec: GpuSpec, threads_per_block: int, registers_per_thread: int,
              shared_memory_per_block: int) -> Occupancy:
    """Theoretical occupancy of a block shape on ``spec`` (see the module docstring for the rules).

    ``shared_memory_per_block`` is static plus dynamic shared memory in bytes, without the
    driver's reserve (which is added here). Raises ValueError on a non-positive thread count or
    negative resources; those are caller bugs, not kernels.
    """
    if threads_per_block <= 0 or registers_per_thread < 0 or shared_memory_per_block < 0:
        raise ValueError("threads_per_block must be > 0; registers and shared memory must be >= 0")
    major = spec.compute_capability[0]
    if major not in _REGISTER_UNIT:
        raise ValueError(f"{spec.key}: no occupancy rules for compute capability {spec.cc}")

    warps_per_block = -(-threads_per_block // spec.warp_size)
    parts = _SUB_PARTITIONS[major]
    regs_per_warp = _round_up(registers_per_thread * spec.warp_size, _REGISTER_UNIT[major])
    registers_per_block = regs_per_warp * warps_per_block
    # The hardware's per-block check assumes every sub-partition receives warps at once, so it
    # rounds the warp count up to a multiple of the sub-partitions (cuda_occupancy.h says so).
    registers_checked = regs_per_warp * _round_up(warps_per_block, parts)
    smem_allocated = _round_up(shared_memory_per_block + spec.reserved_shared_memory_per_block,
                               _SMEM_UNIT[major])

    problems = []  # (limiter, sentence)
    if threads_per_block > spec.max_threads_per_block:
        problems.append(("threads", f"needs {threads_per_block} threads per block; {spec.key} allows "
                                    f"{spec.max_threads_per_block}"))
    if registers_per_thread > spec.max_registers_per_thread:
        problems.append(("registers", f"needs {registers_per_thread} registers per thread; {spec.key} "
                                      f"allows {spec.max_registers_per_thread}"))
    elif max(registers_checked, registers_per_block) > spec.max_registers_per_block:
        problems.append(("registers", f"needs {max(registers_checked, registers_per_block)} registers per "
                                      f"block ({registers_per_thread} per thread, allocated "
                                      f"{regs_per_warp} per warp); {spec.key} allows "
                                      f"{spec.max_registers_per_block}"))
    if shared_memory_per_block > spec.shared_memory_per_block_optin:
        problems.append(("shared_memory", f"needs {shared_memory_per_block} B shared memory per block; "
                                          f"{spec.key} allows {spec.shared_memory_per_block} B by default, "
                                          f"{spec.shared_memory_per_block_optin} B opt-in"))
    needs_opt_in = spec.shared_memory_per_block < shared_memory_per_block <= spec.shared_memory_per_block_optin

    if problems:
        return Occupancy(gpu=spec.key, launchable=False, reason="; ".join(p for _, p in problems),
                         blocks_per_sm=0, warps_per_sm=0, max_warps_per_sm=spec.max_warps_per_sm,
                         fraction=0.0, limiter=problems[0][0],
                         limiters=tuple(dict.fromkeys(l for l, _ in problems)),
                         needs_opt_in=needs_opt_in, registers_per_block=registers_per_block,
                         shared_memory_per_block_allocated=smem_allocated)

    unlimited = 1 << 30  # a resource the kernel does not use caps nothing
    caps = {
        "threads": spec.max_warps_per_sm // warps_per_block,
        "blocks": spec.max_blocks_per_sm,
        "registers": ((spec.registers_per_sm // parts) // regs_per_warp * parts) // warps_per_block
        if regs_per_warp else unlimited,
        "shared_memory": spec.shared_memory_per_sm // smem_allocated if smem_allocated else unlimited,
    }
    blocks = min(caps.values())
    limiters = tuple(name for name in LIMITERS if caps[name] == blocks)
    if blocks == 0:  # cannot happen with a consistent catalog entry; kept so it never reads as 0 %
        return Occupancy(gpu=spec.key, launchable=False,
                         reason=f"no block fits on an SM of {spec.key} (limited by {', '.join(limiters)})",
                         blocks_per_sm=0, warps_per_sm=0, max_warps_per_sm=spec.max_warps_per_sm,
                         fraction=0.0, limiter=limiters[0], limiters=limiters, needs_opt_in=needs_opt_in,
                         registers_per_block=registers_per_block,
                         shared_memory_per_block_allocated=smem_allocated)
    warps = blocks * warps_per_block
    return Occupancy(gpu=spec.key, launchable=True, reason="", blocks_per_sm=blocks, warps_per_sm=warps,
                     max_warps_per_sm=spec.max_warps_per_sm, fraction=warps / spec.max_warps_per_sm,
                     limiter=limiters[0], limiters=limiters, needs_opt_in=needs_opt_in,
                     registers_per_block=registers_per_block,
                     shared_memory_per_block_allocated=smem_allocated)
