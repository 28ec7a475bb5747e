"""CUDA tensors across a process boundary (expkit/bench/processes/transport.py), on the GPU.

torch frees an exported CUDA tensor in the producer only when every consumer has
counted it down. These tests hold the producer's allocated bytes to what is alive."""

from __future__ import annotations

import json
import multiprocessing as mp

import pytest
import torch

from expkit.bench.processes.transport import Exporter, Importer, collect_sent

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

MIB = 1 << 20


def _consume(q_in, q_out, opens):
    imp = Importer()
    descs = json.loads(q_in.get())
    total = 0.0
    for _ in range(opens):
        total = float(imp.open(descs)[0].double().sum())  # the judge's way: no view outlives the request
    q_out.put(total)
    imp.close()
    q_out.put("closed")
    q_in.get()  # stay alive until the producer has collected


@pytest.mark.parametrize("opens", [1, 2, 3])
def test_an_exported_cuda_tensor_is_freed_once_the_consumer_closed_however_often_it_opened_it(opens):
    """Before the importer reused its first open, a descriptor opened twice left the
    tensor allocated in the producer for good (KernelBench's 6 GiB sigmoid: 6 GiB held
    through the whole measurement on an H100)."""
    torch.cuda.init()
    collect_sent()  # an earlier test's exports, freed once its consumer exited, are not this one's
    base = torch.cuda.memory_allocated()
    t = torch.ones(64 * MIB // 4, device="cuda")
    e = Exporter()
    descs = e.export([t])
    ctx = mp.get_context("spawn")
    qi, qo = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=_consume, args=(qi, qo, opens))
    p.start()
    try:
        qi.put(json.dumps(descs))
        assert qo.get(timeout=120) == float(64 * MIB // 4)
        assert qo.get(timeout=60) == "closed"
        e.release_exports()
        del t
        collect_sent()
        held = torch.cuda.memory_allocated() - base
    finally:
        qi.put("done")
        p.join(60)
    assert held < MIB, f"{held / MIB:.0f} MiB of the exported 64 MiB still allocated after the consumer closed"
