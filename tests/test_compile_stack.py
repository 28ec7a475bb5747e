"""The suite server's import of torch.compile's stack: CUDA's availability answered without the driver."""

import importlib.machinery
import sys
import types

import pytest
import torch

from expkit.bench.processes import compile_stack


@pytest.fixture
def stack(monkeypatch):
    """Stand-in stack modules that record what ``torch.cuda.is_available()`` answers as they are imported."""
    seen = {}

    class Finder:
        def find_spec(self, name, path=None, target=None):
            if not name.startswith("fake_stack_"):
                return None

            class Loader:
                def create_module(self, spec):
                    return types.ModuleType(spec.name)

                def exec_module(self, module):
                    seen[module.__name__] = torch.cuda.is_available()

            return importlib.machinery.ModuleSpec(name, Loader())

    monkeypatch.setattr(sys, "meta_path", [Finder(), *sys.meta_path])
    monkeypatch.setattr(compile_stack, "IMPORTED", {})
    yield seen
    for name in [n for n in sys.modules if n.startswith("fake_stack_")]:
        sys.modules.pop(name)


@pytest.mark.parametrize("answer", [True, False])
def test_the_stack_sees_the_hosts_answer_and_the_real_function_is_back_after(stack, monkeypatch, answer):
    real = torch.cuda.is_available
    monkeypatch.setattr(compile_stack, "gpu_visible", lambda: answer)
    got = compile_stack.import_stack(("fake_stack_a", "absent_stack_module"))
    assert stack == {"fake_stack_a": answer}
    assert torch.cuda.is_available is real
    assert isinstance(got["fake_stack_a"], float)
    assert got["absent_stack_module"] == "skipped: ModuleNotFoundError"


def test_the_real_function_is_back_when_an_import_fails(monkeypatch):
    real = torch.cuda.is_available

    class Boom(Exception):
        pass

    def explode(name):
        raise Boom(name)

    monkeypatch.setattr(compile_stack.importlib, "import_module", explode)
    with pytest.raises(Boom):
        compile_stack.import_stack(("anything",))
    assert torch.cuda.is_available is real


@pytest.mark.parametrize("visible, nodes, want", [
    (None, ["/dev/nvidia0"], True),
    ("0,1", ["/dev/nvidia0", "/dev/nvidia1"], True),
    ("GPU-8d1f", ["/dev/nvidia3"], True),
    ("", ["/dev/nvidia0"], False),
    ("-1", ["/dev/nvidia0"], False),
    ("-1,0", ["/dev/nvidia0"], False),
    (None, [], False),
])
def test_a_gpu_is_visible_where_torch_has_cuda_a_device_node_shows_and_nothing_hides_it(monkeypatch, visible, nodes,
                                                                                      want):
    monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: True)
    env = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    assert compile_stack.gpu_visible(env, lambda: nodes) is want


def test_no_gpu_is_visible_to_a_torch_built_without_cuda(monkeypatch):
    monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: False)
    assert compile_stack.gpu_visible({}, lambda: ["/dev/nvidia0"]) is False


def test_the_suite_servers_preload_names_the_stack():
    from expkit.suites.manifest_process import PRELOAD

    assert "expkit.bench.processes.compile_stack" in PRELOAD


@pytest.mark.parametrize("visible", [True, False])
def test_the_stack_is_imported_only_where_a_gpu_is_visible(stack, monkeypatch, visible):
    """On a CPU host every suite server paid the stack's import, compiled candidates or not
    (tests/gpu/test_gpu_start.py checks the import on a GPU host)."""
    monkeypatch.setattr(compile_stack, "STACK", ("fake_stack_a", "fake_stack_b"))
    monkeypatch.setattr(compile_stack, "gpu_visible", lambda: visible)
    imported = compile_stack.import_stack_where_a_gpu_is_visible()
    assert sorted(stack) == (["fake_stack_a", "fake_stack_b"] if visible else [])
    assert all(isinstance(imported[n], float) if visible else imported[n] == "skipped: no GPU visible"
               for n in ("fake_stack_a", "fake_stack_b"))
