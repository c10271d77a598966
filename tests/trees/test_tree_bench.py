"""``specverify bench trees`` (issue 18 part 4) on tiny settings: the rows it prints are the ones the
method defines (oracle n from the exact tree law, chain first at each budget, the acceptance estimate
agrees with the exact first-round law on a tabular pair)."""

from __future__ import annotations

import math

import pytest

from verifier.bench._oracle import np_oracle_samples
from verifier.bench.trees import acceptance_rows, detect_tree_rows, _tokens_per_round
from verifier.errors import InvalidArgumentError
from verifier.exact import standard_tabular_pairs, target_law
from verifier.exact.tree_laws import tree_accepted_count_law, tree_n_token_law


@pytest.mark.full  # 9 s
def test_detect_rows_use_the_exact_tree_law_and_its_oracle():
    rows = detect_tree_rows(["residual_not_updated"], ["unigram3/3"], seeds=3, max_factor=1.5)
    assert [(r.rule, r.case, r.battery) for r in rows] == [("residual_not_updated", "unigram3/3", "window")]
    pair = standard_tabular_pairs()["unigram3"]
    law = tree_n_token_law(pair.target, pair.draft, (), "3", 3, "residual_not_updated")
    assert rows[0].oracle_n == np_oracle_samples(target_law(pair.target, (), 3), law).n
    assert math.isclose(rows[0].tv, 833 / 4608)
    with pytest.raises(InvalidArgumentError, match="rules"):
        detect_tree_rows(["nope"])


def test_tokens_per_round_estimate_matches_the_exact_law_on_a_tabular_pair():
    """unigram3 (context-free, no EOS): every round is the first round's law, so tokens per round =
    1 + E[accepted] of tree_accepted_count_law; 2000 rows x 12 tokens, 99.9% interval."""
    from verifier.decoders.tree_decoder import TreeDecoder
    from verifier.models import TabularCausalLM

    pair = standard_tabular_pairs()["unigram3"]
    dec = TreeDecoder(TabularCausalLM(pair.target), TabularCausalLM(pair.draft), "2;2,2")
    mean, se, rounds = _tokens_per_round(dec, [[0]], 2000, 12, seed=3)
    exact = 1 + sum(j * float(v) for j, v in enumerate(tree_accepted_count_law(pair.target, pair.draft, (), "2;2,2")))
    assert abs(mean - exact) < 3.3 * se and rounds > 2000, (mean, se, exact)


def test_acceptance_rows_put_the_chain_first():
    rows = acceptance_rows([2], ["iid_multi_draft"], num_samples=4, max_new_tokens=4, prompts=("def ",))
    assert [(r.tree, r.rule) for r in rows] == [("1;1", "chain (canonical)"), ("2", "iid_multi_draft")]
    assert rows[0].gain == 1.0 and all(r.ci_low <= r.tokens_per_round <= r.ci_high for r in rows)
    with pytest.raises(InvalidArgumentError, match="budgets"):
        acceptance_rows([5])
