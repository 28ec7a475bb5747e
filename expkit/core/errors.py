"""The one exception family users see.

Everything a user can cause (a bad manifest, an unknown override, a reference that
does not import) is raised as an :class:`ExpkitError` subclass and printed once, as
one line, by the CLI; nothing else escapes as a traceback. Exit code 2 for all of
them: the run never started, so there is no verdict.
"""

from __future__ import annotations


class ExpkitError(Exception):
    """A problem the user can fix. ``str(e)`` is the whole message."""

    exit_code = 2


class ManifestError(ExpkitError):
    """A manifest that cannot be loaded: names the file, the key path and the fix."""

    def __init__(self, path: object, key: str, problem: str, fix: str = "") -> None:
        self.path, self.key, self.problem, self.fix = str(path), key, problem, fix
        where = f"{self.path}: {key}: " if key else f"{self.path}: "
        super().__init__(where + problem + (f" ({fix})" if fix else ""))


class ConfigError(ExpkitError):
    """A runner setting or override that Hydra cannot compose."""


class ReferenceError_(ExpkitError):
    """A ``module:function`` reference that does not import or is not callable."""


class OutOfMemoryPlan(ExpkitError):
    """The code under test cannot fit in memory even once: exit code 5, not a verdict.

    Raised by the run's memory plan (issue 19) when one plain call of a side, with its
    inputs and outputs, needs more memory than is free on ``device`` before the harness
    has made any copy of its own: no amount of shrinking the harness's copies would let
    the run go on. ``needed_bytes`` is the plan's estimate of that one call's peak,
    ``free_bytes`` what the device had free when it was measured; ``fix`` says what to
    change (a smaller case, a larger device, fewer other processes on it).
    """

    exit_code = 5

    def __init__(self, where: object, device: str, needed_bytes: int, free_bytes: int, fix: str) -> None:
        self.where, self.device, self.fix = str(where), device, fix
        self.needed_bytes, self.free_bytes = int(needed_bytes), int(free_bytes)
        gib = 1024 ** 3
        super().__init__(f"{self.where}: one plain call needs {self.needed_bytes / gib:.2f} GiB on {device} and "
                         f"{self.free_bytes / gib:.2f} GiB is free ({fix})")


#: Exit codes of expkit commands besides the verdicts' (0 supported, 1 refuted,
#: 3 invalid, 4 inconclusive; ``expkit.verdict.rules.EXIT_CODES``). ``USAGE`` is every
#: :class:`ExpkitError` that sets no code of its own; ``INTERNAL`` is an exception that
#: is not an ExpkitError (a bug in expkit or a failure of its environment), caught by the
#: command line's one boundary and written to a file whose path the one line names.
EXIT_USAGE = ExpkitError.exit_code
EXIT_OUT_OF_MEMORY = OutOfMemoryPlan.exit_code
EXIT_INTERNAL = 6
EXIT_INTERRUPTED = 130
#: The reader of the command's output went away (``expkit run M | head``): a shell's code for SIGPIPE.
EXIT_BROKEN_PIPE = 141
