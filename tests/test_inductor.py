"""bench.processes.inductor: torch.compile in a worker compiles in the worker's own process."""

from __future__ import annotations

import os
import textwrap

import torch._inductor.config as inductor_config

from expkit.bench.processes import inductor


def test_compile_in_process_sets_one_compile_thread_in_the_imported_config_and_the_environment(monkeypatch):
    monkeypatch.setattr(inductor_config, "compile_threads", 8)
    monkeypatch.delenv(inductor.ENV, raising=False)
    inductor.compile_in_process()
    assert inductor_config.compile_threads == 1
    assert os.environ[inductor.ENV] == "1"
    monkeypatch.delenv(inductor.ENV)


SOURCE = '''
import torch
import torch._inductor.config as config


def base(x):
    return x * 2.0


def cand(x):
    # Inductor's pool, which outlives a call, exists only where it may compile on several threads.
    if config.compile_threads != 1:
        raise RuntimeError(f"compile_threads={config.compile_threads} in the worker")
    return x + x


def inputs(params, generator, device):
    return (torch.randn(params["n"], generator=generator, device=device),)
'''


def test_a_workers_inductor_compiles_on_one_thread_even_where_the_environment_asks_for_more(tmp_path, monkeypatch):
    from expkit.api import run

    monkeypatch.setenv(inductor.ENV, "4")  # a GPU host's default: a pool of compile workers
    (tmp_path / "ind.py").write_text(SOURCE)
    (tmp_path / "m.yaml").write_text(textwrap.dedent('''
        name: ind
        claim: {speedup: 1.0, tolerance: 0.9}
        baseline: ind:base
        candidate: ind:cand
        inputs: {factory: ind:inputs}
        cases: [{name: c, params: {n: 1024}}]
    '''))
    out = run(tmp_path / "m.yaml", overrides=["measure=quick"], out=tmp_path / "run", plots=False)
    assert out.verdict != "invalid", out.reasons
