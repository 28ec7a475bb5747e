# %% [markdown]
# # A kernel claim from Python
# Run as a notebook (each `# %%` is a cell) or as `python -c "$(cat notebook.py)"` from
# this folder. The functions come from a module, `matrix_chain.py`, because expkit runs
# them in a worker process that imports them by name: a function defined in a cell
# cannot be imported.

# %%
import expkit
from matrix_chain import chain_inputs, chain_left, chain_right

claim = {
    "name": "matrix-chain",
    "claim": {"speedup": 1.5, "tolerance": 0.1},
    "baseline": chain_left,
    "candidate": chain_right,
    "inputs": {"factory": chain_inputs, "free": ["p"]},
    "cases": [{"name": "n256-p64", "params": {"m": 256, "k": 256, "n": 256, "p": 64}}],
    "expect": {"must_run": ["expkit_example::chain_right"]},
    "oracles": [{"kind": "relative_error", "max_error": 1.0e-5}],
}

# %% Run it; runner settings are keyword arguments (measure__target_ci=0.02 sets measure.target_ci)
result = expkit.run(claim, measure="quick")
result  # a notebook shows the verdict, the reasons and a table of the cases

# %% The figures behind the summary
case = result.case("n256-p64")
print(result.verdict, f"{case.speedup:.2f}x", f"[{case.ci_low:.2f}, {case.ci_high:.2f}]",
      f"candidate {case.candidate.median_s * 1e3:.3f} ms per call", result.report)

# %% A run folder reads back as the same value
assert expkit.load(result.run_dir) == result
