"""scripts/moved_paths.py: an old results path maps to where its content is in evidence/ now."""

from __future__ import annotations

import tarfile
from pathlib import Path

import repo_scripts

ROOT = Path(__file__).resolve().parents[1]


def _script():
    return repo_scripts.load("scripts/moved_paths.py")


def test_a_readable_file_maps_to_its_new_path_which_exists():
    path, member = _script().locate("benchmarks/results/cpu-2026-11-27/under_load.md")
    assert (path, member) == ("evidence/defences/busy-host/under_load.md", None)
    assert (ROOT / path).is_file()


def test_a_packed_file_maps_to_its_studys_archive_and_is_a_member_of_it():
    path, member = _script().locate("benchmarks/results/h100-2026-11-25/start_26_fbadffc.txt")
    assert path == "evidence/harness-cost/gpu-memory-fork-start/raw.tar.xz"
    with tarfile.open(ROOT / path) as t:
        assert member in t.getnames()


def test_a_loose_raw_file_maps_to_its_gzipped_copy():
    path, _ = _script().locate("benchmarks/results/timing_fidelity.json")
    assert path == "evidence/timing-fidelity/timing_fidelity.json.gz" and (ROOT / path).is_file()


def test_a_removed_ci_log_maps_to_the_commit_that_still_holds_it():
    m = _script()
    assert m.locate("benchmarks/results/ci-cpu/ci_run_093f7d4.md") == (
        "60f880e:benchmarks/results/ci-cpu/ci_run_093f7d4.md", None)
    assert m.locate("benchmarks/results/ci-cpu/ci_run_801dd12.md") == ("evidence/ci/latest-cpu.md", None)


def test_a_markdown_link_is_rewritten_relative_to_its_document_and_prose_names_the_member():
    m = _script()
    text = ("[x](../benchmarks/results/h100-2026-11-25/start_26_fbadffc.txt) and "
            "`benchmarks/results/h100-2026-11-25/start_26_fbadffc.txt`.")
    got = m.rewrite(text, "docs/a.md")
    assert got == ("[x](../evidence/harness-cost/gpu-memory-fork-start/raw.tar.xz) and "
                   "`evidence/harness-cost/gpu-memory-fork-start/raw.tar.xz:start_26_fbadffc.txt`.")


def test_debug_scripts_map_to_their_benchmark_or_to_the_commit_that_removed_them():
    m = _script()
    got = m.rewrite("scripts/debug_request_split.py, scripts/debug_hold.py", "docs/a.md")
    assert got == "benchmarks/request_split.py, 60f880e:scripts/debug_hold.py"
    assert not (ROOT / "scripts/debug_hold.py").exists()


def test_every_moved_folder_is_in_evidence_or_was_removed_whole():
    m = _script()
    for old, new in m.MOVED.items():
        path, _ = m.locate(old)
        assert path.startswith(("evidence/", "60f880e:")), (old, path)
