"""``recovered_one_late`` on the shipped transformers pair (issue 26): its likelihood computed, equal to the dense path.

:func:`verifier.diagnose.late.late_columns` reads the rows after each latent rejected draft token d only at the
emitted token and only for the d a hypothesis weighs, memoised for the 14 hypotheses with a late recovered token; the
dense reference :func:`verifier.diagnose.late.next_rows` materialises (rows, vocab, vocab) from whole contexts.  On a
Hugging Face model the columns come from a KV cache (issue 27: each distinct prefix once, each d a one-token step,
``ReferenceModel.extend_probs``), so they equal the dense rows to the float32 rounding of the model's logits, not bit
for bit.  Tolerances (measured on the shipped pair, n = 30-60 rows at T = 1, T = 0.7 + top-k 20 and with penalties,
reports/benchmarks.md section 29): the bonus column ``p(x_t | x_<t, d)`` moved by <= 1.8e-5 relative, so rtol 1e-4;
the residual column by <= 3.7e-6 absolute (a residual close to 0 is a difference of two close probs, so relative
errors there are large), so atol 1e-4; each late hypothesis's per-row log-likelihood by <= 5.3e-5 nats, so 1e-3
nats.  A wrong prefix, a latent token in the wrong slot, a skipped d of nonzero weight or a stale memo entry moves
columns by 1e-2 and more (the test checks that its tolerance sees a latent token one slot off).  None of this can
move a decision: a row set's log LR moves by at most n x 1e-3 nats (measured: <= 2.3e-4 nats on the ci suite's 939
rows), against a naming threshold of log(154 / 0.01) = 9.64 nats and a separation of log(2 x 154 / 0.01) = 10.3.
The predictive law (:func:`~verifier.diagnose.late.late_laws`) must sum to 1 and equal the conditional probability
of each emitted token.

Statistical checks (shipped pair, prompt "def ", k = 2, 3 tokens, T = 1): 60 rows of the ``recovered_one_late``
mutant (seed 1711) give it a log LR over the target far above the family's naming threshold log(154 / 0.01) = 9.64
nats and the best score among its neighbours (600 rows gave 3,243 nats, reports/benchmarks.md section 26: ~5 nats a
row); 60 rows of the reference decoder (seed 1712) give it a negative log LR (600 rows: -412): a correct decoder is
named with probability <= 0.01 by the ranking's Ville bound.  The whole diagnosis (154 hypotheses and the fit check,
300 rows each) is in the full tier.
"""

import numpy as np
import pytest

from verifier.decoders import make_decoder
from verifier.diagnose.family import family_size, hypothesis
from verifier.diagnose.inputs import sequence_probs
from verifier.diagnose.late import late_columns, late_recover_cost, next_rows
from verifier.diagnose.likelihood import log_likelihood
from verifier.diagnose.rank import MAX_LATE_POSITIONS, rank_mechanisms, threshold_for
from verifier.diagnose.rows import sequence_ends
from verifier.models import load_model, shipped_checkpoint
from verifier.runner.models import ReferenceModel
from verifier.sampling import SamplingConfig

PROMPT = (272, 70, 221)  # "def " in the shipped tokenizer
K, TOKENS, N = 2, 3, 60
NEIGHBOURS = ["canonical", "full_p_fallback", "recovered_one_late", "recovered_one_late@prefill"]


@pytest.fixture(scope="module")
def shipped():
    import torch

    torch.set_num_threads(1)
    target, draft = load_model(shipped_checkpoint("target")), load_model(shipped_checkpoint("draft"))
    vocab, eos = target.config.vocab_size, target.config.eos_token_id
    return target, draft, ReferenceModel(target, vocab, eos, "target"), ReferenceModel(draft, vocab, eos, "draft")


def _seqs(shipped, decoder: str, seed: int, n: int = N, sampling=SamplingConfig()):
    target, draft, tr, dr = shipped
    rows = make_decoder(decoder, target, draft, K).generate(PROMPT, n, TOKENS, sampling, seed)
    uniq, counts = np.unique(rows, axis=0, return_counts=True)
    sp = sequence_probs(tr, dr, PROMPT, uniq, sampling)
    sp.weights = counts.astype(np.float64)
    return sp


BONUS_RTOL = 1e-4  # float32 logits: p(x_t | x_<t, d) moves by <= 1.8e-5 relative between a KV cache and a full pass
RESIDUAL_ATOL = 1e-4  # the residual column moves by <= 3.7e-6 absolute (relative: large where it is nearly 0)
ROW_LL_ATOL = 1e-3  # nats per row (measured <= 5.3e-5)
LATE = ("recovered_one_late", "recovered_one_late@prefill", "synthetic_acceptance+recovered_one_late",
        "bonus_wrong_position+recovered_one_late")


def _close(got, want, live):
    bonus, residual = got
    want_bonus, want_residual = want
    return (np.allclose(bonus[live], want_bonus[live], rtol=BONUS_RTOL, atol=0)
            and np.allclose(residual[live], want_residual[live], rtol=0, atol=RESIDUAL_ATOL))


@pytest.mark.parametrize("sampling", [SamplingConfig(), pytest.param(SamplingConfig(
    temperature=1.0, repetition_penalty=1.5, presence_penalty=0.5, frequency_penalty=0.5), marks=pytest.mark.full)],
    ids=["t1", "penalties"])
