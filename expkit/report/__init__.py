"""The report stage: stored results in, markdown and figures out.

* :mod:`.store` -- the on-disk formats of a run (``result.json``, ``samples.csv``,
  ``env.json``), versioned, written atomically.
* :mod:`.run_report` -- ``report.md`` of one run; :mod:`.workload` its "End to end"
  section; :mod:`.plots` its figures.
* :mod:`.session` -- a session folder and ``session.md``; :mod:`.compare` two runs or
  sessions case by case; :mod:`.ci_summary` the GitHub job summary.
* :mod:`.formatting` -- the template environment and the formats every artefact shares.
* ``templates/`` -- the Jinja templates (they only format; they never compute).

Every renderer reads stored files and dicts only, never a live object of a stage
above, so any report can be re-rendered later from its folder. The run report's
entry points are re-exported here (``from expkit import report; report.write(run_dir)``).
"""

from .formatting import cell, fmt_duration, fmt_usd, settle_hint, template_env
from .run_report import context, fmt_fraction, fmt_rate, render, write

__all__ = ["render", "write", "context", "cell", "fmt_usd", "fmt_duration", "fmt_rate", "fmt_fraction",
           "settle_hint", "template_env"]
