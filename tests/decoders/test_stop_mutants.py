"""The request's stop rule in the decoders and the stop-rule zoo (``verifier.decoders.stop_mutants``; issue 29, kind 5).

Reference.  ``SpeculativeDecoder.generate(..., stop_token_ids=, max_tokens=)`` cuts every row at its first stop token
or EOS and after ``max_tokens`` tokens, inside a round's block.  On bigram4_eos (prompt (0,), T = 1, stop token 2,
EOS 3, max_tokens 6, k = 3), 4,000 rows (seed 7): no row breaks the stop rule, and the stopping position's counts fit
its exact law (``verifier.exact.stop_position_law``, 7 categories) by a chi-square at alpha 1e-3 -- n = 4,000 sees a
TV of 0.05 with power 0.99 (``min_detectable_effect``, printed by the assertion).

Violation rate.  The exact per-row probability of breaking the stop rule (``verifier.exact.stop_violation_prob``:
0.29203 for ``stop_mid_block``, 0.010148 for ``max_tokens_overshoot`` at this setting, 0 for the per-token check) is
the rate of violating rows of the real decoders: 4,000 rows (seed 13), two-sided binomial test at alpha 1e-3.

Mutants.  Both draw exactly the reference's tokens (same kernel, same random stream, rows finish in the same rounds),
so for the same seed their rows cut at the stop rule *are* the reference's rows; past the cut, ``stop_mid_block``
keeps the rest of a block after an accepted stop token and ``max_tokens_overshoot`` the tail of the block that
crosses the limit.  Without a stop rule both are the reference, token for token.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from verifier.decoders import SpeculativeDecoder, make_decoder
from verifier.decoders.stop_mutants import STOP_DECODER_REGISTRY
from verifier.errors import InvalidArgumentError
from verifier.exact import standard_tabular_pairs, stop_position_law, stop_violation_prob
from verifier.models import TabularCausalLM
from verifier.runner.stop import stop_positions, stop_violations
from verifier.sampling import SamplingConfig
from verifier.stats import gof_test, min_detectable_effect

T1 = SamplingConfig(temperature=1.0)
STOP, EOS, LIMIT, WIDTH, K = [2], 3, 6, 8, 3
ENDS = np.array([2, 3])


@pytest.fixture(scope="module")
def models():
    pair = standard_tabular_pairs()["bigram4_eos"]
    return pair, TabularCausalLM(pair.target), TabularCausalLM(pair.draft)


def _cut(rows: np.ndarray) -> np.ndarray:
    """Rows cut as the stop rule says (everything after the first stop/EOS and past LIMIT becomes -1)."""
    out = rows.copy()
    for r in out:
        hit = np.isin(r[:LIMIT], ENDS)
        end = int(np.argmax(hit)) + 1 if hit.any() else LIMIT
        r[end:] = -1
    return out


def test_reference_keeps_the_stop_rule_and_the_exact_stopping_law(models):
    pair, target, draft = models
    dec = SpeculativeDecoder(target, draft, K)
    rows = dec.generate([0], 4000, WIDTH, T1, 7, stop_token_ids=STOP, max_tokens=LIMIT)
    bad, first = stop_violations(rows, ENDS, LIMIT)
    assert not bad.any(), first
    assert (rows[:, LIMIT:] == -1).all()
    law = np.array([float(f) for f in stop_position_law(pair.target, (0,), LIMIT, STOP)])
    counts = np.bincount(stop_positions(rows, ENDS, LIMIT), minlength=LIMIT + 1)
    res = gof_test(counts, law, alpha=1e-3)
    mde = min_detectable_effect(4000, law, alpha=1e-3, power=0.99)
    assert res.pvalue > 1e-3 and mde.tv < 0.06, (res.pvalue, mde.tv)


def test_ancestral_decoder_takes_the_same_stop_rule(models):
    _, target, _ = models
    rows = make_decoder("ancestral", target, target).generate([0], 500, WIDTH, T1, 3, stop_token_ids=STOP,
                                                              max_tokens=LIMIT)
    assert not stop_violations(rows, ENDS, LIMIT)[0].any() and (rows[:, LIMIT:] == -1).all()


@pytest.mark.parametrize("name", sorted(STOP_DECODER_REGISTRY))
def test_mutant_rows_cut_at_the_stop_rule_are_the_reference_rows(models, name):
    _, target, draft = models
    ref = SpeculativeDecoder(target, draft, K).generate([0], 2000, WIDTH, T1, 11, stop_token_ids=STOP, max_tokens=LIMIT)
    mut = make_decoder(name, target, draft, K).generate([0], 2000, WIDTH, T1, 11, stop_token_ids=STOP, max_tokens=LIMIT)
    np.testing.assert_array_equal(_cut(mut), ref)
    bad, first = stop_violations(mut, ENDS, LIMIT)
    assert bad.sum() > 0, name  # 2,000 rows: both defects show (246 / 800 and 7 / 800 in tests/runner/suites/stop.toml)
    kind = "after stop token" if name == "stop_mid_block" else "past max_tokens"
    assert kind in first
    if name == "stop_mid_block":
        assert (mut[:, LIMIT:] == -1).all()  # it keeps the limit
    else:
        is_end = np.isin(mut, ENDS)
        assert not ((np.cumsum(is_end, axis=1) - is_end > 0) & (mut != -1)).any()  # it keeps the stop tokens


@pytest.mark.parametrize("name", sorted(STOP_DECODER_REGISTRY))
def test_mutants_without_a_stop_rule_are_the_reference(models, name):
    _, target, draft = models
    ref = SpeculativeDecoder(target, draft, K).generate([0], 300, WIDTH, T1, 5)
    np.testing.assert_array_equal(make_decoder(name, target, draft, K).generate([0], 300, WIDTH, T1, 5), ref)


@pytest.mark.parametrize("kwargs, fragment", [
    ({"stop_token_ids": [4]}, "stop_token_ids"),
    ({"stop_token_ids": [2, 2]}, "at most once"),
    ({"stop_token_ids": "2"}, "stop_token_ids"),
    ({"stop_token_ids": [-1]}, "stop_token_ids"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_tokens": WIDTH + 1}, "max_tokens"),
    ({"max_tokens": 2.5}, "max_tokens"),
])
def test_bad_stop_rule_is_a_clear_error(models, kwargs, fragment):
    _, target, draft = models
    with pytest.raises(InvalidArgumentError, match=fragment):
        SpeculativeDecoder(target, draft, K).generate([0], 4, WIDTH, T1, 0, **kwargs)


@pytest.mark.parametrize("name, check", [("stop_mid_block", "round_stops"), ("max_tokens_overshoot", "round_limit"),
                                         ("reference", "token")])
def test_violation_rate_is_the_exact_violation_probability(models, name, check):
    pair, target, draft = models
    exact = stop_violation_prob(pair.target, pair.draft, (0,), K, LIMIT, WIDTH, STOP, check=check)
    rows = make_decoder(name, target, draft, K).generate([0], 4000, WIDTH, T1, 13, stop_token_ids=STOP, max_tokens=LIMIT)
    k = int(stop_violations(rows, ENDS, LIMIT)[0].sum())
    if exact == 0:
        assert k == 0
        return
    assert stats.binomtest(k, 4000, float(exact)).pvalue > 1e-3, (k, float(exact))
