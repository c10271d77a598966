"""The latent mechanisms' enumerated laws against the registered decoders themselves (trigram3, k = 2, 3 tokens).

Chi-square goodness of fit of the decoder's rows to the enumerated law, alpha = 1e-3 per check, fixed
seeds; n = 30000 detects a total-variation error of about 0.03 spread over the 27 outcomes (power > 0.99).
The laws must also differ from the target's (the mechanisms are visible on this pair).
"""

import numpy as np
import pytest
from scipy import stats

from verifier.decoders.mutants import make_decoder
from verifier.diagnose.inputs import all_sequences, sequence_probs
from verifier.diagnose.latent import _Probs, _given_counts, latent_law
from verifier.diagnose.mechanisms import MECHANISMS
from verifier.diagnose.likelihood import log_likelihood
from verifier.diagnose.rank import rank_mechanisms

from tests.diagnose._helpers import CI_K, CI_TOKENS, PROMPT, T07K2, T1, trigram3, wrapped

pytestmark = [pytest.mark.slow, pytest.mark.full]
ALPHA, N = 1e-3, 30_000


def _chi2_pvalue(rows: np.ndarray, law: dict) -> float:
    outcomes = sorted(law)
    index = {o: i for i, o in enumerate(outcomes)}
    assert all(tuple(r) in index for r in rows.tolist()), "a row the law gives probability 0"
    counts = np.bincount([index[tuple(r)] for r in rows.tolist()], minlength=len(outcomes))
    expected = np.array([law[o] for o in outcomes]) * len(rows)
    keep = expected > 0
    return float(stats.chisquare(counts[keep], expected[keep] * counts.sum() / expected[keep].sum()).pvalue)


def _seqs(cfg):
    _, tr, dr = trigram3()
    return sequence_probs(tr, dr, PROMPT, all_sequences(3, CI_TOKENS, None), cfg)


@pytest.mark.parametrize("cfg", [T1, T07K2], ids=["t1", "t07k2"])
def test_stale_kv_law_is_the_decoders(cfg):
    target, draft = wrapped()
    rows = make_decoder("kv_not_rolled_back", target, draft, CI_K).generate(PROMPT, N, CI_TOKENS, cfg, seed=1510)
    seqs = _seqs(cfg)
    law = latent_law("kv_not_rolled_back", seqs, CI_K)
    assert abs(sum(law.values()) - 1) < 1e-12
    assert _chi2_pvalue(rows, law) > ALPHA
    target_law = np.exp(log_likelihood(MECHANISMS["canonical"], seqs, CI_K))
    mine = np.array([law.get(tuple(o), 0.0) for o in seqs.tokens.tolist()])
    assert np.abs(mine - target_law).sum() / 2 > 0.02  # visible: total variation from the target's law


@pytest.mark.parametrize("cfg", [T1, T07K2], ids=["t1", "t07k2"])
def test_cross_talk_law_given_row0_counts_is_the_decoders(cfg):
    """One generate call: row 0's accepted counts (DecoderStats, every row reports them) fix the law of rows 1..n-1."""
    target, draft = wrapped()
    dec = make_decoder("batch_cross_talk", target, draft, CI_K)
    rows = dec.generate(PROMPT, N, CI_TOKENS, cfg, seed=1511)
    counts = dec.last_stats.accepted_counts
    row0 = tuple(int(c) for c in counts[::N])  # rounds run in lockstep: each round's block starts with row 0
    assert (counts.reshape(len(row0), N) == np.array(row0)[:, None]).all()
    seqs = _seqs(cfg)
    law = _given_counts(_Probs(seqs.target_after), _Probs(seqs.draft_after), PROMPT, CI_K, CI_TOKENS, None, row0)
    assert _chi2_pvalue(rows[1:], law) > ALPHA


def test_cross_talk_needs_the_generate_calls():
    """Without each row's generate call the call-level likelihood is not computed (and never named)."""
    target, draft = wrapped()
    rows = make_decoder("batch_cross_talk", target, draft, CI_K).generate(PROMPT, 500, CI_TOKENS, T1, seed=1512)
    _, tr, dr = trigram3()
    seqs = sequence_probs(tr, dr, PROMPT, rows, T1)
    score = {s.name: s for s in rank_mechanisms(seqs, CI_K).scores}["batch_cross_talk"]
    assert score.log_lr is None and "generate call" in score.note
    seqs.calls = (np.zeros(len(rows), dtype=np.int64), np.arange(len(rows)))
    score = {s.name: s for s in rank_mechanisms(seqs, CI_K).scores}["batch_cross_talk"]
    assert score.log_lr is not None and score.log_lr > 7


def test_latent_mechanisms_are_not_computed_at_a_transformer_vocabulary():
    from verifier.diagnose.latent import feasible

    seqs = _seqs(T1)
    seqs.p = np.zeros((1, CI_TOKENS, 384))
    assert "small vocabularies" in feasible(seqs, CI_K)


