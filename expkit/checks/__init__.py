"""The checks stage: is the candidate's answer right, and did the intended code run?

* :mod:`.preflight` -- seconds of checks before minutes of measurement: correctness
  trials on fresh inputs, oracle calibration, storage and input-mutation checks.
* :mod:`.oracles`, :mod:`.model_oracles`, :mod:`.divergence` -- per-call oracles; a whole
  model's perplexity or KL divergence, and where two models first part.
* :mod:`.trace`, :mod:`.expectations`, :mod:`.identity` -- profiler traces, the
  manifest's ``expect:`` held against them, and the identity check built on both.
* :mod:`.target`, :mod:`.occupancy` -- launch resources against the claim's target GPU.
* :mod:`.global_state`, :mod:`.activity` -- the two defences the preflight applies as
  well as the bench (settings that change numerics or speed; work left running).

A check is a function from what ran to :class:`~expkit.core.findings.Finding` values.
Checks import the manifest and core stages (and :mod:`expkit.zoo`) only: never the
clocks, the bench that runs them, or the orchestrator.
"""
