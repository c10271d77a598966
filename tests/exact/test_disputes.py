"""Two public disputes settled by the exact stage (issue 29): both rules are lossless, as must-pass controls.

docs/disputes.md has the claims, the arguments and where each control runs as a decoder.

1. **Target-only verification of a deterministic top-k tree** (EAGLE's ``evaluate_posterior`` with ``qx = 1.0``,
   SGLang's ``TreeSpeculativeSamplingTargetOnly``; claimed not lossless in SafeAILab/EAGLE issue #329 because it
   "ignores q"): the children are the draft's top-k (deterministic), and sibling ``x`` is accepted with the current
   target prob ``p_i(x)``, else ``x`` is removed from ``p_i`` and the rest renormalized -- sequential sampling
   without replacement from the target.  Rule ``topk_target_only`` of :mod:`verifier.exact.tree_rules`.
2. **Accept a draft iff it equals a fresh target sample** (the MTP verifier of ml-explore/mlx-swift-lm, claimed to
   bias the output in pull request #459): draw ``y ~ p``; accept the draft ``x`` iff ``x == y``; on a mismatch emit
   ``y``.  Rule ``fresh_target_match`` of :mod:`verifier.exact.rules`.

Each test compares the exact (``Fraction``) law of the emitted tokens with the target's on every standard tabular
pair and tree; the claim's own observation is checked too (it is true and does not imply bias): the accepted drafts
of rule 2 follow ``p q / sum(p q)``, not ``p`` -- but every emitted token is ``y``, a plain target sample.
Expected values come from the exact enumerator, nothing is sampled.
"""

from fractions import Fraction as F

import pytest

from verifier.exact import n_token_law, standard_tabular_pairs, step_law, target_law, total_variation
from verifier.exact.tree_laws import tree_n_token_law
from verifier.exact.tree_shape import chain_shape, parse_tree

PAIRS = standard_tabular_pairs()
TREES = ["2", "3", "2;2,2", "3;1,1,1"]  # widths per level (verifier.exact.tree_shape.parse_tree)
P, Q = (F(1, 2), F(1, 3), F(1, 6)), (F(1, 6), F(1, 6), F(2, 3))


@pytest.mark.parametrize("pair_name", list(PAIRS))
@pytest.mark.parametrize("tree", TREES)
def test_target_only_verification_of_a_top_k_tree_is_lossless(pair_name, tree):
    pair = PAIRS[pair_name]
    law = tree_n_token_law(pair.target, pair.draft, pair.prefix, parse_tree(tree), 3, "topk_target_only")
    assert total_variation(law, target_law(pair.target, pair.prefix, 3)) == 0


def test_the_q_free_rule_is_not_the_canonical_rule_on_a_sampled_draft():
    """What the claim gets right: a *sampled* draft verified without q is biased (the rule needs deterministic
    children). The zoo's ``greedy_draft`` is the mirror image: a deterministic draft verified *with* p/q."""
    pair = PAIRS["unigram3"]
    from verifier.exact import RULES

    assert RULES["greedy_draft"].declared == "biased"
    greedy = n_token_law(pair.target, pair.draft, pair.prefix, 2, 2, "greedy_draft")
    assert total_variation(greedy, target_law(pair.target, pair.prefix, 2)) > 0


@pytest.mark.parametrize("pair_name", list(PAIRS))
@pytest.mark.parametrize("k", [1, 2, 3])
def test_fresh_target_match_is_lossless(pair_name, k):
    pair = PAIRS[pair_name]
    law = n_token_law(pair.target, pair.draft, pair.prefix, k, 3, "fresh_target_match")
    assert total_variation(law, target_law(pair.target, pair.prefix, 3)) == 0
    assert law == n_token_law(pair.target, pair.draft, pair.prefix, k, 3, "canonical")


def test_fresh_target_match_accepts_a_biased_subset_but_emits_the_target():
    """The pull request's observation, exactly: P(accept) = sum p q (less than the canonical sum min(p, q)) and the
    accepted drafts follow p q / sum(p q); the emitted token is nevertheless distributed as p."""
    law = step_law(P, Q, "fresh_target_match")
    pq = [p * q for p, q in zip(P, Q)]
    assert law.acceptance_prob == sum(pq) == F(1, 4)
    assert step_law(P, Q, "canonical").acceptance_prob == sum(min(p, q) for p, q in zip(P, Q)) == F(1, 2)
    assert [m / law.acceptance_prob for m in law.accepted_mass] == [x / sum(pq) for x in pq] != list(P)
    assert law.output_law == P and law.is_exact


def test_a_chain_is_the_one_child_tree():
    """The two disputes meet on a chain: top-k target-only on one child per level is fresh-target-match with a
    greedy draft, lossless as well."""
    pair = PAIRS["trigram3"]
    law = tree_n_token_law(pair.target, pair.draft, pair.prefix, chain_shape(2), 3, "topk_target_only")
    assert law == target_law(pair.target, pair.prefix, 3)
