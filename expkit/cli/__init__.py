"""The ``expkit`` command line: parse, translate, call a library function, map to an exit code.

* :mod:`.commands` -- the argument parser (options and ``key=value`` in any order) and
  one ``cmd_*`` function per command, each a thin layer over a library function that
  the tests call directly (``run`` over :func:`expkit.api.run`).
* :mod:`.boundary` -- the one place every exception ends: one line on stderr, the
  traceback in a file, a documented exit code.
* :mod:`.progress` -- the one-line progress display of a long run (rich; terminals only).
* :mod:`.doctor` -- ``expkit doctor``: what the machine can do, what each gap costs a run.

The top of the import graph: nothing in expkit imports the CLI.
"""

from .commands import entry, main

__all__ = ["entry", "main"]
