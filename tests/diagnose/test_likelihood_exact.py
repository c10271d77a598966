"""The per-sequence likelihood of every mechanism against the exact enumerator.

Expected values: ``verifier.exact.n_token_law(target, draft, prefix, k, N, rule)`` (Fractions) for every
rule of the zoo; the decoder-level mechanisms at T = 1 are the canonical rule (their defect needs
processing), except q_dtype_mismatch (``verifier.exact.vocab_n_token_law`` with the identity map).  Under every mechanism the probabilities of all N-token outcomes sum to 1.
"""

import numpy as np
import pytest

from verifier.diagnose.inputs import all_sequences, mechanism_law, sequence_probs
from verifier.diagnose.likelihood import log_likelihood, target_log_likelihood
from verifier.diagnose.mechanisms import MECHANISMS, mechanism_for_decoder
from verifier.exact import map_draft, n_token_law, standard_tabular_pairs, vocab_n_token_law
from verifier.runner.models import ReferenceModel
from verifier.sampling import SamplingConfig

PAIRS = standard_tabular_pairs()


def _refs(pair):
    t, d = pair.target, pair.draft
    return ReferenceModel(t, t.vocab_size, t.eos_token_id), ReferenceModel(d, d.vocab_size, d.eos_token_id)


@pytest.mark.parametrize("pair_name,k,num_tokens", [  # k = 3 on bigram4_eos (22 s) runs in the full tier
    pytest.param(p, k, n, id=f"{k}-{n}-{p}", marks=[pytest.mark.full] if (p, k) == ("bigram4_eos", 3) else [])
    for k, n in [(1, 2), (2, 3), (3, 3)] for p in sorted(PAIRS)])
def test_every_mechanism_equals_the_exact_law(pair_name, k, num_tokens):
    pair = PAIRS[pair_name]
    tr, dr = _refs(pair)
    seqs = all_sequences(pair.target.vocab_size, num_tokens, pair.target.eos_token_id)
    sp = sequence_probs(tr, dr, pair.prefix, seqs, SamplingConfig())
    for name, mech in MECHANISMS.items():
        if mech.latent:  # enumerated over the decoder's latent state (tests/diagnose/test_latent.py): a proper law;
            if not pair.prefix:  # a decoder needs a prompt token
                continue
            got = np.exp(log_likelihood(mech, sp, k))  # a stale cache is invisible to one-token-context pairs
            assert abs(got.sum() - 1) < 1e-12, name
            if name == "kv_not_rolled_back" and pair.target.context_len == pair.draft.context_len == 1:
                law = n_token_law(pair.target, pair.draft, pair.prefix, k, num_tokens, "canonical")
                expected = np.array([float(law.get(tuple(int(v) for v in s), 0)) for s in seqs])
                np.testing.assert_allclose(got, expected, atol=1e-13, err_msg=f"{name} on {pair_name}, k={k}")
            continue
        rule = name if mech.kind == "rule" else "canonical"
        law = n_token_law(pair.target, pair.draft, pair.prefix, k, num_tokens, rule)
        if name == "q_dtype_mismatch":  # moves q at T = 1 too: the exact law of a same-vocabulary draft (identity map)
            identity = map_draft(pair.draft, range(pair.target.vocab_size))
            law = vocab_n_token_law(pair.target, identity, pair.prefix, k, num_tokens, name)
        expected = np.array([float(law.get(tuple(int(v) for v in s), 0)) for s in seqs])
        got = np.exp(log_likelihood(mech, sp, k))
        assert abs(got.sum() - 1) < 1e-12, name
        np.testing.assert_allclose(got, expected, atol=1e-13, err_msg=f"{name} on {pair_name}, k={k}, N={num_tokens}")


