"""The bench stage: the code under test, where it runs, and the defences around it.

A speed claim is only as good as the harness that timed it. This package runs the
manifest's code -- each side in a worker process of its own behind an authenticated
channel (or both in this process, for tests and scripts) -- and holds the defences that
keep a candidate from faking a speedup (deliberately or by accident), one module per
mechanism. ``docs/threat-model.md`` says what each one stops and what none of them can;
the check names below are the ones a verdict's reasons carry, and
``docs/architecture.md`` lists every module.

Where things run:

* :mod:`.pair`, :mod:`.case_sides`, :mod:`.replicates` -- the two sides driven from the
  parent: each block relayed to its side's worker, a fresh pair per replicate.
* :mod:`.endpoint`, :mod:`.worker`, :mod:`.serve`, :mod:`.side` -- the parent's handle on a
  worker, the worker process, its requests, and one side's code, inputs and calls;
  :mod:`.channel` and :mod:`.transport` -- the framed, signed messages and the tensors
  between the processes; :mod:`.judge` -- the baseline's worker judges the candidate's
  outputs; :mod:`.in_process` -- both sides as callables in this process.
* :mod:`.clock` -- the harness's clock, bound before any candidate code runs;
  :mod:`.diagnose` -- why a worker process died, in one line (the suites use it too);
  :mod:`.environment` -- provenance: what ran where.

Mechanisms (each named by the check that reports it):

``tamper``
    The functions the harness relies on -- its clocks (``time.perf_counter``, CUDA
    events, ``torch.cuda.synchronize``), every function and method of expkit's own
    modules (the oracles, the timers, this module) and a few torch methods the
    oracles use -- are snapshotted, object and code, before the candidate's module is
    imported, and compared after the import, after the preflight, after each case and
    (the clocks and oracles) after every timed block (:mod:`.tamper`). The harness's
    own clock is bound at import (:mod:`.clock`), so a later patch of
    ``time.perf_counter`` cannot reach it anyway; the check says that somebody tried.
``global-state``
    Settings that change numerics or speed (TF32 and cuDNN flags, float32 matmul
    precision, deterministic mode, default dtype, thread counts, grad mode, ...) are
    snapshotted before the import and compared after it and around every candidate
    call of the preflight and every timed block: a candidate that slows the baseline
    down (``torch.set_num_threads(1)``) or loosens precision for both sides is caught
    (:mod:`expkit.checks.global_state`).
``threads``
    Python threads and child processes are counted before and after each preflight
    call and around every timed call (threads) or block (processes): work that goes
    on after the call has returned escapes any timer (:mod:`expkit.checks.activity`).
fresh inputs
    Every timed call gets inputs that no earlier call has seen, made before its timed
    span starts (:class:`~.fresh.FreshInputs`). The default, ``salt``, copies one element of
    one floating input over another at a position drawn from a secret RNG: it costs a
    few microseconds whatever the input size, bumps the tensor's version counter and
    changes its content, so a cache keyed on a pointer, a version or a content hash
    either misses (and the candidate pays for the work) or returns a stale answer
    (which the recheck catches). Full regeneration by the factory (``regenerate``)
    costs about as much as a memory-bound op itself, which is why it is not the default.
``recheck``
    In a sample of the timed blocks (at least ``min_rechecks`` a case, then as many as
    ``recheck_budget`` of the timed seconds pays for) one call, chosen by the parent at
    random, keeps a pristine copy of its inputs and its output; after the block the
    output is held against the baseline on that copy with the manifest's oracles, and
    against the storage checks of the preflight. Batch-then-skip, replay caches and
    correct-then-drift fail here (:meth:`.side.SideBench.block`, :class:`~.envelope.RecheckPolicy`).
``timer``
    The parent times every block on its own clock (the *envelope*) while the worker
    reports its own: the timed seconds, the untimed harness work and its wall time. A
    block whose worker wall time falls short of the envelope by more than
    ``max(envelope_abs_s, envelope_rel x envelope)`` is flagged and its sample
    replaced by the envelope (an upper bound no in-worker trick can shorten); a side
    with more than half its blocks flagged makes the run invalid (:mod:`.envelope`).
``interference``
    What one worker can do to the other from outside it. While a side's blocks are
    timed the other side's worker is stopped (:mod:`.freeze`); the parent watches the
    idle worker's CPU time, stops and priority (:mod:`expkit.checks.interference`); the
    candidate's worker is confined before its code is imported, so that it can neither
    trace, read the memory of nor signal another process (:mod:`.confine`); with two
    threads or more the baseline's worker keeps its threads on its cores
    (:mod:`.affinity_guard`); every worker dies with its parent (:mod:`.lifetime`). Each
    replicate's workers must run the code the first pair ran
    (:mod:`expkit.checks.code_digest`, reported as ``tamper``).
``plausibility``
    A supported speedup above ``max_plausible_speedup`` (10x unless the manifest's
    ``expect.max_plausible_speedup`` says more) or a candidate time below what the
    declared ``flops``/``bytes`` allow on the device (``verdict/roofline.py``) turns the
    verdict into ``inconclusive``: nobody should believe that without a second look.
    Judged from the estimates alone, in :mod:`expkit.verdict.plausibility`.
``uninitialised`` / ``fallback``
    Diagnoses of the preflight (``checks/preflight.py``): an oracle failure made only of NaN
    where the baseline is finite means an element was never written or was computed
    from memory nobody initialised (new allocations are NaN-filled); an identity
    failure on a case where the candidate caught an exception of its own means it
    fell back to another implementation (:mod:`.fallback`).

The checks inside a worker are in-process defence: code that runs in the same process
can, in principle, defeat any of them (walk ``gc`` to the harness's objects, rebind
them, read the channel key). What it cannot defeat is what the parent does and sees from
outside: its clock, its judgement of the raw samples, the kernel's accounts it reads and
the stops it sends; see docs/threat-model.md.
"""
