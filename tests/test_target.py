from pathlib import Path

from expkit.checks import target, trace
from expkit.manifest import Limits, Target
from expkit.checks.trace import KernelEvent

TRACES = Path(__file__).resolve().parent / "data" / "traces"


def kernel(block=(384, 1, 1), regs=64, smem=0, name="attn_vectorized_k384"):
    return KernelEvent(name, (8, 1, 1), block, regs, smem, 7, 1, 1, 0.0, 1.0, 0)


def test_160k_tile_cannot_launch_on_l4_and_names_both_numbers():
    (f,) = target.check_kernels(Target(gpu="L4"), [kernel(smem=160 * 1024)], case="c")
    assert f.check == "target" and f.invalidates
    assert "163840 B" in f.message and "49152 B" in f.message and "101376 B" in f.message


def test_small_kernel_launches_with_occupancy_reported():
    (f,) = target.check_kernels(Target(gpu="H100"), [kernel(smem=6144)], case="c")
    assert f.ok and f.check == "occupancy" and "warps" in f.message


def test_explicit_limits_without_catalog_entry():
    (f,) = target.check_kernels(Target(limits=Limits(threads_per_block=256)), [kernel()], case="c")
    assert f.invalidates and "384 threads per block; the target allows 256" in f.message


def test_explicit_limit_tightens_the_catalog():
    t = Target(gpu="H100", limits=Limits(shared_memory_per_block=48 * 1024))
    (f,) = target.check_kernels(t, [kernel(smem=64 * 1024)], case="c")
    assert f.invalidates


def test_no_target_no_findings():
    assert target.check_kernels(Target(), [kernel(smem=10**9)]) == []


def test_real_trace_cudnn_sdpa_kernel_does_not_fit_an_l4():
    # The cuDNN SDPA kernel recorded on an H100 asks for 134144 B of shared memory.
    tr = trace.parse_chrome_trace(TRACES / "sdpa_fp16.json")
    found = target.check_kernels(Target(gpu="L4"), tr.kernels)
    assert any(f.invalidates and "134144 B" in f.message for f in found)


def test_the_gpu_in_hand_comes_from_the_name_given_never_from_torch(monkeypatch):
    """The runner's process calls this: reading the GPU through torch.cuda there initialised
    CUDA and sent every later worker to the fork server. The name the baseline's worker
    reported is what compares the target with the GPU in hand."""
    import torch

    def touched(*a, **k):
        raise AssertionError("asked torch.cuda")

    monkeypatch.setattr(torch.cuda, "is_available", touched)
    monkeypatch.setattr(torch.cuda, "get_device_name", touched)
    tile = kernel(block=(128, 1, 1), regs=32, smem=60 * 1024)  # 8% of the L4's warps, 19% of an H100's
    (alone,) = target.check_kernels(Target(gpu="L4"), [tile], case="c")
    (here,) = target.check_kernels(Target(gpu="L4"), [tile], case="c", gpu_name="NVIDIA H100 80GB HBM3")
    assert alone.ok and "in hand" not in alone.message
    assert not here.ok and "on the NVIDIA H100 SXM5 80GB in hand it keeps 19%" in here.message
