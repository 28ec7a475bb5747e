"""The workload stage: does the kernel's win survive in the workload it was written for?

A micro-benchmark times one op on prepared inputs. A workload -- a decode loop, a
training step -- runs that op among hundreds of others, under a compiler, inside CUDA
graphs, with a host that must keep the device fed. A kernel can be faster alone and
still make the workload slower: it breaks the compiled graph, forces a layout
conversion or a host-device synchronisation on every step, or launches more kernels
than the host can issue. This stage measures the workload beside the kernel and
holds the two results against each other (a manifest's ``end_to_end:`` block).

* :mod:`.prediction` -- Amdahl's law over the micro interval and the replaced op's
  share, and the rule that says whether the workload falls short of it.
* :mod:`.profile` -- profiled runs reduced to per-step figures and the share ``f``.
* :mod:`.compile` -- what ``torch._dynamo`` did (graph breaks, fallbacks, recompiles).
* :mod:`.utilisation` -- NVML's GPU utilisation while each side runs alone.
* :mod:`.collect` -- one side's workload: :class:`Workload` (what a builder returns,
  re-exported here and by ``expkit``), building it, timing it, its evidence; the
  parent's half that asks both sides' workers is :mod:`expkit.bench.sides.workload_pair`.
* :mod:`.assess` -- the parent's half: estimate, prediction, comparison, verdict.

The report's "End to end" section is rendered from the stored block by
:mod:`expkit.report.workload`; nothing here formats a report.
"""

from .collect import Workload

__all__ = ["Workload"]
