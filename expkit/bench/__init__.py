"""The bench stage: the code under test, where it runs, and the defences around it.

A speed claim is only as good as the harness that timed it. This package holds the
:class:`~.bench.Bench` that runs the manifest's code -- in a worker process behind an
authenticated channel, or in-process -- and the defences that keep a candidate from
faking a speedup (deliberately or by accident), one module per mechanism.
``docs/threat-model.md`` says what each one stops and what none of them can; the check
names below are the ones a verdict's reasons carry.

Modules:

* :mod:`.bench` -- the :class:`~.bench.Bench` (imports the code under test, runs the
  preflight and the timed blocks with the defences) and the recheck.
* :mod:`.sessions` -- where the bench runs: :func:`~.sessions.open_session` gives a
  :class:`~.worker_session.WorkerSession` (isolated) or a :class:`~.sessions.LocalSession`.
* :mod:`.worker`, :mod:`.worker_session`, :mod:`.channel` -- the worker process, the
  parent's handle on it, and the framed, signed messages between them.
* :mod:`.tamper`, :mod:`.fresh`, :mod:`.per_call`, :mod:`.envelope`, :mod:`.fallback` --
  the defences, by mechanism (global state and threads live in :mod:`expkit.checks`,
  because the preflight applies them too).
* :mod:`.clock` -- the harness's clock, bound before any candidate code runs.
* :mod:`.diagnose` -- why a worker process died, in one line (the suites use it too).
* :mod:`.environment` -- provenance: what ran where.

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
    correct-then-drift fail here (:meth:`~.bench.Bench.block`, :class:`~.envelope.RecheckPolicy`).
``timer``
    The parent times every block on its own clock (the *envelope*) while the worker
    reports its own: the timed seconds, the untimed harness work and its wall time. A
    block whose worker wall time falls short of the envelope by more than
    ``max(envelope_abs_s, envelope_rel x envelope)`` is flagged and its sample
    replaced by the envelope (an upper bound no in-worker trick can shorten); a side
    with more than half its blocks flagged makes the run invalid (:mod:`.envelope`).
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

All of this is in-process defence in the worker: code that runs in the same process
can, in principle, defeat any of it (walk ``gc`` to the harness's objects, rebind
them, read the channel key). What it cannot defeat is the parent's clock and the
parent's own judgement of the raw samples; see docs/threat-model.md.
"""
