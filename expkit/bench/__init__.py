"""The bench stage: the code under test, where it runs, and the defences around it.

Each side of a manifest runs in a worker process of its own behind an authenticated channel
(or both in this process, for tests and scripts), and each defence that keeps a candidate from
faking a speedup is one module, reporting under one check name. docs/threat-model.md says what
each stops and what none can; docs/architecture.md lists every module. Three packages, by role:

* :mod:`.sides`: the two sides. One side's code, inputs and calls in its worker
  (:mod:`.sides.side`, :mod:`.sides.serve`, :mod:`.sides.worker`), the baseline's worker judging
  the candidate's outputs (:mod:`.sides.judge`), the parent's handle on each
  (:mod:`.sides.endpoint`) and the parent's drive of the pair (:mod:`.sides.pair`,
  :mod:`.sides.case_sides`, :mod:`.sides.replicates`: a fresh pair per replicate), the memory
  plan (:mod:`.sides.memory_plan`). It imports the other two.
* :mod:`.processes`: where the workers run and how the processes talk, beneath the sides:
  signed messages and tensors between processes (:mod:`.processes.channel`,
  :mod:`.processes.transport`), whether to fork, what a worker is given before a side's code
  runs, why a worker died (:mod:`.processes.diagnose`), what ran where
  (:mod:`.processes.environment`).
* :mod:`.defences`: one module per mechanism, beneath the sides and beside the processes
  (neither imports the other).

Check names a verdict's reasons carry: ``tamper`` (:mod:`.defences.tamper`, and
:mod:`expkit.checks.code_digest` across replicates), ``global-state``
(:mod:`expkit.checks.global_state`), ``threads`` (:mod:`expkit.checks.activity`), fresh inputs
(:class:`~.defences.fresh.FreshInputs`), ``recheck`` (:class:`~.defences.envelope.RecheckPolicy`,
:mod:`.sides.judge`), ``launches`` (:mod:`.sides.launches`), ``timer`` (:mod:`.defences.envelope`
and :mod:`.defences.outside_clock`: the parent's clock bounds every block), ``interference``
(:mod:`.defences.freeze`, :mod:`.defences.confine`, :mod:`.defences.affinity_guard`,
:mod:`.processes.lifetime`, :mod:`expkit.checks.interference`), ``plausibility``
(:mod:`expkit.verdict.plausibility`), ``uninitialised`` / ``fallback`` (diagnoses of the
preflight, :mod:`.defences.fallback`).

The checks inside a worker are in-process defence: code in the same process can, in
principle, defeat any of them. What it cannot defeat is what the parent does and sees from
outside: its clock, its judgement of the raw samples, the kernel's accounts it reads and the
stops it sends.
"""
