"""Tensors from one worker process to another, without pickle and without a round trip through the host.

The baseline and the candidate run in separate worker processes (:mod:`..sides.pair`), and the
baseline's worker judges the candidate's outputs. The candidate's worker *exports* the
tensors to be judged and the baseline's worker *opens* them; what crosses the channel
(via the parent, as JSON) is a small descriptor per tensor, never the data:

* **host tensors** go through a file in ``/dev/shm`` (a temporary folder elsewhere):
  the producer writes the tensor's bytes into a new file it maps, or, for a tensor that
  already lives in such a file (the candidate's inputs are placed there when they are
  built, :meth:`Exporter.place`), names that file with no copy at all. The consumer maps
  the same file, read-only in spirit (the mapping is writable because
  ``torch.frombuffer`` wants a writable buffer; the consumer never writes).
* **CUDA tensors** go through CUDA IPC, the mechanism ``torch.multiprocessing`` uses
  (``reduce_tensor``/``rebuild_cuda_tensor``): the consumer maps the producer's device
  memory, so an 8 GiB output is judged where it is, with no copy.

The producer keeps every exported tensor alive until :meth:`Exporter.release`; the
consumer drops its views with :meth:`Importer.close` first (the parent orders the two).
The files of a producer that ended without releasing (it crashed, or was killed) are
removed by whoever ended it (:mod:`.shm_files`).

Descriptors carry shape, stride, offset and dtype; an importer builds exactly the
view that was exported. Only plain ``torch.Tensor`` objects are exported (the
preflight rejects subclasses before anything is exported).
"""

from __future__ import annotations

import base64
import errno
import mmap
import os
from typing import Any, Dict, List, Sequence, Tuple

import torch
from torch.multiprocessing.reductions import rebuild_cuda_tensor, reduce_tensor

from .shm_files import PREFIX, SHM_DIR, check_room, full, new_path


Descriptor = Dict[str, Any]

#: Tensors exported by an :class:`Exporter` made with ``local=True``, by id: both sides
#: in one process (the in-process pair), where CUDA IPC cannot open a process's own
#: memory and a shared file would be a needless copy.
_LOCAL: Dict[int, torch.Tensor] = {}


def _dtype(name: str) -> torch.dtype:
    dt = getattr(torch, name.replace("torch.", ""), None)
    if not isinstance(dt, torch.dtype):
        raise ValueError(f"not a torch dtype: {name!r}")
    return dt


class _Segment:
    """One shared file, mapped."""

    def __init__(self, path: str, nbytes: int, create: bool) -> None:
        self.path = path
        if create:
            check_room(nbytes)
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        fd = os.open(path, flags, 0o600)
        try:
            if create:
                os.ftruncate(fd, max(nbytes, 1))
            self.map = mmap.mmap(fd, max(nbytes, 1))
        finally:
            os.close(fd)
        self.nbytes = nbytes
        self.bytes = torch.frombuffer(self.map, dtype=torch.uint8, count=max(nbytes, 1))[:nbytes]

    def close(self) -> None:
        """Let go of the mapping: it is unmapped when the last tensor viewing it is freed.

        Not ``mmap.close()``: a tensor made by ``torch.frombuffer`` keeps the mmap object
        alive but holds no buffer export, so ``close()`` succeeds under live views and
        leaves them pointing at unmapped memory. Code under test that kept one of its
        inputs (a cache), or reached one through the garbage collector, then crashed its
        worker with a segmentation fault (found in CI: ``batch_then_skip``)."""
        self.bytes = None  # type: ignore[assignment]
        self.map = None  # type: ignore[assignment]


def _dense(t: torch.Tensor) -> bool:
    """Whether ``t``'s elements fill its memory exactly once (a permutation of a contiguous layout)."""
    dims = sorted((st, sz) for st, sz in zip(t.stride(), t.shape) if sz > 1)
    expected = 1
    for st, sz in dims:
        if st != expected:
            return False
        expected *= sz
    return True


