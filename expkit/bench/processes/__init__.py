"""Where the workers run and how the processes talk: the plumbing beneath the two sides.

The parent and the workers exchange signed messages (:mod:`.channel`) and tensors by
descriptor (:mod:`.transport`; profiler traces as plain data, :mod:`.traces`). Whether the
parent may fork a worker (:mod:`.fork_safety`, over the native libraries this process has
loaded, :mod:`.native`, and scipy's BLAS threads, :mod:`.blas`), what the process the workers
fork from warms on a GPU (:mod:`.gpu_preload`), and what each worker is given before a side's
code runs: the same host allocator thresholds (:mod:`.allocator`), compiles in its own process
(:mod:`.inductor`), its cores, shared with the parent while blocks are timed (:mod:`.cores`),
and a life tied to its parent's (:mod:`.lifetime`). Why a worker died, in one line
(:mod:`.diagnose`), and what ran where (:mod:`.environment`). Nothing here imports a side or a
defence; the worker itself and the parent's handle on it build a side, so they are the
sides' (:mod:`..sides.worker`, :mod:`..sides.endpoint`).
"""
