"""A worker's ``print`` reaches its evidence file even where the parent's streams were replaced.

pytest's capture, a notebook or a logging setup replaces ``sys.stderr`` with an object that
writes elsewhere than descriptor 2; a forked worker inherits it. A candidate's CUDA fault
text then went to the parent's capture, and the worker's death was diagnosed from an empty
file (``tests/test_channel.py::test_cuda_error_text_reaches_the_reason`` failed when the
first pair was forked from a pytest process)."""

import io
import os
import sys

import pytest

from expkit.bench.sides import worker


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_worker_prints_to_its_redirected_descriptors(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    out, err = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    pid = os.fork()
    if pid == 0:  # the child: as worker_main redirects, then prints as the side's code would
        try:
            worker._redirect(1, str(out))
            worker._redirect(2, str(err))
            worker._std_streams_to_fds()
            print("to stdout")
            print("RuntimeError: CUDA error: an illegal memory access", file=sys.stderr)
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert out.read_text() == "to stdout\n"
    assert err.read_text() == "RuntimeError: CUDA error: an illegal memory access\n"
    assert sys.stderr.getvalue() == ""  # nothing went to the parent's replacement


def test_streams_already_on_their_descriptors_are_kept(monkeypatch):
    class OnFd(io.StringIO):
        def __init__(self, fd):
            super().__init__()
            self.fd = fd

        def fileno(self):
            return self.fd

    keep_out, keep_err = OnFd(1), OnFd(2)
    monkeypatch.setattr(sys, "stdout", keep_out)
    monkeypatch.setattr(sys, "stderr", keep_err)
    worker._std_streams_to_fds()
    assert sys.stdout is keep_out and sys.stderr is keep_err