#: Bytes per write when placing a tensor in its file (a bound on one system call's size).
WRITE_CHUNK = 256 << 20
#: Bound at import, before any code under test (as the channel's I/O: .channel).
_write = os.write


class Exporter:
    """The producing side: place, export, and keep alive until released."""

    def __init__(self, local: bool = False) -> None:
        self.local = local
        self._segments: Dict[str, _Segment] = {}
        self._alive: List[torch.Tensor] = []
        self._local_ids: List[int] = []

    # -- host memory -------------------------------------------------------------------
    def place(self, t: torch.Tensor) -> torch.Tensor:
        """``t``'s contents in a new shared file (host tensors; others are returned as they are).

        Tensors made here can be exported with no copy. Used for the candidate's input
        sets, which the baseline's worker digests before and after each checked call."""
        if self.local or not isinstance(t, torch.Tensor) or t.device.type != "cpu" or t.numel() == 0:
            return t
        # The layout is kept: a tensor that is a transposed view (K laid out d-major, say)
        # is placed with the same strides, dense, as ``torch.empty_like`` would lay it out;
        # a kernel whose speed depends on its operand's layout sees the same layout.
        # A dense tensor is written as it lies (one copy, into the file); others through
        # a dense copy first.
        dense = t.detach()
        if not _dense(dense):
            dense = torch.empty_like(t, memory_format=torch.preserve_format)
            if not _dense(dense):
                dense = torch.empty(t.shape, dtype=t.dtype)
            dense.copy_(t.detach())
        nbytes = dense.numel() * dense.element_size()
        path = new_path()
        # The bytes are written before any tensor views the file, and not by a torch
        # in-place op: the placed tensor starts at version 0, like a freshly built one.
        check_room(nbytes)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            flat = torch.as_strided(dense, (dense.numel(),), (1,), dense.storage_offset())
            view = memoryview(flat.view(torch.uint8).numpy())
            done = 0
            while done < nbytes:  # os.write may write less than asked
                done += _write(fd, view[done:done + WRITE_CHUNK])
        except OSError as e:  # filled meanwhile: the file goes, and the error names the fix
            os.unlink(path)
            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                raise full(nbytes) from None
            raise
        finally:
            os.close(fd)
        seg = _Segment(path, nbytes, create=False)
        self._segments[seg.path] = seg
        return seg.bytes.view(dense.dtype).as_strided(tuple(dense.shape), tuple(dense.stride()))

    def _segment_of(self, t: torch.Tensor) -> Tuple[str, int] | None:
        ptr = t.untyped_storage().data_ptr()
        for path, seg in self._segments.items():
            base = seg.bytes.data_ptr() if seg.nbytes else -1
            if base <= ptr < base + seg.nbytes:
                return path, ptr - base
        return None

    def _export_host(self, t: torch.Tensor) -> Descriptor:
        found = self._segment_of(t)
        if found is None:
            src = t.detach().contiguous()
            seg = _Segment(new_path(), src.numel() * src.element_size(), create=True)
            self._segments[seg.path] = seg
            if src.numel():
                seg.bytes.view(src.dtype).copy_(src.reshape(-1))
            path, base, shape, stride, offset = seg.path, 0, tuple(src.shape), tuple(src.stride()), 0
        else:
            path, base = found
            shape, stride, offset = tuple(t.shape), tuple(t.stride()), t.storage_offset()
        return {"kind": "host", "path": path, "base": base, "dtype": str(t.dtype), "shape": list(shape),
                "stride": list(stride), "offset": offset, "nbytes": self._segments[path].nbytes}

    # -- device memory -----------------------------------------------------------------
    def _export_cuda(self, t: torch.Tensor) -> Descriptor:
        t = t.detach()
        self._alive.append(t)
        _, args = reduce_tensor(t)
        (_tensor_cls, size, stride, offset, _storage_cls, dtype, device, handle, storage_bytes, storage_offset,
         _requires_grad, ref_handle, ref_offset, event_handle, event_sync) = args
        enc = lambda b: None if b is None else base64.b64encode(bytes(b)).decode()  # noqa: E731
        return {"kind": "cuda", "shape": list(size), "stride": list(stride), "offset": int(offset),
                "dtype": str(dtype), "device": int(device), "handle": enc(handle), "storage_bytes": int(storage_bytes),
                "storage_offset": int(storage_offset), "ref_handle": enc(ref_handle), "ref_offset": int(ref_offset),
                "event_handle": enc(event_handle), "event_sync": bool(event_sync)}

    def export(self, tensors: Sequence[torch.Tensor]) -> List[Descriptor]:
        out = []
        for t in tensors:
            if type(t) is not torch.Tensor:
                raise TypeError(f"only plain torch.Tensor objects can be exported, got {type(t).__name__}")
            if self.local:
                _LOCAL[id(t)] = t
                self._local_ids.append(id(t))
                out.append({"kind": "local", "id": id(t)})
            else:
                out.append(self._export_cuda(t) if t.is_cuda else self._export_host(t))
        return out

    def _drop_local(self) -> None:
        for i in self._local_ids:
            _LOCAL.pop(i, None)
        self._local_ids.clear()

    def release(self) -> None:
        """Drop every exported tensor and remove the shared files (placed inputs included)."""
        self._drop_local()
        self._alive.clear()
        for seg in self._segments.values():
            seg.close()
            try:
                os.unlink(seg.path)
            except FileNotFoundError:
                pass
        self._segments.clear()

    def release_exports(self, keep: Sequence[torch.Tensor] = ()) -> None:
        """Drop exported copies but keep the files that back ``keep`` (placed input sets).

        A device tensor dropped here is freed once no other reference in this process
        holds it and its consumer has closed (:func:`collect_sent` for one that closed late)."""
        keep_paths = {p for p in (self._segment_of(t) for t in keep if isinstance(t, torch.Tensor)
                                  and t.device.type == "cpu" and t.numel()) if p is not None}
        keep_names = {p for p, _ in keep_paths}
        self._drop_local()
        self._alive.clear()
        for path in [p for p in self._segments if p not in keep_names]:
            seg = self._segments.pop(path)
            seg.close()
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass


