"""``bench detect --field`` (``verifier.bench.detect_field``; issue 26): a few seeds of one row, and the argument checks.

draft_accept_same_uniform on bigram4_eos (k = 2, 3 tokens, T = 1): exact TV 0.307 to the target (``specverify exact
--rule draft_accept_same_uniform``); the NP oracle needs ~15 rows at alpha 0.01, power 0.99; 3 seeds check the row's
shape (rows drawn from the exact law, the battery's fixed-n median finite and >= 1).  target_processed_first_only's
case is processed (T = 1/2, top_k = 2, exact): its law differs from that case's target law and equals it without
processing.  Bad names are InvalidArgumentError naming the argument.
"""

from __future__ import annotations

import math

import pytest

from verifier.bench.detect import _measure, batteries
from verifier.bench.detect_field import PROCESSED_LABEL, detect_field_rows, processed_table
from verifier.errors import InvalidArgumentError
from verifier.exact import n_token_law, standard_tabular_pairs, target_law, total_variation
from verifier.exact.field_rules import target_processed_first_only


def test_same_uniform_row():
    rows = detect_field_rows(["draft_accept_same_uniform"], ["bigram4_eos"], measure=_measure, batteries=batteries, seeds=3)
    assert {r.battery for r in rows} == {"default", "window"} and all(r.rule == "draft_accept_same_uniform" for r in rows)
    assert all(abs(r.tv - 0.307) < 1e-9 and r.oracle_n <= 30 and 1 <= r.fixed_median < math.inf for r in rows)


def test_processed_case_is_biased_and_exact_without_processing():
    pair = standard_tabular_pairs()["trigram3"]
    target, draft = processed_table(pair.target), processed_table(pair.draft)
    assert target.name.endswith(PROCESSED_LABEL)
    law = n_token_law(target, draft, pair.prefix, 2, 3, target_processed_first_only(pair.target))
    assert total_variation(law, target_law(target, pair.prefix, 3)) > 0.05
    same = n_token_law(pair.target, pair.draft, pair.prefix, 2, 3, target_processed_first_only(pair.target))
    assert same == target_law(pair.target, pair.prefix, 3)


def test_bad_names_are_refused():
    with pytest.raises(InvalidArgumentError, match="rules"):
        detect_field_rows(["nope"], None, measure=_measure, batteries=batteries, seeds=1)
    with pytest.raises(InvalidArgumentError, match="cases"):
        detect_field_rows(None, ["unigram3"], measure=_measure, batteries=batteries, seeds=1)
    with pytest.raises(InvalidArgumentError, match="seeds"):
        detect_field_rows(None, None, measure=_measure, batteries=batteries, seeds=0)
