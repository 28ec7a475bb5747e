"""The bench stage: the code under test, where it runs, and the defences around it.

Each side of a manifest runs in a worker process of its own behind an authenticated channel
(or both in this process, for tests and scripts), and each defence that keeps a candidate from
faking a speedup is one module, reporting under one check name. docs/threat-model.md says what
each stops and what none can; docs/architecture.md lists every module.

* Where things run: :mod:`.pair`, :mod:`.case_sides`, :mod:`.replicates` (the two sides driven
  from the parent, a fresh pair per replicate); :mod:`.endpoint`, :mod:`.worker`, :mod:`.serve`,
  :mod:`.side` (the parent's handle, the worker, its requests, one side's code and calls);
  :mod:`.channel`, :mod:`.transport` (signed messages, tensors between processes);
  :mod:`.judge` (the baseline's worker judges the candidate's outputs); :mod:`.in_process`;
  :mod:`.clock` (the harness's clock, bound before any candidate code runs); :mod:`.diagnose`
  (why a worker died, in one line); :mod:`.environment` (what ran where).
* Check names a verdict's reasons carry: ``tamper`` (:mod:`.tamper`, and
  :mod:`expkit.checks.code_digest` across replicates), ``global-state``
  (:mod:`expkit.checks.global_state`), ``threads`` (:mod:`expkit.checks.activity`), fresh inputs
  (:class:`~.fresh.FreshInputs`), ``recheck`` (:class:`~.envelope.RecheckPolicy`), ``timer``
  (:mod:`.envelope`: the parent's clock bounds every block), ``interference`` (:mod:`.freeze`,
  :mod:`.confine`, :mod:`.affinity_guard`, :mod:`.lifetime`,
  :mod:`expkit.checks.interference`), ``plausibility`` (:mod:`expkit.verdict.plausibility`),
  ``uninitialised`` / ``fallback`` (diagnoses of the preflight, :mod:`.fallback`).

The checks inside a worker are in-process defence: code in the same process can, in
principle, defeat any of them. What it cannot defeat is what the parent does and sees from
outside: its clock, its judgement of the raw samples, the kernel's accounts it reads and the
stops it sends.
"""
