"""Joint, conditional and accepted-count cells against exact laws from ``verifier.exact``.

Pair ``bigram4_eos`` (vocab 4, EOS 3, prompt (0,)), num_draft_tokens 2.  Exact first-round
accepted-count laws: canonical (0.5, 0.33, 0.17), deterministic_acceptance (0.8, 0.1, 0.1)
(``accepted_count_law(pair.target, pair.draft, pair.prefix, 2, rule)``).  Samples are drawn from
the exact laws with fixed seeds; alpha 0.01.
"""

from __future__ import annotations

import numpy as np
import pytest

from verifier.errors import InvalidArgumentError
from verifier.exact import accepted_count_law, n_token_law, standard_tabular_pairs, target_law
from verifier.stats import accepted_count_test, conditional_counts, conditional_test, joint_counts, joint_test, law_probs

ALPHA = 0.01
PAIR = standard_tabular_pairs()["bigram4_eos"]


def _sample(law, n, seed):
    outcomes = list(law)
    probs = np.array([float(law[o]) for o in outcomes])
    rng = np.random.default_rng(seed)
    return np.array(outcomes, dtype=np.int64)[rng.choice(len(outcomes), size=n, p=probs / probs.sum())]


def test_law_probs_encoding_matches_joint_counts():
    tlaw = target_law(PAIR.target, PAIR.prefix, 3)
    probs = law_probs(tlaw, 4, (1, 2))
    assert probs.shape == (25,) and probs.sum() == pytest.approx(1.0)
    # after EOS at position 1 the next symbol is padding: outcome (3, -1) -> index (3+1)*5 + 0
    assert probs[4 * 5] == pytest.approx(float(sum(p for o, p in tlaw.items() if o[1] == 3)))
    tokens = _sample(tlaw, 4000, 1)
    counts = joint_counts(tokens, (1, 2), 4)
    assert counts.sum() == 4000 and counts[probs == 0].sum() == 0


@pytest.mark.parametrize("rule, biased", [("canonical", False), ("full_p_fallback", True)])
def test_joint_cell_passes_exact_rule_and_rejects_mutant(rule, biased):
    # full_p_fallback on this pair: exact TV of the 2-token law to the target is 0.17; n 20000 sees it
    law = n_token_law(PAIR.target, PAIR.draft, PAIR.prefix, 2, 2, rule)
    res = joint_test(_sample(law, 20_000, 2), target_law(PAIR.target, PAIR.prefix, 2), (0, 1), 4, alpha=ALPHA, rng=3)
    assert res.test == "joint" and res.rejected == biased


def test_conditional_cell_uses_only_matching_rows():
    tlaw = target_law(PAIR.target, PAIR.prefix, 2)
    tokens = _sample(tlaw, 10_000, 4)
    counts = conditional_counts(tokens, (1,), 4)
    assert counts.sum() == np.count_nonzero(tokens[:, 0] == 1)
    from_law = conditional_test(tokens, (1,), tlaw, 4, alpha=ALPHA, rng=5)
    from_probs = conditional_test(tokens, (1,), [float(p) for p in PAIR.target.probs((1,))], 4, alpha=ALPHA, rng=5)
    assert from_law.pvalue == pytest.approx(from_probs.pvalue) and not from_law.rejected
    wrong = conditional_test(tokens, (1,), [float(p) for p in PAIR.target.probs((2,))], 4, alpha=ALPHA)
    assert wrong.rejected  # the law after another prefix is far from this one
    with pytest.raises(InvalidArgumentError, match="^token_ids"):
        conditional_test(tokens[tokens[:, 0] != 2], (2,), tlaw, 4)


@pytest.mark.parametrize("rule, biased", [("canonical", False), ("deterministic_acceptance", True)])
def test_accepted_count_cell(rule, biased):
    expected = accepted_count_law(PAIR.target, PAIR.draft, PAIR.prefix, 2, "canonical")
    actual = np.array([float(p) for p in accepted_count_law(PAIR.target, PAIR.draft, PAIR.prefix, 2, rule)])
    counts = np.random.default_rng(6).choice(3, size=2000, p=actual / actual.sum())
    res = accepted_count_test(counts, expected, alpha=ALPHA, rng=7)
    assert res.test == "accepted-count" and res.rejected == biased
    with pytest.raises(InvalidArgumentError, match="^accepted_counts"):
        accepted_count_test(np.array([0, 3]), expected)