def test_columns_are_the_dense_rows_at_the_emitted_token(shipped, sampling):
    sp = _seqs(shipped, "reference", 1713, n=8, sampling=sampling)
    assert sp.target_after.extend is not None and sp.draft_after.extend is not None  # the KV-cache route is tested
    ends = sequence_ends(sp.tokens, sp.eos_token_id)
    rng = np.random.default_rng(0)
    vocab = sp.p.shape[2]
    for t in range(TOKENS):
        live = ends > t
        dense_bonus, dense_residual = next_rows(sp, t, live)
        x = np.where(sp.tokens[:, t] < 0, 0, sp.tokens[:, t])
        want = (np.take_along_axis(dense_bonus, x[:, None, None], axis=2)[..., 0],
                np.take_along_axis(dense_residual, x[:, None, None], axis=2)[..., 0])
        # the tolerance sees a latent token one slot off (a wrong d, prefix or memo moves the columns at least as far)
        assert not _close([np.roll(w, 1, axis=1) for w in want], want, live)
        # a sparse need first (a few d per row, as a hypothesis with a one-hot draft), then every d: the memo grows
        sparse = (rng.random((len(live), vocab)) < 0.02) & live[:, None]
        bonus, residual = late_columns(sp, t, sparse, np.zeros_like(sparse))
        assert np.allclose(bonus[sparse], want[0][sparse], rtol=BONUS_RTOL, atol=0) and not residual.any()
        full = np.broadcast_to(live[:, None], sparse.shape)
        bonus, residual = late_columns(sp, t, full, full)
        assert _close((bonus, residual), want, live)
        assert not bonus[~live].any() and not residual[~live].any()


def test_likelihoods_from_the_kv_cache_are_the_dense_ones(shipped):
    """Each late hypothesis's per-row log-likelihood, KV-cache columns against whole contexts (oracles without
    ``extend``): the same rows impossible, the others within :data:`ROW_LL_ATOL` nats."""
    fast = _seqs(shipped, "recovered_one_late", 1714, n=12)
    dense = _seqs(shipped, "recovered_one_late", 1714, n=12)
    dense.target_after.extend = dense.draft_after.extend = None
    for name in LATE:
        got, want = log_likelihood(hypothesis(name), fast, K), log_likelihood(hypothesis(name), dense, K)
        finite = np.isfinite(want)
        assert np.array_equal(finite, np.isfinite(got)) and finite.any(), name
        np.testing.assert_allclose(got[finite], want[finite], rtol=0, atol=ROW_LL_ATOL, err_msg=name)


def test_predictive_law_sums_to_one_and_gives_the_conditional_probs(shipped):
    sp = _seqs(shipped, "recovered_one_late", 1714, n=8)
    ends = sequence_ends(sp.tokens, sp.eos_token_id)
    live = np.arange(TOKENS)[None] < ends[:, None]
    for name in ("recovered_one_late", "shared_uniform+recovered_one_late"):
        pred = np.full(sp.p.shape, np.nan)
        _, cond = log_likelihood(hypothesis(name), sp, K, per_position=True, predictive=pred)
        np.testing.assert_allclose(pred.sum(axis=2)[live], 1.0, rtol=0, atol=1e-12)
        at_x = np.take_along_axis(pred, np.where(sp.tokens < 0, 0, sp.tokens)[..., None], axis=2)[..., 0]
        np.testing.assert_allclose(np.log(at_x[live]), cond[live], rtol=1e-12, atol=1e-12)


def test_the_mutant_is_named_on_the_shipped_pair_and_the_reference_is_not(shipped):
    late_rows = _seqs(shipped, "recovered_one_late", 1711)
    assert late_recover_cost(late_rows).positions <= MAX_LATE_POSITIONS  # computed, not noted
    threshold = threshold_for(family_size())
    scores = {s.name: s for s in rank_mechanisms(late_rows, K, mechanisms=NEIGHBOURS, per_position=False).scores}
    assert not scores["recovered_one_late"].note
    assert scores["recovered_one_late"].log_lr >= threshold, scores["recovered_one_late"]
    assert max(scores.values(), key=lambda s: s.log_lr).name == "recovered_one_late", scores
    ref = {s.name: s for s in rank_mechanisms(_seqs(shipped, "reference", 1712), K, mechanisms=NEIGHBOURS,
                                              per_position=False).scores}
    assert all(ref[name].log_lr < 0 for name in NEIGHBOURS if "recovered_one_late" in name), ref


@pytest.mark.full
def test_whole_diagnosis_names_the_mutant_on_the_shipped_pair(shipped):
    """The whole family (154 hypotheses) and the fit check on 300 mutant rows: named, alone; the reference's not."""
    from verifier.diagnose.sample_set import diagnose_sample_set

    target, draft, tr, dr = shipped
    for decoder, seed, named in (("recovered_one_late", 1715, True), ("reference", 1716, False)):
        rows = make_decoder(decoder, target, draft, K).generate(PROMPT, 300, TOKENS, SamplingConfig(), seed)
        d = diagnose_sample_set(tr, dr, PROMPT, SamplingConfig(), K, rows, bias_detected=named)["decision"]
        if named:
            assert d["status"] == "consistent" and d["best"] == ["recovered_one_late"], d["sentence"]
        else:
            late_left_out = [n for n in d.get("not_computed") or [] if "recovered_one_late" in n]
            assert d["status"] != "consistent" and not late_left_out, d["sentence"]
