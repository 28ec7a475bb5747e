"""Tensors between worker processes by descriptor (expkit/bench/processes/transport.py)."""

from __future__ import annotations

import json
import multiprocessing as mp
import os

import pytest
import torch

from expkit.bench.processes.shm_files import PREFIX, SHM_DIR, left_behind, remove_files_of
from expkit.bench.processes.transport import Exporter, Importer, pack, unpack


def _ours():
    """This process's shared files. A file named for this pid can predate the test: one left
    by an earlier process that had the same pid (before the parent removed a crashed
    worker's files, CI's /dev/shm held such files), so tests compare against a snapshot."""
    return {f for f in os.listdir(SHM_DIR) if f.startswith(f"{PREFIX}{os.getpid()}-")}


def _sums(q_in, q_out):
    imp = Importer()
    ts = imp.open(json.loads(q_in.get()))
    q_out.put([[float(t.double().sum()), list(t.shape), str(t.dtype)] for t in ts])
    imp.close()


def test_host_tensors_cross_a_process_boundary_with_views_strides_and_dtypes_intact():
    before = _ours()
    e = Exporter()
    placed = e.place(torch.randn(3, 5))
    assert placed._version == 0  # placed like a freshly built tensor
    values = [placed, placed[1:], torch.arange(10)[2:8], torch.randn(4, 6).t(), torch.randn(7).bfloat16(),
              torch.tensor(3.0)]
    descs = e.export(values)
    ctx = mp.get_context("spawn")
    qi, qo = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=_sums, args=(qi, qo))
    p.start()
    qi.put(json.dumps(descs))
    got = qo.get(timeout=60)
    p.join(30)
    assert got == [[float(t.double().sum()), list(t.shape), str(t.dtype)] for t in values]
    assert _ours() - before  # the placed tensor and the exported copies live in files
    e.release()
    assert _ours() <= before


def test_a_placed_tensor_is_exported_without_a_copy():
    e = Exporter()
    placed = e.place(torch.zeros(16))
    d = e.export([placed[4:]])[0]
    imp = Importer()
    (seen,) = imp.open([d])
    placed[4] = 7.0  # the importer sees the producer's memory, not a copy of it
    assert float(seen[0]) == 7.0
    imp.close()
    e.release()


@pytest.mark.parametrize("make", [
    lambda: torch.arange(60.0),  # dense: written as it lies
    lambda: torch.arange(60.0).reshape(3, 4, 5).permute(2, 0, 1),  # dense, permuted: strides kept
    lambda: torch.arange(60.0)[7:],  # dense, at an offset into its storage
    lambda: torch.arange(60.0).reshape(6, 10)[:, ::2],  # not dense: through a dense copy
    lambda: torch.arange(60) % 3 == 0,  # bool
], ids=["dense", "permuted", "offset", "strided", "bool"])
def test_placing_keeps_values_layout_and_a_fresh_version(monkeypatch, make):
    from expkit.bench.processes import transport

    monkeypatch.setattr(transport, "WRITE_CHUNK", 7)  # many short writes, the last one partial
    t = make()
    e = Exporter()
    placed = e.place(t)
    assert torch.equal(placed, t) and placed.dtype == t.dtype and placed._version == 0
    if transport._dense(t):
        assert placed.stride() == t.stride()
    e.release()


def test_the_importer_refuses_a_path_that_is_not_an_expkit_shared_file(tmp_path):
    with pytest.raises(ValueError, match="not an expkit shared file"):
        Importer().open([{"kind": "host", "path": "/etc/passwd", "base": 0, "dtype": "torch.uint8", "shape": [1],
                          "stride": [1], "offset": 0, "nbytes": 1}])


def test_subclasses_are_not_exported():
    class Lazy(torch.Tensor):
        pass

    with pytest.raises(TypeError, match="plain torch.Tensor"):
        Exporter().export([torch.randn(2).as_subclass(Lazy)])


def test_pack_and_unpack_keep_nesting():
    value = {"ins": [["a", 0, ((torch.ones(2),), {"k": torch.zeros(1)})]], "n": None, "s": "x"}
    skeleton, tensors = pack(value)
    json.dumps(skeleton)
    back = unpack(skeleton, tensors)
    assert back["ins"][0][2][0][0] is tensors[0] and back["ins"][0][2][1]["k"] is tensors[1]
    assert back["n"] is None and back["s"] == "x"


@pytest.mark.gpu
def test_cuda_tensors_cross_by_ipc_without_a_copy():
    e = Exporter()
    values = [torch.randn(64, 64, device="cuda"), torch.arange(100, device="cuda")[10:90:2]]
    descs = e.export(values)
    ctx = mp.get_context("spawn")
    qi, qo = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=_sums, args=(qi, qo))
    p.start()
    qi.put(json.dumps(descs))
    got = qo.get(timeout=120)
    p.join(60)
    assert got == [[float(t.double().sum()), list(t.shape), str(t.dtype)] for t in values]
    e.release()


def test_a_tensor_kept_past_release_still_reads_its_memory():
    """Code under test that kept one of its inputs (a cache) reads it after the harness
    let the shared file go, instead of crashing on unmapped memory; the mapping goes
    when the last such tensor does."""
    import gc

    before = _ours()
    e = Exporter()
    placed = e.place(torch.arange(1 << 16, dtype=torch.float32))
    imp = Importer()
    (seen,) = imp.open(e.export([placed]))
    kept_by_the_candidate = [placed[100:], seen[:50]]
    imp.close()
    e.release()
    del placed, seen
    gc.collect()
    assert float(kept_by_the_candidate[0][0]) == 100.0
    assert float(kept_by_the_candidate[1].sum()) == float(sum(range(50)))
    assert _ours() <= before


