"""The suites stage: many manifests, each in its own worker process, into one session.

* :mod:`.suite` -- ``expkit run FOLDER | GLOB | A.yaml B.yaml``: expand, launch, gather,
  one summary and one exit code; ``--resume``.
* :mod:`.launchers` -- where the workers run: this machine's GPUs, or SLURM (submitit).
* :mod:`.manifest_process` -- one manifest in its own process
  (``python -m expkit.suites.manifest_process RUN_DIR``) and the supervisor that enforces
  its time limit and writes an ``invalid`` result for a worker that died.
* :mod:`.kernelbench_import` -- ``expkit import kernelbench DIR``: manifests from problem files.
* :mod:`.bisect` -- ``expkit bisect``: ``git bisect`` with a manifest's verdict as the oracle.
* :mod:`.audit` -- ``expkit audit RUN``: every candidate of a generation run, one worker each,
  inconclusive verdicts re-measured, KernelBench's summary with intervals (``docs/audit.md``).

Everything here drives :func:`expkit.runner.run_manifest` (in a worker process) and
reads back what it stored; it is the only stage above the runner.
"""