@pytest.mark.parametrize("rule", ["softmax_residual", "shared_uniform"])
def test_zoo_rule_decoders_have_the_rules_law(rule):
    """The shipped-model fixtures for the rules without a mutant: their rows fit verifier.exact.n_token_law."""
    from verifier.diagnose.zoo_decoders import zoo_rule_decoder
    from verifier.exact import n_token_law

    pair, _, _ = trigram3()
    target, draft = wrapped()
    rows = zoo_rule_decoder(rule, target, draft, CI_K).generate(PROMPT, N, CI_TOKENS, T1, seed=1513)
    law = {o: float(v) for o, v in n_token_law(pair.target, pair.draft, PROMPT, CI_K, CI_TOKENS, rule).items()}
    assert _chi2_pvalue(rows, law) > ALPHA
    canonical = {o: float(v) for o, v in n_token_law(pair.target, pair.draft, PROMPT, CI_K, CI_TOKENS, "canonical").items()}
    assert _chi2_pvalue(rows, canonical) < ALPHA  # and the test can tell them apart


@pytest.mark.parametrize("cfg", [T1, T07K2], ids=["t1", "t07k2"])
def test_cross_talk_call_tables_equal_the_enumeration(cfg):
    """The call-level likelihood's products of teacher-forced probs (any vocabulary) against the enumeration over
    the decoder's choices: row 0's joint law with its round structure sums to 1, and every structure's law of
    another row, mixed over row 0's structure law, is the enumerated marginal (1e-15)."""
    from verifier.diagnose import latent

    seqs = _seqs(cfg)
    first, other, classes = latent._call_tables(seqs, CI_K)
    assert len(classes) == 7 and abs(np.exp(first).sum() - 1) < 1e-12
    np.testing.assert_allclose(np.exp(other).sum(axis=1), 1.0, atol=1e-12)
    law = latent.latent_law("batch_cross_talk", seqs, CI_K)
    enumerated = np.array([law.get(tuple(r), 0.0) for r in seqs.tokens.tolist()])
    np.testing.assert_allclose((np.exp(first).sum(axis=1)[:, None] * np.exp(other)).sum(axis=0), enumerated, atol=1e-15)


@pytest.mark.parametrize("cfg", [T1, T07K2], ids=["t1", "t07k2"])
@pytest.mark.parametrize("k, steps", [(CI_K, CI_TOKENS), (3, 4)])
def test_stale_kv_monte_carlo_estimate_is_unbiased(cfg, k, steps):
    """The Monte Carlo likelihood (used at transformer vocabularies) against the enumerated law, every outcome.

    2000 draws per row, seed 3: each row's mean estimate within 4.5 standard errors of the exact probability
    (Bonferroni over <= 81 rows x 4 cases at ~1e-3 overall, normal approximation); an estimator that drew the
    rejected draft from q instead of max(q - p, 0) is off by 15 (T = 1) and 30 (T = 0.7) standard errors here.
    """
    from verifier.diagnose.latent_mc import kv_stale_log_weights

    _, tr, dr = trigram3()
    seqs = sequence_probs(tr, dr, PROMPT, all_sequences(3, steps, None), cfg)
    law = latent_law("kv_not_rolled_back", seqs, k)
    exact = np.array([law.get(tuple(o), 0.0) for o in seqs.tokens.tolist()])
    w = np.exp(kv_stale_log_weights(seqs, k, draws=2000, seed=3))
    mean, se = w.mean(axis=1), w.std(axis=1, ddof=1) / np.sqrt(w.shape[1])
    assert np.all(np.abs(mean - exact) <= 4.5 * se + 1e-12)
    assert np.all((exact == 0) == (mean == 0))


def test_stale_kv_enumeration_is_bounded_and_falls_back(monkeypatch):
    """The stale-cache path count grows with the rounds, not only with vocab ** J: an audit with 5 tokens hung in
    the enumeration for over 13 min.  Beyond MAX_ROUND_PATHS it says "not computed exactly" (the Monte Carlo
    likelihood takes over) instead of running unbounded."""
    import verifier.diagnose.latent as latent

    monkeypatch.setattr(latent, "MAX_ROUND_PATHS", 500)
    monkeypatch.setattr(latent, "_CACHE", {})
    _, tr, dr = trigram3()
    seqs = sequence_probs(tr, dr, PROMPT, all_sequences(3, 4, None), T1)
    why = latent.feasible(seqs, 3, "kv_not_rolled_back")
    assert why is not None and "not computed exactly" in why and "500 round paths" in why
    mech = MECHANISMS["kv_not_rolled_back"]
    ll = log_likelihood(mech, seqs, 3)  # the Monte Carlo estimate, finite for every row of the law's support
    assert ll.shape == (len(seqs.tokens),)
