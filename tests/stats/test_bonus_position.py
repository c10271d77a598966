"""The randomized PIT sees a bonus-token-position bug that the first-token GOF cannot.

Laws come from the exact enumerator: ``verifier.exact.n_token_law`` on the ``bigram4_eos``
tabular pair (vocab 4, EOS 3, prompt (0,)), num_draft_tokens 1, 3 emitted tokens, rule
``bonus_wrong_position`` (bonus drawn from the target at position k instead of k + 1) or
``canonical``.  Exact TV to the target law: position 0 marginal 0, position 1 marginal 0.07,
3-token law 0.1105 (``python -c "from verifier.exact import *; ..."`` as in ``_laws`` below).
Samples are drawn from those exact laws (seed 800), then tested as a decoder's output would be.
"""

from __future__ import annotations

import numpy as np
import pytest

from verifier.exact import marginal, n_token_law, standard_tabular_pairs, target_law, total_variation
from verifier.stats import gof_test, law_probs, pit_chi2_test, pit_ks_test, randomized_pit, joint_test

NUM_SAMPLES = 20_000  # measured at seed 800: mutant PIT KS p 4e-67, chi2 p 2e-146; canonical KS p 0.057, chi2 p 0.75; first-token p 0.57 / 0.49
ALPHA = 0.01


def _laws(rule):
    pair = standard_tabular_pairs()["bigram4_eos"]
    law = n_token_law(pair.target, pair.draft, pair.prefix, 1, 3, rule)
    return pair, law, target_law(pair.target, pair.prefix, 3)


def _sample(law, n, rng):
    outcomes = list(law)
    probs = np.array([float(law[o]) for o in outcomes])
    return np.array(outcomes, dtype=np.int64)[rng.choice(len(outcomes), size=n, p=probs / probs.sum())]


def _pit_all_positions(pair, tokens, rng):
    """u for every emitted token, with teacher-forced target probs of its own prefix (bigram: last token)."""
    table = pair.target.float_table()  # row = context token (context_len 1)
    context = np.concatenate([np.full((len(tokens), 1), pair.prefix[-1]), tokens[:, :-1]], axis=1)
    keep = tokens != -1
    return randomized_pit(tokens[keep], table[context[keep]], rng)


@pytest.mark.parametrize("rule, biased", [("bonus_wrong_position", True), ("canonical", False)])
def test_pit_detects_bonus_position_bug_first_token_test_cannot(rule, biased):
    pair, law, tlaw = _laws(rule)
    assert total_variation(marginal(law, 0), marginal(tlaw, 0)) == 0  # invisible at the first token
    assert (total_variation(law, tlaw) > 0) == biased
    rng = np.random.default_rng(800)
    tokens = _sample(law, NUM_SAMPLES, rng)
    first = gof_test(np.bincount(tokens[:, 0] + 1, minlength=5), law_probs(tlaw, 4, (0,)), alpha=ALPHA, rng=rng)
    u, violations = _pit_all_positions(pair, tokens, rng)
    ks, chi = pit_ks_test(u, alpha=ALPHA), pit_chi2_test(u, alpha=ALPHA)
    assert violations == ()
    assert not first.rejected  # the first-token cell passes for both rules
    assert ks.rejected == biased and chi.rejected == biased
    # the exact joint law of positions (0, 1) localises it too
    assert joint_test(tokens, tlaw, (0, 1), 4, alpha=ALPHA, rng=rng).rejected == biased
