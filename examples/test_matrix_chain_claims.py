"""Kernel claims as tests, with expkit's pytest plugin (loaded wherever expkit is installed).

    pytest examples/test_matrix_chain_claims.py --expkit-reports=reports/claims

Each claim runs to a verdict: the test fails on refuted or invalid with the verdict's
reasons, and the session report lands in reports/claims/session.md.
"""

import pytest

from matrix_chain import chain_inputs, chain_left, chain_right

CASES = {"n256-p64": {"m": 256, "k": 256, "n": 256, "p": 64}}
EXACT_ENOUGH = [{"kind": "relative_error", "max_error": 1.0e-5}]


def test_reassociating_the_chain_is_faster(expkit_claim):
    result = expkit_claim(baseline=chain_left, candidate=chain_right, inputs=chain_inputs, speedup=1.5,
                          tolerance=0.1, cases=CASES, free=["p"], oracles=EXACT_ENOUGH,
                          expect={"must_run": ["expkit_example::chain_right"]}, measure="quick")
    assert result.case("n256-p64").ci_low >= 1.35


@pytest.mark.expkit("matrix-chain.yaml", measure="quick")
def test_the_manifest_file_holds(expkit_result):
    assert expkit_result.ok


@pytest.mark.xfail(strict=True, reason="a 10x claim for a 2.5x reduction in work: expkit refutes it")
def test_an_overstated_claim_fails(expkit_claim):
    expkit_claim(baseline=chain_left, candidate=chain_right, inputs=chain_inputs, speedup=10, cases=CASES,
                 oracles=EXACT_ENOUGH, measure="quick")
