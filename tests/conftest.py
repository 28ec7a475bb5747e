"""What every test of the suite shares."""

import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def error_details_stay_in_the_sessions_tmp(tmp_path_factory):
    """The command line's boundary writes a failure's details to a new ``expkit-error-*.txt``
    where a command has no folder of its own; the suite's deliberate failures write theirs
    under the session's temporary folder (``EXPKIT_ERROR_DIR``, inherited by the processes
    the tests start), never into the system's ``/tmp``, where they stayed (issue 51)."""
    from expkit.cli.boundary import ERROR_DIR_ENV

    before = os.environ.get(ERROR_DIR_ENV)
    os.environ[ERROR_DIR_ENV] = str(tmp_path_factory.mktemp("error-details"))
    yield
    if before is None:
        os.environ.pop(ERROR_DIR_ENV, None)
    else:
        os.environ[ERROR_DIR_ENV] = before
