"""Native libraries already loaded here: found by name in the memory map, opened only if
loaded (the fork check's CUDA driver, a worker's scipy OpenBLAS)."""

from __future__ import annotations

from pathlib import Path

import pytest

from expkit.bench.processes import native


def test_a_library_is_found_by_name_and_its_neighbour_left_out(tmp_path: Path):
    maps = tmp_path / "maps"
    maps.write_bytes(b"7f00-7f10 r-xp 0 00:00 1   /v/numpy.libs/libscipy_openblas64_-32a4b2a6.so\n"
                     b"7f20-7f30 r-xp 0 00:00 1   /v/scipy.libs/libscipy_openblas-6cdc3b4a.so\n")
    assert native.mapped_library(b"libscipy_openblas", maps=str(maps)).endswith("libscipy_openblas64_-32a4b2a6.so")
    assert native.mapped_library(b"libscipy_openblas", unless=b"openblas64", maps=str(maps)) == \
        "/v/scipy.libs/libscipy_openblas-6cdc3b4a.so"
    assert native.mapped_library(b"libcuda.so", maps=str(maps)) is None
    assert native.mapped_library(b"libcuda.so", maps=str(tmp_path / "missing")) is None


def test_a_library_not_loaded_is_not_loaded_by_asking(tmp_path: Path):
    with pytest.raises(OSError):
        native.open_loaded(str(tmp_path / "libnot-here.so"))
