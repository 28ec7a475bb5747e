"""What each side's import ran, digested so that fresh processes compare (``checks/code_digest.py``)."""

from __future__ import annotations

import importlib
import os
import py_compile
import subprocess
import sys

from pathlib import Path

from expkit.checks import code_digest as D

SOURCE = """
KINDS = frozenset({"alpha", "beta", "gamma", "delta"})

def f(x):
    return x in {"alpha", "beta", "gamma", "delta"} and x * 2

class K:
    def g(self):
        return (1.5, "s", b"b", None, f)
"""


def _digest_in_a_fresh_process(folder: Path, seed: str) -> str:
    code = ("import sys; sys.path.insert(0, sys.argv[1]); before = set(sys.modules); import digested_mod; "
            "from expkit.checks.code_digest import imported_code; "
            "print(imported_code(before, installation=())['digested_mod'])")
    env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([sys.executable, "-c", code, str(folder)], env=env, check=True, capture_output=True,
                          text=True).stdout.strip()


def test_the_digest_is_the_same_in_processes_that_hash_strings_differently(tmp_path):
    (tmp_path / "digested_mod.py").write_text(SOURCE)
    assert len({_digest_in_a_fresh_process(tmp_path, seed) for seed in ("1", "2", "3")}) == 1


def test_a_bytecode_file_swapped_beside_an_unchanged_source_changes_the_digest(tmp_path):
    """Python loads a bytecode file whose header matches the source's size and time: what
    the import ran is then not the source. The digest is of what the loader gives."""
    src = tmp_path / "digested_mod.py"
    src.write_text(SOURCE)
    honest = _digest_in_a_fresh_process(tmp_path, "0")
    st = src.stat()
    pyc = Path(importlib.util.cache_from_source(str(src)))
    # Compile other code of the same length, then put the real source back with its size and time.
    swapped = SOURCE.replace("x * 2", "x * 3")
    assert len(swapped) == len(SOURCE)
    src.write_text(swapped)
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))
    py_compile.compile(str(src), cfile=str(pyc), invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
    src.write_text(SOURCE)
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))
    code = ("import sys; sys.path.insert(0, sys.argv[1]); before = set(sys.modules); import digested_mod; "
            "from expkit.checks.code_digest import imported_code; "
            "print(digested_mod.f('alpha'), imported_code(before, installation=())['digested_mod'])")
    ran, digest = subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True, capture_output=True,
                                 text=True).stdout.split()
    assert ran == "alphaalphaalpha"  # the swapped bytecode ran, from the unchanged source's folder
    assert digest != honest


def test_only_modules_new_since_before_and_outside_the_installation_count(tmp_path, monkeypatch):
    (tmp_path / "digested_mod.py").write_text(SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    D.imported_code(set())  # what finding the installation imports (sysconfig's data) is in before
    before = set(sys.modules)
    import json  # noqa: F401 -- already imported: not new
    mod = importlib.import_module("digested_mod")
    try:
        got = D.imported_code(before)
        assert set(got) == {"digested_mod"}
        assert D.imported_code(before, installation=(str(tmp_path) + os.sep,)) == {}
        assert D.imported_code(set(sys.modules)) == {}
    finally:
        sys.modules.pop(mod.__name__, None)


def test_a_loader_that_gives_no_code_again_is_digested_from_its_source(tmp_path):
    """pytest's assertion-rewriting loader (a module named like a test file, imported in a
    worker forked from a pytest session) has no ``get_code``: the source is compiled instead."""
    src = tmp_path / "digested_mod.py"
    src.write_text(SOURCE)

    class Loader:
        pass

    spec = importlib.util.spec_from_file_location("digested_mod", src, loader=Loader())
    mod = importlib.util.module_from_spec(spec)
    got = D.imported_code(set(), {"digested_mod": mod}, installation=())
    assert got == {"digested_mod": D.code_digest(compile(SOURCE, str(src), "exec"))}


def test_changed_code_names_the_modules_both_imported_whose_code_differs():
    assert D.changed_code({"a": "1", "b": "2"}, {"a": "1", "b": "3", "c": "4"}) == ("b",)
    assert D.changed_code({"a": "1"}, {"a": "1"}) == ()
    assert D.changed_code({}, {"a": "1"}) == ()  # a worker that found it imported already counted none


def test_the_digest_follows_nested_code_and_constants():
    one = compile("def f():\n    def g():\n        return 1\n    return g\n", "m.py", "exec")
    two = compile("def f():\n    def g():\n        return 2\n    return g\n", "m.py", "exec")
    assert D.code_digest(one) != D.code_digest(two)
    assert D.code_digest(one) == D.code_digest(compile("def f():\n    def g():\n        return 1\n    return g\n",
                                                       "m.py", "exec"))
