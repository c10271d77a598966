"""Reported logprobs (``generate(..., return_logprobs=True)``) and the logprob zoo (issue 29, bug kind 4).

Reference.  ``SpeculativeDecoder`` reports, for every emitted token, the natural log of its processed target prob given
the prompt and the row's earlier tokens; the teacher-forced scorer (``verifier.decoders.scorer.TargetScorer``)
computes the same value from the prefixes, so on tabular models (float64) they agree to 1e-9 at every token, under
T = 1 and under top-k + repetition penalty (the context-mask path), and the tokens are the ones drawn without
``return_logprobs`` (same seed).

Mutants.  ``logprobs_zero`` / ``logprobs_first_only`` / ``logprobs_draft_row`` draw the reference's tokens (same seed,
same array) and report wrong values.  At each position t, conditional on the number of rows that emit token t, the
number with a wrong value is Binomial(n_t, share_t), share_t the exact Fraction of
``verifier.exact.logprob_defect_law`` (bigram4_eos, k = 3, N = 4, T = 1): 2,000 rows, seed 5, two-sided binomial
test at alpha 1e-3 per position.  With n_t >= 1,000 the test sees a share off by about 0.05 (a mutant reporting
at another set of tokens, e.g. first_only read as "0.0 after the first", moves position 2's share from 0.36 to 1).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from verifier.decoders import SpeculativeDecoder, make_decoder
from verifier.decoders.logprob_mutants import LOGPROB_DECODER_REGISTRY, LOGPROB_DEFECTS
from verifier.decoders.scorer import TargetScorer
from verifier.errors import DecoderOutputError, InvalidArgumentError
from verifier.exact import logprob_defect_law, standard_tabular_pairs, step_law
from verifier.models import TabularCausalLM
from verifier.sampling import SamplingConfig
from verifier.validation import check_reported_logprobs

T1 = SamplingConfig(temperature=1.0)
K, WIDTH, ROWS, ALPHA = 3, 4, 2000, 1e-3


@pytest.fixture(scope="module")
def models():
    pair = standard_tabular_pairs()["bigram4_eos"]
    return pair, TabularCausalLM(pair.target), TabularCausalLM(pair.draft)


def _scored(target, prompt, tokens, sampling) -> np.ndarray:
    """log p of every emitted token from the teacher-forced scorer (-inf where p = 0, NaN at padding)."""
    batch = next(TargetScorer(target, batch_size=len(tokens)).score(prompt, tokens, sampling))
    p = np.take_along_axis(batch.probs, np.clip(tokens, 0, None)[..., None], -1)[..., 0]
    with np.errstate(divide="ignore"):
        return np.where(tokens != -1, np.log(p), np.nan)


@pytest.mark.parametrize("sampling", [T1, SamplingConfig(temperature=0.8, top_k=3, repetition_penalty=1.3)],
                         ids=["T1", "topk-penalty"])
def test_reference_reports_the_scorers_logprob_at_every_token(models, sampling):
    pair, target, draft = models
    dec = SpeculativeDecoder(target, draft, K)
    tokens, lp = dec.generate([0], 500, 6, sampling, 3, return_logprobs=True)
    assert np.array_equal(tokens, dec.generate([0], 500, 6, sampling, 3))  # reporting draws nothing
    ref = _scored(target, [0], tokens, sampling)
    live = tokens != -1
    assert np.isnan(lp[~live]).all()
    assert np.isfinite(lp[live]).all() and np.abs(lp[live] - ref[live]).max() <= 1e-9


def test_a_kernel_mutant_reports_its_own_target_row(models):
    """The general (non-fused) path reads log p off the probs handed to the kernel: right for a kernel mutant too."""
    pair, target, draft = models
    dec = make_decoder("full_p_fallback", target, draft, K)
    tokens, lp = dec.generate([0], 300, 6, T1, 4, return_logprobs=True)
    live = tokens != -1
    assert np.abs(lp[live] - _scored(target, [0], tokens, T1)[live]).max() <= 1e-9


@pytest.mark.parametrize("defect", list(LOGPROB_DEFECTS))
def test_mutant_samples_as_the_reference_and_reports_the_exact_share_of_wrong_values(models, defect):
    pair, target, draft = models
    name = LOGPROB_DEFECTS[defect]
    tokens, lp = make_decoder(name, target, draft, K).generate([0], ROWS, WIDTH, T1, 5, return_logprobs=True)
    assert np.array_equal(tokens, SpeculativeDecoder(target, draft, K).generate([0], ROWS, WIDTH, T1, 5))
    live = tokens != -1
    wrong = live & ~(np.abs(lp - _scored(target, [0], tokens, T1)) <= 1e-9)
    law = logprob_defect_law(pair.target, pair.draft, pair.prefix, K, WIDTH, defect)
    for t in range(1, WIDTH + 1):
        n, w, share = int(live[:, t - 1].sum()), int(wrong[:, t - 1].sum()), law.share(t)
        if share in (0, 1):  # deterministic at this position: every emitted token right, or every one wrong
            assert w == n * share, (defect, t, w, n, share)
            continue
        p = stats.binomtest(w, n, float(share)).pvalue
        assert p > ALPHA, f"{name} position {t}: {w}/{n} wrong, exact share {share} = {float(share):.4f} (p={p:.2g})"


def test_first_only_is_right_at_each_rounds_first_token_and_draft_row_at_recovered_and_bonus(models):
    pair, target, draft = models
    for name, ok_origin in (("logprobs_first_only", None), ("logprobs_draft_row", (1, 2))):
        dec = make_decoder(name, target, draft, K)
        tokens, lp = dec.generate([0], 400, 6, T1, 9, return_logprobs=True)
        origins = dec.last_stats.origins
        right = np.abs(lp - _scored(target, [0], tokens, T1)) <= 1e-9
        if ok_origin is None:  # a round starts at column 0 and after each recovered or bonus token
            starts = np.zeros_like(right)
            starts[:, 0] = True
            starts[:, 1:] = np.isin(origins[:, :-1], (1, 2)) & (tokens[:, 1:] != -1)
            assert right[starts].all()
        else:
            assert right[np.isin(origins, ok_origin)].all()


def test_exact_share_at_the_first_token_is_the_single_step_acceptance():
    """draft_row at position 1 = P(the first token is an accepted draft with q != p) = sum over x with q(x) != p(x)
    of q(x) min(1, p(x)/q(x)), from ``step_law`` (an independent computation)."""
    pair = standard_tabular_pairs()["unigram3"]
    p, q = pair.target.probs(pair.prefix), pair.draft.probs(pair.prefix)
    step = step_law(p, q)
    expected = sum(q[x] * step.acceptance_probs[x] for x in range(len(p)) if q[x] != p[x])
    law = logprob_defect_law(pair.target, pair.draft, pair.prefix, 2, 3, "draft_row")
    assert law.share(1) == expected and 0 < expected < 1
    zero = logprob_defect_law(pair.target, pair.draft, pair.prefix, 2, 3, "zero")
    assert zero.row_wrong == 1 and zero.emitted == law.emitted


def test_bad_defect_and_bad_logprobs_are_named():
    pair = standard_tabular_pairs()["unigram3"]
    with pytest.raises(InvalidArgumentError, match="defect"):
        logprob_defect_law(pair.target, pair.draft, pair.prefix, 2, 3, "zeros")
    tokens = np.array([[1, 3, -1], [0, 0, 0]])
    ok = check_reported_logprobs(np.array([[-0.5, -np.inf, 7.0], [0.0, -1.0, -2.0]]), tokens, decoder_name="d")
    assert np.isnan(ok[0, 2]) and ok[0, 1] == -np.inf  # padding ignored (NaN), -inf = probability 0 allowed
    for bad, what in ((np.zeros((2, 2)), "shape"), (np.array([[np.nan, 0, 0], [0, 0, 0.0]]), "row 0, position 0"),
                      (np.array([[0, 0, 0], [0, 0.5, 0.0]]), "row 1, position 1"),
                      (np.array([[0, 0, 0], [np.inf, 0, 0.0]]), "row 1, position 0"), (["a"], "logprobs of")):
        with pytest.raises(DecoderOutputError, match=what):
            check_reported_logprobs(bad, tokens, decoder_name="d")



def test_half_precision_torch_logprobs_are_read_not_refused():
    """Review 2026-12-03: a bfloat16 torch tensor of logprobs (an engine serving in bf16) was exit 3 "cannot be copied
    to a numpy array (unsupported ScalarType BFloat16)" while the message allowed "a float torch.Tensor"; its values
    are now read exactly (bf16 -> float64 is exact) and judged like any other."""
    import torch

    tokens = np.array([[1, 3, -1], [0, 0, 0]])
    values = torch.tensor([[-0.5, -np.inf, 7.0], [0.0, -1.0, -2.0]])
    for dtype in (torch.bfloat16, torch.float16, torch.float32, torch.float64):
        got = check_reported_logprobs(values.to(dtype), tokens, decoder_name="d")
        assert got.dtype == np.float64 and got[0, 1] == -np.inf and got[1, 2] == -2.0 and np.isnan(got[0, 2])
    with pytest.raises(DecoderOutputError, match="row 0, position 0"):
        check_reported_logprobs(torch.full((2, 3), 0.5, dtype=torch.bfloat16), tokens, decoder_name="d")
    with pytest.raises(DecoderOutputError, match="logprobs of dtype=bool"):
        check_reported_logprobs(torch.ones((2, 3), dtype=torch.bool), tokens, decoder_name="d")
    with pytest.raises(DecoderOutputError, match="meta"):
        check_reported_logprobs(torch.empty((2, 3), device="meta"), tokens, decoder_name="d")

def test_registry_names_are_found_by_make_decoder(models):
    pair, target, draft = models
    assert set(LOGPROB_DECODER_REGISTRY) == set(LOGPROB_DEFECTS.values())
    for name in LOGPROB_DECODER_REGISTRY:
        assert make_decoder(name, target, draft, 2).name == name


@pytest.mark.full  # loads the shipped transformers (~10 s)
def test_shipped_float32_models_stay_inside_the_float32_tolerance_and_draft_row_does_not():
    """Reference decoder vs the runner's teacher-forced reference on the shipped tiny transformers (float32, KV cache
    vs one pass): measured max |difference| 6.5e-6 (T = 1) and 1.1e-5 (T = 0.7 top-k 8) over ~2,775 tokens, inside
    LOGPROB_TOL["float32"] = 1e-4; the draft_row mutant's values are off by far more at accepted drafts."""
    from verifier.models.loading import load_model, shipped_checkpoint
    from verifier.runner.logprob import logprob_tolerance, reference_logprobs, wrong_tokens
    from verifier.runner.models import ReferenceModel

    target, draft = load_model(str(shipped_checkpoint("target"))), load_model(str(shipped_checkpoint("draft")))
    ref = ReferenceModel(target, 384, 0)
    tol = logprob_tolerance(target)
    assert tol == 1e-4
    for name in ("reference", "logprobs_draft_row"):
        tokens, lp = make_decoder(name, target, draft, 3, eos_token_id=0).generate([1, 5, 7], 200, 16, T1, 3,
                                                                                     return_logprobs=True)
        wrong = wrong_tokens(tokens, lp, reference_logprobs(ref, (1, 5, 7), tokens, T1), tol)
        assert (wrong.sum() == 0) == (name == "reference"), (name, int(wrong.sum()))
