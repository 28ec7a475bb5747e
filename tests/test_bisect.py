"""expkit bisect finds a planted bad commit in a throwaway repository."""

import subprocess
import textwrap

import pytest

from expkit.suites.bisect import bisect

GOOD = "def candidate(x):\n    return x + x\n"
BAD = "def candidate(x):\n    y = x + x\n    y[-1] = 0.0  # the planted bug\n    return y\n"
HELPERS = textwrap.dedent('''
    import torch
    def baseline(x):
        return x * 2
    def inputs(params, gen, device):
        return (torch.randn(params["n"], generator=gen, device=device),)
''')
MANIFEST = textwrap.dedent('''
    name: bisect-me
    claim: {speedup: 0.01, tolerance: 0.0}
    baseline: helpers:baseline
    candidate: kern:candidate
    inputs: {factory: helpers:inputs}
    cases: [{name: c, params: {n: 256}}]
    oracles: [{kind: exact}]
''')


def git(repo, *args):
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


@pytest.mark.slow
def test_bisect_finds_the_planted_commit(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    git(repo, "config", "user.email", "t@t")
    git(repo, "config", "user.name", "t")
    (repo / "helpers.py").write_text(HELPERS)
    (repo / "m.yaml").write_text(MANIFEST)
    shas = []
    for i, body in enumerate([GOOD, GOOD + "# 1\n", BAD, BAD + "# 3\n", BAD + "# 4\n"]):
        (repo / "kern.py").write_text(body)
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", f"commit {i}")
        shas.append(subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True,
                                   text=True).stdout.strip())
    res = bisect(shas[0], shas[-1], repo / "m.yaml", ["measure=quick", "measure.max_seconds=0.2"])
    assert res.first_bad == shas[2]
    assert res.verdict == "invalid"
    assert any(r.startswith("oracle:exact") for r in res.reasons)



@pytest.mark.parametrize("where,override,says", [
    ("repo/missing.yaml", "measure=quick", "missing.yaml: no such file (the manifest that judges each commit"),
    ("outside.yaml", "measure=quick", "outside.yaml: not inside the repository being bisected"),
    ("repo/m.yaml", "measure=quik", "override `measure=quik`: no preset `quik` for measure (did you mean `quick`?"),
])
def test_a_manifest_or_setting_that_would_skip_every_step_is_refused_before_bisecting(tmp_path, where, override,
                                                                                       says):
    """A missing manifest, one outside the repository or a misspelt setting made every step a
    skip (or an internal failure) after the bisect had begun checking out commits (issue 51)."""
    from expkit.core.errors import ExpkitError

    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "m.yaml").write_text(MANIFEST)
    (tmp_path / "outside.yaml").write_text(MANIFEST)
    with pytest.raises(ExpkitError) as e:
        bisect("HEAD", "HEAD", tmp_path / where, [override], repo=repo)
    assert says in str(e.value)