def collect_sent() -> None:
    """Free the device memory of exported tensors that this process has dropped and every
    consumer has closed.

    torch keeps a CUDA tensor sent to another process in a "limbo" list when the producer
    drops it while a consumer still holds it, and frees it at a later collection
    (``torch.cuda.ipc_collect()``, the next deletion of a sent tensor, or an allocation
    that would otherwise fail) that finds the consumers' count at zero. In this
    protocol the consumer closes first, so the deletion itself frees the memory, and
    this call is a safety net for a consumer that closed late. It did not free the 6 GiB
    that KernelBench's sigmoid kept allocated in the candidate's worker on an H100: that
    was a count that never reached zero (see :class:`Importer`)."""
    if torch.cuda.is_initialized():  # initialised implies available; asking availability would initialise
        torch.cuda.ipc_collect()


def _key(d: Descriptor) -> Tuple[Any, ...]:
    """A descriptor as a hashable value: one exported tensor, one key."""
    return tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in d.items()))


class Importer:
    """The consuming side: open descriptors as tensors; close before the producer releases.

    A descriptor opened twice before :meth:`close` gives the tensor opened the first time.
    For a CUDA tensor this is what frees it: torch counts each export once, and a consumer
    that opened one export twice counted it down twice, to -1, which torch reads as an
    unsigned number, so the producer kept the memory until it exited. The judge opens
    the first trial's candidate inputs twice (to compare the two sides' factories, then
    to judge); KernelBench's 6 GiB sigmoid began the candidate's measurement with those
    6 GiB still allocated on an H100 (``memory.measured``: ``prepare`` found 6 GiB held)."""

    def __init__(self) -> None:
        self._segments: Dict[str, _Segment] = {}
        self._opened: Dict[Tuple[Any, ...], torch.Tensor] = {}  # every view opened, until close

    def open(self, descs: Sequence[Descriptor]) -> List[torch.Tensor]:
        out = []
        for d in descs:
            key = _key(d)
            t = self._opened.get(key)
            if t is None:
                t = self._opened[key] = self._open(d)
            out.append(t)
        return out

    def _open(self, d: Descriptor) -> torch.Tensor:
        if d["kind"] == "local":
            return _LOCAL[int(d["id"])]
        dtype = _dtype(d["dtype"])
        if d["kind"] == "host":
            path = str(d["path"])
            if not os.path.basename(path).startswith(PREFIX) or os.path.dirname(path) != SHM_DIR:
                raise ValueError(f"refusing to map {path!r}: not an expkit shared file")
            seg = self._segments.get(path)
            if seg is None:
                seg = self._segments[path] = _Segment(path, int(d["nbytes"]), create=False)
            base, size = int(d["base"]), torch.empty((), dtype=dtype).element_size()
            usable = (seg.nbytes - base) // size * size
            flat = seg.bytes[base:base + usable].view(dtype) if usable else torch.empty(0, dtype=dtype)
            t = flat.as_strided(tuple(d["shape"]), tuple(d["stride"]), int(d["offset"])) if flat.numel() or not \
                d["shape"] else torch.empty(tuple(d["shape"]), dtype=dtype)
        elif d["kind"] == "cuda":
            dec = lambda s: None if s is None else base64.b64decode(s)  # noqa: E731
            t = rebuild_cuda_tensor(torch.Tensor, torch.Size(d["shape"]), tuple(d["stride"]), int(d["offset"]),
                                    torch.storage.TypedStorage, dtype, int(d["device"]), dec(d["handle"]),
                                    int(d["storage_bytes"]), int(d["storage_offset"]), False, dec(d["ref_handle"]),
                                    int(d["ref_offset"]), dec(d["event_handle"]), bool(d["event_sync"]))
        else:
            raise ValueError(f"unknown descriptor kind {d.get('kind')!r}")
        return t

    def close(self) -> None:
        self._opened.clear()
        for seg in self._segments.values():
            seg.close()
        self._segments.clear()
        if torch.cuda.is_initialized():  # initialised implies available; asking availability would initialise
            torch.cuda.ipc_collect()


