"""The batch-shape zoo (``verifier.decoders.batch_mutants``; issue 29, kind 1): ``corrupt_batch_gt2``,
``mixed_temperature_leak`` and the reference decoders' ``row_temperatures`` (a temperature per row of one call).

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


def _tempered_first(pair, temperature: float) -> np.ndarray:
    """The target's first-token law at ``temperature`` (softmax(log p / T) = p^(1/T) / Z, float64)."""
    p = _first_law(target_law(pair.target, pair.prefix, 1)) ** (1.0 / temperature)
    return p / p.sum()


def test_row_temperatures_sample_each_row_at_its_own_temperature(models):
    """A call of 1,600 rows at [0.3, 1.0, 0.3, 1.0, ...] (seed 5): the 800 odd rows fit the T = 1 law and the 800 even
    rows the T = 0.3 law (chi-square, alpha 1e-3; the two laws are TV 0.41 apart); equal temperatures are the plain
    call, token for token; ``mixed_temperature_leak`` draws the odd rows at row 0's T = 0.3 (rejects T = 1)."""
    pair, ref, _ = models
    from verifier.decoders import AncestralDecoder
    assert np.array_equal(ref.generate([0], 8, WIDTH, T1, 4), ref.generate([0], 8, WIDTH, T1, 4, row_temperatures=[1.0] * 8))
    temps = [0.3, 1.0] * 800
    cold, warm = _tempered_first(pair, 0.3), _tempered_first(pair, 1.0)
    leak = make_decoder("mixed_temperature_leak", ref.target, ref.draft, K)
    for dec in (ref, AncestralDecoder(ref.target), leak):
        rows = dec.generate([0], 1600, WIDTH, T1, 5, row_temperatures=temps)
        odd, even = np.bincount(rows[1::2, 0], minlength=4), np.bincount(rows[0::2, 0], minlength=4)
        assert gof_test(even, cold, alpha=1e-3).pvalue > 1e-3
        if dec is leak:
            assert gof_test(odd, warm, alpha=1e-3).pvalue < 1e-3 and gof_test(odd, cold, alpha=1e-3).pvalue > 1e-3
        else:
            assert gof_test(odd, warm, alpha=1e-3).pvalue > 1e-3, type(dec).__name__


@pytest.mark.parametrize("temps", [[1.0], [1.0, 0.0], [1.0, float("nan")], "ab", [True, 1.0]])
def test_bad_row_temperatures_name_the_argument(models, temps):
    from verifier.errors import InvalidArgumentError
    _, ref, _ = models
    with pytest.raises(InvalidArgumentError, match="row_temperatures"):
        ref.generate([0], 2, WIDTH, T1, 0, row_temperatures=temps)
    with pytest.raises(InvalidArgumentError, match="greedy"):
        ref.generate([0], 2, WIDTH, SamplingConfig(temperature=0.0), 0, row_temperatures=[1.0, 1.0])
