"""Keyed digests of tensors, computed where the tensors live.

The preflight must know whether the candidate wrote to its inputs, and that the two
sides (each in its own process) built the same inputs from the same seed. Copying
every input to the host and hashing it there (what this module replaces) costs a
host copy of gigabytes per check and, on a GPU, a device-to-host transfer of all of
it. A digest computed in place costs one read.

The digest is *keyed*: a plain checksum can be restored by a candidate that changes
two elements so that their changes cancel; a digest with a secret per-run key cannot
be steered without the key, and the key never enters the candidate's process (the
baseline's worker, which judges, computes every digest of the candidate's tensors
through shared memory; see :mod:`expkit.bench.processes.transport`).

Two algorithms, chosen by where the tensor lives:

* **host**: HMAC-SHA256 over the tensor's bytes, read in place through a NumPy view
  (a contiguous tensor is not copied). About 0.35 s per GiB on the 2-core CI machine,
  measured for this module: SHA-256 runs on the CPU's hash instructions.
* **device**: a keyed sum. The bytes are viewed as 64-, 32- or 16-bit integers (the
  widest that divides the size), and each word is multiplied by an odd 64-bit weight
  drawn from a generator seeded with the key and the chunk's index; the digest is
  the wrapped 64-bit sum. A change to one word changes the sum by ``delta * w``,
  which is zero only if ``delta`` is a multiple of 2**64 (impossible for a narrower
  word) -- so a single changed element is always seen; changes that cancel need the
  weights, i.e. the key. The weights are generated chunk by chunk (2**24 words), so
  the memory it adds is bounded (about 256 MiB of int64 scratch at most) whatever
  the tensor's size.

Both return hex strings; only equality means anything, and only between digests made
with the same key and algorithm (:func:`digest` picks the algorithm from the device,
so a tensor and a copy of it on the same kind of device always compare).
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any, Sequence

import torch

CHUNK_WORDS = 1 << 24


def _contiguous_bytes(t: torch.Tensor) -> torch.Tensor:
    t = t.detach()
    if t.is_conj():
        t = t.resolve_conj()
    if t.is_neg():
        t = t.resolve_neg()
    if not t.is_contiguous():
        t = t.contiguous()
    return t.reshape(-1).view(torch.uint8)


def _words(b: torch.Tensor) -> torch.Tensor:
    n = b.numel()
    for dt, w in ((torch.int64, 8), (torch.int32, 4), (torch.int16, 2)):
        if n % w == 0 and b.data_ptr() % w == 0:
            return b.view(dt)
    return b


def _host_digest(t: torch.Tensor, mac: Any) -> None:
    b = _contiguous_bytes(t)
    if b.numel():
        mac.update(b.numpy().data)


def _device_digest(key: bytes, t: torch.Tensor) -> int:
    words = _words(_contiguous_bytes(t))
    n = words.numel()
    total = torch.zeros((), dtype=torch.int64, device=t.device)
    g = torch.Generator(device=t.device)
    seed0 = int.from_bytes(hashlib.sha256(key).digest()[:7], "little")
    for i, start in enumerate(range(0, n, CHUNK_WORDS)):
        chunk = words[start:start + CHUNK_WORDS].to(torch.int64)
        g.manual_seed(seed0 + i)
        w = torch.randint(-(1 << 62), 1 << 62, (chunk.numel(),), generator=g, device=t.device, dtype=torch.int64)
        total += (chunk * (w | 1)).sum()
        del chunk, w
    return int(total)


def digest(values: Sequence[Any], key: bytes) -> str:
    """One keyed digest of a sequence of values (tensors by content, shape and dtype;
    anything else by ``repr``), computed where each tensor lives."""
    mac = hmac.new(key, digestmod=hashlib.sha256)
    for v in values:
        if isinstance(v, torch.Tensor):
            mac.update(repr((tuple(v.shape), str(v.dtype), v.device.type)).encode())
            if v.device.type == "cpu":
                _host_digest(v, mac)
            elif v.numel():
                mac.update(_device_digest(key, v).to_bytes(8, "little", signed=True))
        else:
            mac.update(repr(v).encode())
    return mac.hexdigest()
