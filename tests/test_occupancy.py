"""Theoretical occupancy against results derived by hand from the rules in expkit/occupancy.py.

The rules, in short (CUDA 12.6 cuda_occupancy.h; see the module docstring):
  warps/block = ceil(threads / 32)
  threads cap = max_warps_per_sm // warps/block
  regs/warp   = roundup(regs/thread * 32, 256)
  regs cap    = (4 * ((regs_per_sm / 4) // regs/warp)) // warps/block
  smem/block  = roundup(smem + reserve, unit)   reserve 1 KiB on cc >= 8.0; unit 128 B (8.x, 9.x)
  smem cap    = smem_per_sm // smem/block
  blocks      = min(threads cap, max_blocks_per_sm, regs cap, smem cap)
"""

from __future__ import annotations

import dataclasses
import itertools
import random

import pytest

from expkit.manifest.catalog import device_props, load_catalog, lookup, match_device, reconcile
from expkit.checks.occupancy import LIMITERS, Occupancy, occupancy


def _no_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return True
    return not torch.cuda.is_available()


gpu = pytest.mark.skipif("_no_cuda()", reason="needs a CUDA device")

H100 = lookup("h100-sxm")
L4 = lookup("l4")
A100 = lookup("a100-40gb")


def test_h100_256_threads_32_regs_no_smem_is_full():
    # 8 warps/block. threads cap 64 // 8 = 8. regs/warp 32*32 = 1024 (already a multiple of 256):
    # 16384 per sub-partition // 1024 = 16 warps, x4 = 64 warps // 8 = 8 blocks, a tie: 32 regs x
    # 2048 threads is exactly the 64 K register file. Blocks cap 32, smem cap 233472 // 1024 = 228.
    # 8 blocks x 8 warps = 64 of 64 warps. The thread limit is named first.
    occ = occupancy(H100, 256, 32, 0)
    assert (occ.launchable, occ.blocks_per_sm, occ.warps_per_sm, occ.fraction) == (True, 8, 64, 1.0)
    assert occ.limiter == "threads" and occ.limiters == ("threads", "registers")


def test_one_register_more_costs_a_quarter():
    # 33 regs: 33*32 = 1056 -> 1280 per warp (next multiple of 256). 16384 // 1280 = 12 warps per
    # sub-partition, x4 = 48 warps // 8 = 6 blocks = 48 of 64 warps.
    occ = occupancy(H100, 256, 33, 0)
    assert (occ.blocks_per_sm, occ.fraction, occ.limiter) == (6, 0.75, "registers")


def test_l4_refuses_the_seeds_160_kib_block():
    # The seed's 128x128 tiles used 160 KiB; cc 8.9 allows 48 KiB by default and 99 KiB opt-in.
    occ = occupancy(L4, 256, 64, 160 * 1024)
    assert not occ.launchable and occ.blocks_per_sm == 0 and occ.fraction == 0.0
    assert occ.limiter == "shared_memory"
    assert occ.reason == "needs 163840 B shared memory per block; l4 allows 49152 B by default, 101376 B opt-in"


def test_l4_small_block_limited_by_shared_memory():
    # 128 threads = 4 warps: threads cap 48 // 4 = 12; blocks cap 24. 64 regs: 2048 per warp,
    # 16384 // 2048 = 8 per sub-partition, x4 = 32 warps // 4 = 8. 20 KiB + 1 KiB = 21504 B (a
    # multiple of 128): 102400 // 21504 = 4. Four blocks, 16 of 48 warps.
    occ = occupancy(L4, 128, 64, 20 * 1024)
    assert (occ.blocks_per_sm, occ.warps_per_sm, occ.limiter) == (4, 16, "shared_memory")
    assert occ.fraction == pytest.approx(16 / 48)
    assert occ.shared_memory_per_block_allocated == 21504


def test_per_block_reserve_costs_a_block_on_a100():
    # 32 KiB + 1 KiB reserve = 33792 B: 167936 // 33792 = 4 (without the reserve 167936 // 32768
    # would give 5). Threads cap 64 // 4 = 16, no registers.
    assert occupancy(A100, 128, 0, 32 * 1024).blocks_per_sm == 4


def test_shared_memory_allocation_unit_rounds_up():
    # 10000 + 1024 = 11024 B -> 11136 (next multiple of 128): 233472 // 11136 = 20, where the
    # unrounded 11024 would fit 21. 64 threads = 2 warps, threads cap 32.
    occ = occupancy(H100, 64, 0, 10000)
    assert (occ.blocks_per_sm, occ.limiter, occ.shared_memory_per_block_allocated) == (20, "shared_memory", 11136)


