"""Keyed digests computed where the tensors live (expkit/checks/digest.py)."""

from __future__ import annotations

import pytest
import torch

from expkit.checks.digest import _device_digest, digest

KEY = b"k" * 32


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.uint8])
def test_one_changed_element_changes_the_digest(dtype):
    x = (torch.randn(1001) * 10).to(dtype)
    y = x.clone()
    y[500] = y[500] + 1
    assert digest([x], KEY) == digest([x.clone()], KEY)
    assert digest([x], KEY) != digest([y], KEY)


def test_shape_dtype_and_key_are_part_of_the_digest():
    x = torch.randn(12)
    assert digest([x], KEY) != digest([x.view(3, 4)], KEY)
    assert digest([x], KEY) != digest([x.double()], KEY)
    assert digest([x], KEY) != digest([x], b"j" * 32)


def test_a_restored_checksum_is_not_a_restored_digest():
    """Two changes that cancel in a plain sum of the words do not cancel in the keyed sum."""
    a = torch.randn(1000)
    words = a.view(torch.int32).clone()
    words[0] += 5
    words[1] -= 5
    forged = words.view(torch.float32)
    assert int(a.view(torch.int32).sum()) == int(words.sum())
    assert _device_digest(KEY, a) != _device_digest(KEY, forged)
    assert digest([a], KEY) != digest([forged], KEY)


def test_non_contiguous_tensors_and_plain_values():
    x = torch.randn(6, 4)
    assert digest([x.t(), 3, "s"], KEY) == digest([x.t().contiguous(), 3, "s"], KEY)
    assert digest([x.t(), 3], KEY) != digest([x.t(), 4], KEY)


@pytest.mark.gpu
def test_device_digest_catches_one_element_in_a_gigabyte_without_a_host_copy():
    x = torch.randn(1 << 28, device="cuda")
    d = digest([x], KEY)
    x[123_456_789] += 1
    assert digest([x], KEY) != d