def test_canonical_is_the_targets_product_and_predictive_is_p():
    pair = PAIRS["trigram3"]
    tr, dr = _refs(pair)
    seqs = all_sequences(3, 3, None)
    sp = sequence_probs(tr, dr, pair.prefix, seqs, SamplingConfig(temperature=0.7, top_k=2))
    pred = np.full(sp.p.shape, np.nan)
    ll = log_likelihood(MECHANISMS["canonical"], sp, 2, predictive=pred)
    np.testing.assert_allclose(ll, target_log_likelihood(sp), atol=1e-12)
    possible = np.isfinite(ll)  # rows the target can emit (top_k = 2 excludes a token per context)
    assert 0 < possible.sum() < len(possible)
    np.testing.assert_allclose(pred[possible], sp.p[possible], atol=1e-12)


@pytest.mark.parametrize("name", ["draft_raw_q", "target_unprocessed", "full_p_fallback", "shared_uniform"])
def test_processed_configs_sum_to_one(name):
    """Under processing (T = 0.7, top_k = 2) the decoder-level mechanisms are proper laws; target_unprocessed
    is plain sampling from the unprocessed target."""
    pair = PAIRS["trigram3"]
    tr, dr = _refs(pair)
    cfg = SamplingConfig(temperature=0.7, top_k=2)
    law = mechanism_law(MECHANISMS[name], tr, dr, pair.prefix, cfg, 2, 3)
    assert abs(law.sum() - 1) < 1e-12
    if name == "target_unprocessed":
        seqs = all_sequences(3, 3, None)
        sp = sequence_probs(tr, dr, pair.prefix, seqs, cfg)
        np.testing.assert_allclose(log_likelihood(MECHANISMS[name], sp, 2), target_log_likelihood(sp, "p_raw"), atol=1e-12)


def test_every_mutant_maps_to_a_mechanism_or_is_declared_unmodelled():
    from verifier.decoders.mutants import DECODER_REGISTRY
    from verifier.diagnose.mechanisms import UNMODELLED

    for name in DECODER_REGISTRY:
        assert mechanism_for_decoder(name) is not None or name in UNMODELLED, name


def _float_step_law(mech, p, q):
    from verifier.diagnose.mechanisms import Views

    v = Views(p[None], q[None])
    prop, acc = mech.propose(v), mech.acceptance(v)
    if mech.reject_emit is not None:
        return (prop * acc + mech.reject_emit(v, prop, acc))[0]
    return (prop * acc + (prop * (1 - acc)).sum(axis=1, keepdims=True) * mech.recover(v))[0]


def test_every_rule_mechanism_is_its_exact_step_law_on_rows_with_zeros():
    """One position, (p, q) with zero entries (top-k / top-p keeping different token sets), seed 0, 200 pairs:
    the float64 hooks equal ``verifier.exact.step_law`` (the by-index residual differs from the residual only here)."""
    from fractions import Fraction

    from verifier.exact import RULES, step_law

    rng = np.random.default_rng(0)
    seen_difference = False
    for _ in range(200):
        vocab = int(rng.integers(2, 6))
        raw = rng.integers(0, 4, size=(2, vocab))
        raw[:, rng.integers(vocab)] += 1  # every row keeps a token
        p = [Fraction(int(a), int(raw[0].sum())) for a in raw[0]]
        q = [Fraction(int(a), int(raw[1].sum())) for a in raw[1]]
        for name, mech in MECHANISMS.items():
            if mech.kind != "rule" or mech.latent or mech.same_as_target or RULES[name].round_outcomes is not None:
                continue
            if name in ("canonical",) or RULES[name].bonus_offset or RULES[name].keep_suffix or RULES[name].shared_uniform:
                continue
            if name == "typical_acceptance":  # exact threshold vs float exp: ties at these denominators
                continue
            exact = np.array([float(v) for v in step_law(p, q, name).output_law])
            got = _float_step_law(mech, np.array([float(v) for v in p]), np.array([float(v) for v in q]))
            np.testing.assert_allclose(got, exact, atol=1e-12, err_msg=f"{name}: p={p}, q={q}")
        canon = step_law(p, q, "canonical").output_law
        seen_difference |= step_law(p, q, "residual_by_index").output_law != canon
    assert seen_difference  # the pairs exercise the by-index defect
