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
