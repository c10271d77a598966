"""The batch-shape zoo (``verifier.decoders.batch_mutants``; issue 29, kind 1): ``corrupt_batch_gt2``.

Deterministic: the mutant draws the same uniforms as the reference, so for one seed a call of 1 or 2 rows is the
reference's array, and in a call of 640 rows the first round is the reference's in slots 0 and 1 (its emitted
tokens) and in every slot its accepted count (the accept test is unchanged: acceptance looks normal); the later
slots' recovered tokens differ.  (After the first round the rows that finish differ, the batch shrinks at other
rounds and the shared stream's uniforms land on other rows: only the law is the same there.)

Statistical: on bigram4_eos (prompt (0,), T = 1, k = 2, 3 tokens), calls of 16 rows, 125 calls (seed 11): the first
token of slots 2..15 (1,750 rows) fits the exact ``full_p_fallback`` law (``verifier.exact.slot_law``) and rejects the
target's by a chi-square at alpha 1e-3 (the two first-token laws are TV 0.15 apart; n = 1,750 sees TV 0.07 at power
0.99, printed by the assertion); slots 0..1 (250 rows) fit the target's.
"""

from __future__ import annotations

import numpy as np
import pytest

from verifier.decoders import make_decoder
from verifier.exact import marginal, slot_law, standard_tabular_pairs, target_law
from verifier.models import TabularCausalLM
from verifier.sampling import SamplingConfig
from verifier.stats import gof_test, min_detectable_effect

T1 = SamplingConfig(temperature=1.0)
K, WIDTH = 2, 3


@pytest.fixture(scope="module")
def models():
    pair = standard_tabular_pairs()["bigram4_eos"]
    target, draft = TabularCausalLM(pair.target), TabularCausalLM(pair.draft)
    return pair, make_decoder("reference", target, draft, K), make_decoder("corrupt_batch_gt2", target, draft, K)


def test_calls_of_one_or_two_rows_are_the_reference(models):
    _, ref, bad = models
    for rows in (1, 2):
        for seed in range(5):
            assert np.array_equal(ref.generate([0], rows, WIDTH, T1, seed), bad.generate([0], rows, WIDTH, T1, seed))


def test_a_large_call_keeps_the_first_round_of_slots_0_1_and_the_acceptance(models):
    _, ref, bad = models
    a, b = ref.generate([0], 640, WIDTH, T1, 3), bad.generate([0], 640, WIDTH, T1, 3)
    fra = ref.last_stats.first_round_accepted
    assert np.array_equal(fra, bad.last_stats.first_round_accepted)
    for r in (0, 1):  # the first round emits the accepted drafts and one recovered or bonus token
        assert np.array_equal(a[r, :fra[r] + 1], b[r, :fra[r] + 1])
    first_round = np.arange(WIDTH)[None] <= fra[:, None]
    assert not np.array_equal(np.where(first_round, a, -9)[2:], np.where(first_round, b, -9)[2:])


def _first_law(law) -> np.ndarray:
    m = marginal(law, (0,))
    return np.array([float(m.get((x,), 0)) for x in range(4)])


def test_late_slots_have_the_exact_corrupted_law(models):
    pair, _, bad = models
    rows = np.concatenate([bad.generate([0], 16, WIDTH, T1, 11_000 + i) for i in range(125)])
    late, early = rows.reshape(125, 16, WIDTH)[:, 2:].reshape(-1, WIDTH), rows.reshape(125, 16, WIDTH)[:, :2].reshape(-1, WIDTH)
    corrupted = _first_law(slot_law(pair.target, pair.draft, pair.prefix, K, 2, 2, 16))
    clean = _first_law(target_law(pair.target, pair.prefix, 2))
    counts = np.bincount(late[:, 0], minlength=4)
    mde = min_detectable_effect(len(late), clean, alpha=1e-3, power=0.99)
    assert gof_test(counts, corrupted, alpha=1e-3).pvalue > 1e-3
    assert gof_test(counts, clean, alpha=1e-3).pvalue < 1e-3, mde
    assert gof_test(np.bincount(early[:, 0], minlength=4), clean, alpha=1e-3).pvalue > 1e-3
