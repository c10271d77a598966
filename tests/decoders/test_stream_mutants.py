"""The randomness zoo (``verifier.decoders.stream_mutants``): each row has the target's law, rows are not independent.

Per-row law.  On bigram4_eos (prompt (0,), T = 1, 3 tokens) the exact enumerator gives the canonical rule's law
``n_token_law(..., "canonical")``, equal to the target's ``target_law`` (checked as Fractions).  Row r of a call
(r = 0, 1, 5) over 1,000 calls with seeds 0..999 is an iid sample of the mutant's per-row law; each of the 6 (mutant,
row) cells is a chi-square test against the exact law at alpha 1e-3 / 6 (Bonferroni: false-fail rate <= 1e-3).  At
n = 1,000 each cell sees a TV of 0.14 with power 0.99 (``min_detectable_effect`` of the law, printed by the
assertion), so a per-row law off by that much would fail.

Dependence.  ``shared_stream``: rows 2i and 2i + 1 of a call are identical (every pair, exactly);
``serial_stream``: every row's first token is the inverse-CDF draw, in id order, of ``frac(u0 + r * step)`` for one
``u0`` -- the set of ``u0`` consistent with all 200 rows of a call is non-empty (an exact interval computation);
for independent rows (the ``ancestral`` decoder) it is empty.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from verifier.decoders import make_decoder
from verifier.decoders.stream_mutants import STREAM_DECODER_REGISTRY, WEYL_STEP, SerialStreamDecoder, SharedStreamDecoder
from verifier.errors import InvalidArgumentError
from verifier.exact import n_token_law, standard_tabular_pairs, target_law
from verifier.models import TabularCausalLM
from verifier.sampling import SamplingConfig
from verifier.stats import gof_test, min_detectable_effect

T1 = SamplingConfig(temperature=1.0)
CALLS, ROWS, ALPHA = 1000, 6, 1e-3


@pytest.fixture(scope="module")
def bigram():
    pair = standard_tabular_pairs()["bigram4_eos"]
    return pair, TabularCausalLM(pair.target)


def _codes(rows: np.ndarray, outcomes: list[tuple[int, ...]]) -> np.ndarray:
    index = {o: i for i, o in enumerate(outcomes)}
    return np.array([index[tuple(int(t) for t in r)] for r in rows])  # padded with -1 after EOS, as the law's keys


def test_per_row_law_is_the_canonical_law(bigram):
    pair, target = bigram
    law = target_law(pair.target, pair.prefix, 3)
    assert n_token_law(pair.target, pair.draft, pair.prefix, 2, 3, "canonical") == law  # the exact enumerator
    outcomes = sorted(law)
    probs = np.array([float(law[o]) for o in outcomes])
    assert sum(law.values()) == Fraction(1)
    mde = min_detectable_effect(CALLS, probs, alpha=ALPHA / 6, power=0.99).tv
    assert mde < 0.14, mde
    for name in ("shared_stream", "serial_stream"):
        dec = make_decoder(name, target, target, 2)
        calls = np.stack([dec.generate(list(pair.prefix), ROWS, 3, T1, seed) for seed in range(CALLS)])  # (calls, rows, 3)
        for r in (0, 1, 5):
            counts = np.bincount(_codes(calls[:, r], outcomes), minlength=len(outcomes))
            res = gof_test(counts, probs, alpha=ALPHA / 6, rng=np.random.default_rng(0))
            assert res.pvalue > ALPHA / 6, (name, r, res.pvalue, res.effect)


def test_shared_stream_repeats_each_pair_and_group_size_widens_it(bigram):
    pair, target = bigram
    rows = make_decoder("shared_stream", target, target, 2).generate(list(pair.prefix), 200, 3, T1, 7)
    assert (rows[0::2] == rows[1::2]).all()
    assert len({tuple(r) for r in rows[0::2].tolist()}) > 5  # the pairs differ from each other
    whole = make_decoder("shared_stream", target, target, 2, group_size=0).generate(list(pair.prefix), 50, 3, T1, 7)
    assert (whole == whole[0]).all()


def _consistent_u0(first: np.ndarray, p: np.ndarray, step: float) -> float:
    """Measure of the u0 in [0, 1) with inverse-CDF(frac(u0 + r * step)) == first[r] for every row r (id order):
    intervals on the circle, intersected exactly."""
    cdf = np.concatenate([[0.0], np.cumsum(p)])
    alive = [(0.0, 1.0)]
    for r, x in enumerate(first):
        lo, hi = (cdf[x] - r * step) % 1.0, (cdf[x + 1] - r * step) % 1.0
        allowed = [(lo, hi)] if lo < hi else [(lo, 1.0), (0.0, hi)]
        alive = [(max(a, c), min(b, d)) for a, b in alive for c, d in allowed if max(a, c) < min(b, d)]
    return sum(b - a for a, b in alive)


def test_serial_stream_rows_are_one_shifted_stream(bigram):
    pair, target = bigram
    p = pair.target.float_table()[pair.prefix[-1]]
    rows = make_decoder("serial_stream", target, target, 2).generate(list(pair.prefix), 200, 3, T1, 11)
    assert _consistent_u0(rows[:, 0], p, WEYL_STEP) > 0
    independent = make_decoder("ancestral", target, target, 2).generate(list(pair.prefix), 200, 3, T1, 11)
    assert _consistent_u0(independent[:, 0], p, WEYL_STEP) == 0
    assert not (rows[0::2] == rows[1::2]).all(axis=1).any()  # no pair repeats its first 3 tokens here


def test_registry_and_arguments(bigram):
    _, target = bigram
    assert set(STREAM_DECODER_REGISTRY) == {"shared_stream", "serial_stream"}
    assert all(s.declared == "biased" and s.visible_when for s in STREAM_DECODER_REGISTRY.values())
    assert isinstance(make_decoder("serial_stream", target, target, 3), SerialStreamDecoder)
    assert make_decoder("shared_stream", target, target, 3).name == "shared_stream"
    with pytest.raises(InvalidArgumentError, match="group_size"):
        SharedStreamDecoder(target, group_size=1)
    with pytest.raises(InvalidArgumentError, match="step"):
        SerialStreamDecoder(target, step=1.5)
    with pytest.raises(InvalidArgumentError, match="shared_stream"):
        make_decoder("no_such_decoder", target, target, 2)
