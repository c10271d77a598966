"""The simulated test battery of the benchmarks (verifier/bench/_battery.py, _tabular.py).

Expected values come from verifier.exact (marginal laws, n_token_law, accepted_count_law), scipy
(kstest) and verifier.stats.adjust (the runner's gate decision) -- never from the code under test.
"""

import numpy as np
import pytest
from scipy import stats

from verifier.bench._battery import BatterySpec, TupleLaw, family_rejects, first_rejections, ks_uniform_pvalues
from verifier.bench._tabular import marginal_tokens, processed_tabular, tokens_and_accepted_law
from verifier.exact import accepted_count_law, marginal, n_token_law, standard_cases, standard_tabular_pairs, target_law
from verifier.sampling import SamplingConfig
from verifier.stats import adjust

CASES = {c.name: c for c in standard_cases()}


def _tuple_law(case_name, *laws):
    c = CASES[case_name]
    tlaw = target_law(c.target, c.prefix, c.num_tokens)
    return c, tlaw, TupleLaw(tlaw, lambda pre: c.target.probs(tuple(c.prefix) + tuple(pre)), c.target.vocab_size, list(laws))


def test_family_decision_equals_the_runner_gate():
    rng = np.random.default_rng(1)
    p = rng.uniform(size=(300, 5)) ** rng.uniform(1, 6, size=(300, 1))  # from null-like to strongly significant
    p[::37, 2] = 0.0  # support violations count as p = 0
    for alpha in (1e-3, 1e-2):
        ours = family_rejects(p, alpha)
        ref = np.array([adjust(row, alpha=alpha, mode="gate", dependent=True).family_rejected for row in p])
        assert ours.tolist() == ref.tolist()
        assert 0 < ours.sum() < len(p)  # the grid exercises both decisions


def test_ks_pvalues_match_scipy_kstest():
    rng = np.random.default_rng(2)
    u = np.concatenate([rng.uniform(size=(40, 300)), rng.beta(1.3, 1, size=(40, 300))])
    u[:5, 250:] = np.nan  # rows of different lengths (EOS): NaN entries are skipped
    ours = ks_uniform_pvalues(u)
    ref = np.array([stats.kstest(row[~np.isnan(row)], "uniform").pvalue for row in u])
    small = ref < 0.05
    assert small.any() and (~small).any()
    np.testing.assert_allclose(ours[small], ref[small], rtol=1e-6)  # exact law where decisions happen
    np.testing.assert_allclose(ours[~small], ref[~small], atol=1e-2)  # Stephens' approximation elsewhere (documented bound)


def test_cells_expected_laws_are_the_exact_marginals():
    c, tlaw, tl = _tuple_law("bigram4_eos")
    cells = dict((name, (code, exp)) for name, code, exp in tl.cell_codes(BatterySpec(gof_positions=(1, 2, 3), joint_tokens=3)))
    for t in (1, 2, 3):
        m = marginal(tlaw, [t - 1])
        want = np.zeros(c.target.vocab_size + 1)
        for (x,), pr in m.items():
            want[x if x != -1 else c.target.vocab_size] += float(pr)
        np.testing.assert_allclose(cells[f"gof@{t}"][1], want, atol=1e-12)
    assert np.isclose(cells["joint@1..3"][1].sum(), 1.0)


def test_null_is_calibrated_and_a_biased_rule_is_caught():
    """Test the tester (seeded, 100 streams, alpha 0.01): under the target's own law the fixed-n
    battery rejects on at most 5 of 100 streams at every n (P(Bin(100, .01) > 5) < 1e-3); against
    full-p fallback on seed_fallback (TV .06; oracle n 1014) it reaches power 0.5 by n = 1014."""
    c, tlaw, tl = _tuple_law("seed_fallback")
    null = first_rejections(tl, tl.target, BatterySpec(), seeds=100, max_n=300, seed=3, sequential=True)
    assert null.power.max() <= 0.05
    assert np.isinf(null.sequential).mean() >= 0.95  # Ville: P(e-process ever crosses) <= alpha
    law = n_token_law(c.target, c.draft, c.prefix, c.num_draft_tokens, c.num_tokens, "full_p_fallback")
    _, _, tl2 = _tuple_law("seed_fallback", law)
    alt = first_rejections(tl2, tl2.vector(law), BatterySpec(), seeds=100, max_n=1014, seed=4, sequential=False)
    assert alt.fixed_n_quantile(0.5) <= 1014


@pytest.mark.parametrize("sampling", [SamplingConfig(temperature=1.0), SamplingConfig(temperature=0.7, top_k=2)])
def test_tokens_and_accepted_law_marginals(sampling):
    pair = standard_tabular_pairs()["bigram4_eos"]
    t, d = processed_tabular(pair.target, sampling), processed_tabular(pair.draft, sampling)
    for rule in ("canonical", "bonus_wrong_position"):
        joint = tokens_and_accepted_law(t, d, pair.prefix, 2, 3, rule)
        assert marginal_tokens(joint) == n_token_law(t, d, pair.prefix, 2, 3, rule)
        acc = tuple(sum(p for (_, a), p in joint.items() if a == j) for j in range(3))
        assert acc == accepted_count_law(t, d, pair.prefix, 2, rule)