def pack(obj: Any) -> Tuple[Any, List[torch.Tensor]]:
    """A nested value (tuples, lists, dicts with string keys, tensors, numbers, strings,
    None) as a JSON-able skeleton and the list of its tensors, for :func:`unpack`."""
    tensors: List[torch.Tensor] = []

    def walk(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            tensors.append(v.detach())
            return {"$t": len(tensors) - 1}
        if isinstance(v, tuple):
            return {"$tuple": [walk(x) for x in v]}
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, dict):
            return {"$dict": [[str(k), walk(x)] for k, x in v.items()]}
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        return {"$repr": repr(v)}

    return walk(obj), tensors


def unpack(skeleton: Any, tensors: Sequence[torch.Tensor]) -> Any:
    if isinstance(skeleton, list):
        return [unpack(x, tensors) for x in skeleton]
    if isinstance(skeleton, dict):
        if "$t" in skeleton:
            return tensors[int(skeleton["$t"])]
        if "$tuple" in skeleton:
            return tuple(unpack(x, tensors) for x in skeleton["$tuple"])
        if "$dict" in skeleton:
            return {k: unpack(x, tensors) for k, x in skeleton["$dict"]}
        if "$repr" in skeleton:
            return skeleton["$repr"]
    return skeleton


def structure(out: Any) -> Any:
    """The shape of an output's nesting (tensor, tuple/list, dict), to rebuild it after transport."""
    if isinstance(out, torch.Tensor):
        return "t"
    if isinstance(out, (tuple, list)):
        return [structure(o) for o in out]
    if isinstance(out, dict):
        return {"dict": [[k, structure(out[k])] for k in sorted(out)]}
    return None