def test_partial_warps_count_as_whole_warps():
    # 600 threads = 19 warps (18.75 rounded up): 48 // 19 = 2 blocks = 38 of 48 warps.
    occ = occupancy(L4, 600, 0, 0)
    assert (occ.blocks_per_sm, occ.warps_per_sm) == (2, 38)


def test_many_small_blocks_hit_the_block_limit():
    # 32 threads = 1 warp: threads cap 48; cc 8.9 allows 24 resident blocks.
    occ = occupancy(L4, 32, 16, 0)
    assert (occ.blocks_per_sm, occ.limiter, occ.fraction) == (24, "blocks", 0.5)


def test_opt_in_shared_memory_is_launchable_but_flagged():
    # 100 KiB + 1 KiB = 103424 B: 233472 // 103424 = 2 blocks.
    occ = occupancy(H100, 128, 0, 100 * 1024)
    assert occ.launchable and occ.needs_opt_in and occ.blocks_per_sm == 2
    assert not occupancy(H100, 128, 0, 48 * 1024).needs_opt_in


def test_register_file_per_block_limit():
    # 1024 threads x 65 regs: 65*32 = 2080 -> 2304 per warp x 32 warps = 73728 > 65536.
    occ = occupancy(H100, 1024, 65, 0)
    assert not occ.launchable and occ.limiter == "registers"
    assert "needs 73728 registers per block" in occ.reason and "allows 65536" in occ.reason
    # 64 regs fit exactly: 2048 x 32 = 65536, one block.
    assert occupancy(H100, 1024, 64, 0).blocks_per_sm == 1


def test_too_many_threads_and_registers_per_thread():
    occ = occupancy(H100, 2048, 300, 0)
    assert not occ.launchable and occ.limiter == "threads" and occ.limiters == ("threads", "registers")
    assert "needs 2048 threads per block; h100-sxm allows 1024" in occ.reason
    assert "needs 300 registers per thread; h100-sxm allows 255" in occ.reason


@pytest.mark.parametrize("args", [(0, 32, 0), (128, -1, 0), (128, 32, -5)])
def test_nonsense_inputs_are_caller_bugs(args):
    with pytest.raises(ValueError):
        occupancy(H100, *args)


def test_invariants_over_a_random_sweep():
    rng = random.Random(20261121)
    for spec in load_catalog().values():
        for _ in range(300):
            threads = rng.randint(1, 1100)
            regs = rng.randint(0, 260)
            smem = rng.choice([0, rng.randint(0, 240 * 1024)])
            occ = occupancy(spec, threads, regs, smem)
            assert occ.launchable == (occ.blocks_per_sm > 0) == (occ.reason == "")
            assert occ.limiter in LIMITERS and occ.limiter == occ.limiters[0]
            assert occ.warps_per_sm <= occ.max_warps_per_sm == spec.max_warps_per_sm
            assert occ.blocks_per_sm <= spec.max_blocks_per_sm
            if occ.launchable:
                assert occ.blocks_per_sm * occ.shared_memory_per_block_allocated <= spec.shared_memory_per_sm
                # more of any resource never raises occupancy
                assert occupancy(spec, threads, regs, smem + 4096).blocks_per_sm <= occ.blocks_per_sm
                assert occupancy(spec, threads, min(regs + 8, 255), smem).blocks_per_sm <= occ.blocks_per_sm


def test_occupancy_value_checks_itself():
    good = occupancy(H100, 256, 32, 0)
    with pytest.raises(ValueError):
        dataclasses.replace(good, limiter="memory")
    with pytest.raises(ValueError):
        dataclasses.replace(good, reason="but why")
    assert isinstance(good, Occupancy)


# --- against the CUDA driver's own calculator, on a real GPU --------------------------------

_KERNEL = r"""
extern "C" __global__ void heavy(float* out, int n) {
    extern __shared__ float smem[];
    float acc[NACC];
#pragma unroll
    for (int i = 0; i < NACC; ++i) acc[i] = out[threadIdx.x + i * n];
    for (int k = 0; k < n; ++k) {
#pragma unroll
        for (int i = 0; i < NACC; ++i) acc[i] = acc[i] * acc[(i + 1) % NACC] + smem[(k + i) & 255];
    }
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < NACC; ++i) s += acc[i];
    out[threadIdx.x] = s;
}
"""