def test_a_descriptor_opened_twice_gives_the_tensor_opened_first_until_close():
    """The judge opens the first trial's candidate inputs twice; for CUDA tensors opening
    one export twice counted torch's IPC reference down twice and leaked the memory
    (tests/gpu/test_gpu_transport.py), so the second open must reuse the first."""
    e = Exporter()
    placed = e.place(torch.arange(8.0))
    (d,) = e.export([placed])
    imp = Importer()
    (a,) = imp.open([d])
    (b, c) = imp.open([d, dict(d)])
    assert b is a and c is a
    imp.close()
    (again,) = imp.open([d])
    assert again is not a and torch.equal(again, a)
    imp.close()
    e.release()


def _place_and_die(conn):
    e = Exporter()
    e.place(torch.arange(256, dtype=torch.float32))
    conn.send(sorted(e._segments))
    os._exit(1)  # as a crashed or killed worker: nothing released


def _ended_and_live():
    """A spawned process that placed a tensor and ended without releasing, the file it left,
    and a live exporter of this process's with one file of its own."""
    ctx = mp.get_context("spawn")
    got, conn = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_place_and_die, args=(conn,))
    p.start()
    assert got.poll(60)
    (left,) = got.recv()
    p.join(30)
    mine = Exporter()
    mine.place(torch.ones(4))
    (kept,) = mine._segments
    return p, left, mine, kept


def test_the_files_of_a_process_that_ended_without_releasing_are_removed_by_its_pid():
    """A worker that crashes leaves its placed inputs in /dev/shm (memory) until the machine
    restarts, unless its parent removes them (endpoint.py, as the worker ends); a live
    process's files are left alone."""
    p, left, mine, kept = _ended_and_live()
    assert p.exitcode == 1 and os.path.exists(left)
    removed = remove_files_of([p.pid])  # with any stale file an earlier process of that pid left
    assert left in removed and all(os.path.basename(f).startswith(f"{PREFIX}{p.pid}-") for f in removed)
    assert not os.path.exists(left) and os.path.exists(kept)
    assert remove_files_of([]) == []
    mine.release()


def test_files_whose_maker_has_ended_are_listed_as_left_behind_and_a_live_ones_are_not():
    p, left, mine, kept = _ended_and_live()
    try:
        found = dict(left_behind())
        assert found.get(left) == 1024 and kept not in found  # 256 float32 values
    finally:
        remove_files_of([p.pid])
        mine.release()


class _Statvfs:
    def __init__(self, free):
        self.f_bavail, self.f_frsize = free // 4096, 4096


def test_a_tensor_that_does_not_fit_the_shared_folder_is_one_error_naming_the_fix_and_leaves_no_file(monkeypatch):
    """A container's /dev/shm is small by default; without the check, placing wrote until
    ENOSPC (exit 6 and an OSError) and a mapped export died of SIGBUS, read as a crash."""
    from expkit.bench.processes import shm_files

    before = _ours()
    monkeypatch.setattr(shm_files.os, "statvfs", lambda path: _Statvfs(1 << 20))
    with pytest.raises(shm_files.SharedFolderError) as placed:
        Exporter().place(torch.zeros(1 << 19))  # 2 MiB
    with pytest.raises(shm_files.SharedFolderError):
        Exporter().export([torch.zeros(1 << 19)])
    text = str(placed.value)
    assert text.startswith(f"{SHM_DIR} has 1.0 MiB free, and a tensor of 2.0 MiB")
    assert "--shm-size" in text and "EXPKIT_SHM_DIR" in text
    assert _ours() <= before
    e = Exporter()  # what fits is placed as before
    assert float(e.place(torch.ones(1 << 10)).sum()) == 1024.0
    e.release()


def test_the_workers_error_reaches_the_parent_as_the_same_one_line_error():
    from expkit.bench.processes.shm_files import SharedFolderError, full
    from expkit.bench.sides.endpoint import remote_error
    from expkit.bench.sides.worker import error_reply
    from expkit.core.errors import ExpkitError

    got = remote_error(error_reply(full(3 << 20))["error"])
    assert isinstance(got, ExpkitError) and not isinstance(got, SharedFolderError) and got.exit_code == 2
    assert "a tensor of 3.0 MiB" in str(got) and "Fix:" in str(got)


def test_a_shared_folder_that_is_not_a_folder_is_named_with_its_fix(monkeypatch, tmp_path):
    from expkit.bench.processes import shm_files

    monkeypatch.setattr(shm_files, "SHM_DIR", str(tmp_path / "missing"))
    with pytest.raises(shm_files.SharedFolderError, match="is not a folder this user can write.*Fix: create it"):
        shm_files.check_room(1)
    monkeypatch.setattr(shm_files, "SHM_DIR", str(tmp_path))
    shm_files.check_room(1)
    monkeypatch.setattr(shm_files.os, "access", lambda path, mode: False)  # as a folder of another user's
    with pytest.raises(shm_files.SharedFolderError, match="give write access, or unset EXPKIT_SHM_DIR"):
        shm_files.check_room(1)