def _cuda_python():
    try:
        from cuda.bindings import driver, nvrtc
    except ImportError:
        try:
            from cuda import cuda as driver, nvrtc  # cuda-python 12.x layout
        except ImportError:
            pytest.skip("cuda-python (cuda.bindings) is not installed")
    return driver, nvrtc


def _code(err) -> int:
    return int(getattr(err, "value", err))


def _ok(result, what):
    err, *rest = result
    assert _code(err) == 0, f"{what} failed: {err}"
    return rest[0] if len(rest) == 1 else rest


def _compile(driver, nvrtc, arch, nacc, maxrreg):
    prog = _ok(nvrtc.nvrtcCreateProgram(_KERNEL.encode(), b"heavy.cu", 0, [], []), "nvrtcCreateProgram")
    opts = [f"--gpu-architecture=sm_{arch}".encode(), f"-DNACC={nacc}".encode(), f"--maxrregcount={maxrreg}".encode()]
    err = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)[0]
    if _code(err) != 0:
        size = _ok(nvrtc.nvrtcGetProgramLogSize(prog), "log size")
        log = b" " * size
        nvrtc.nvrtcGetProgramLog(prog, log)
        pytest.fail(f"nvrtc: {log.decode(errors='replace')}")
    size = _ok(nvrtc.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
    cubin = b" " * size
    _ok((nvrtc.nvrtcGetCUBIN(prog, cubin)[0], None), "nvrtcGetCUBIN")
    module = _ok(driver.cuModuleLoadData(cubin), "cuModuleLoadData")
    return _ok(driver.cuModuleGetFunction(module, b"heavy"), "cuModuleGetFunction")


@pytest.mark.gpu
@gpu
def test_matches_the_cuda_occupancy_api():
    """Our blocks/SM equals cuOccupancyMaxActiveBlocksPerMultiprocessor for kernels of several
    register counts (set with --maxrregcount), block sizes and dynamic shared memory sizes."""
    import torch

    driver, nvrtc = _cuda_python()
    props = device_props()
    spec = match_device(props.name)
    if spec is None:
        pytest.skip(f"{props.name!r} is not in the catalog")
    spec, _ = reconcile(spec, props)
    torch.zeros(1, device="cuda")  # makes the primary context current for the driver calls
    arch = f"{props.compute_capability[0]}{props.compute_capability[1]}"
    attr = driver.CUfunction_attribute
    mismatches, checked, regs_seen = [], 0, set()
    for maxrreg in (24, 40, 64, 96, 128, 168, 255):
        # more live accumulators than the cap allows, so the cap decides the register count
        func = _compile(driver, nvrtc, arch, 64 if maxrreg <= 128 else 192, maxrreg)
        regs = _ok(driver.cuFuncGetAttribute(attr.CU_FUNC_ATTRIBUTE_NUM_REGS, func), "NUM_REGS")
        static = _ok(driver.cuFuncGetAttribute(attr.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, func), "SHARED_SIZE")
        max_threads = _ok(driver.cuFuncGetAttribute(attr.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, func), "MAXT")
        regs_seen.add(regs)
        _ok((driver.cuFuncSetAttribute(func, attr.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                       spec.shared_memory_per_block_optin - static)[0], None), "set max dynamic smem")
        for threads, dyn in itertools.product((32, 64, 96, 128, 192, 256, 320, 512, 640, 768, 1024),
                                              (0, 1000, 8192, 20000, 48 * 1024, 70000, 100 * 1024,
                                               spec.shared_memory_per_block_optin - static)):
            ours = occupancy(spec, threads, regs, static + dyn)
            if threads > max_threads or not ours.launchable:
                if ours.launchable:  # the compiled kernel cannot take this many threads; we must agree
                    mismatches.append((regs, threads, dyn, "driver max threads", max_threads, ours.blocks_per_sm))
                continue
            err, theirs = driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(func, threads, dyn)
            checked += 1
            if _code(err) != 0 or theirs != ours.blocks_per_sm:
                mismatches.append((regs, threads, dyn, _code(err), theirs, ours.blocks_per_sm))
    print(f"{spec.key}: register counts {sorted(regs_seen)}, {checked} shapes compared, {len(mismatches)} differ")
    assert len(regs_seen) >= 5 and max(regs_seen) > 128, regs_seen
    assert not mismatches, mismatches[:20]
