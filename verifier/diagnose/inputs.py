"""Teacher-forced inputs of the likelihoods, and a mechanism's law of the first J emitted tokens.

:func:`sequence_probs` runs the target and the draft (:class:`verifier.runner.models.ReferenceModel`)
over the observed emitted rows, processed and unprocessed, in row batches.  :func:`all_sequences`
lists every emitted J-token outcome (-1 after EOS) and :func:`mechanism_law` gives their probabilities
under a mechanism, on the joint-cell categories of :func:`verifier.runner.analysis.joint_counts`.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np

from verifier.diagnose.likelihood import SequenceProbs, log_likelihood
from verifier.diagnose.mechanisms import Mechanism
from verifier.protocols import PADDING_TOKEN_ID
from verifier.sampling import SamplingConfig

__all__ = ["sequence_probs", "all_sequences", "mechanism_law", "joint_codes", "ProbsAfter", "MAX_LAW_OUTCOMES"]

MAX_LAW_OUTCOMES = 20_000  # J-token outcomes a mechanism's law is enumerated over (V = 384: J = 1 only)
UNPROCESSED = SamplingConfig()
_OUTCOME_PROBS: dict = {}  # (models, prompt, sampling, J) -> (outcomes, SequenceProbs) (holds the models while cached)


class ProbsAfter:
    """A model's processed probs after arbitrary contexts: ``SequenceProbs.draft_after`` / ``target_after``.

    Called with contexts (m, L) int64 (prompt included) it returns ``ref.next_probs`` (m, vocab) float64.  ``extend``
    is :meth:`verifier.runner.models.ReferenceModel.extend_probs` for this sampling config where the model can share a
    context's keys and values between its continuations (a Hugging Face causal LM), else None; the
    kept-suffix likelihood uses it to run each shared context once (:func:`verifier.diagnose.likelihood._suffix_terms`).
    """

    def __init__(self, ref, sampling: SamplingConfig, prompt_len: int) -> None:
        self.ref, self.sampling, self.prompt_len = ref, sampling, int(prompt_len)
        self.extend = (lambda bases, tails, parent: ref.extend_probs(bases, tails, parent, sampling, self.prompt_len)) \
            if hasattr(ref, "can_extend") and ref.can_extend(sampling) else None

    def __call__(self, contexts: np.ndarray) -> np.ndarray:
        return self.ref.next_probs(contexts, self.sampling, self.prompt_len)

    def nested(self, contexts: np.ndarray, keep: int) -> np.ndarray:
        """``(contexts (m, L), keep) -> (m, keep, vocab)``: the probs after each context's last ``keep`` prefixes
        from one forward pass (``ref.next_probs(..., keep=keep)``)."""
        return self.ref.next_probs(contexts, self.sampling, self.prompt_len, keep=keep)


def _teacher_forced(ref, prompt, tokens, sampling) -> np.ndarray:
    out = np.zeros(tokens.shape + (ref.vocab_size,))
    for rows, probs in ref.teacher_forced(tuple(prompt), tokens, sampling):
        out[rows] = probs
    return out


def _reprocess(raw: np.ndarray, sampling: SamplingConfig) -> np.ndarray:
    import torch

    from verifier.sampling import processed_probs

    with np.errstate(divide="ignore"):
        logits = torch.from_numpy(np.log(raw))
    return processed_probs(logits, sampling).numpy()


def sequence_probs(target_ref, draft_ref, prompt, tokens: np.ndarray, sampling: SamplingConfig, *,
                   raw: bool = True) -> SequenceProbs:
    """Teacher-forced processed (and, with ``raw``, unprocessed) target and draft probs of emitted rows.

    Parameters
    ----------
    target_ref, draft_ref : verifier.runner.models.ReferenceModel
    prompt : sequence of int
    tokens : np.ndarray, shape (num_samples, max_new_tokens), int64, -1 after EOS
    sampling : SamplingConfig
    raw : bool, default True
        Also compute the ``SamplingConfig()`` views and the temperature-only draft view ``q_temp`` (decoder-level
        mechanisms need them).

    Returns
    -------
    SequenceProbs
        With ``draft_after`` = the draft's processed probs at arbitrary contexts.
    """
    tokens = np.asarray(tokens, dtype=np.int64)
    filtered = sampling.top_k is not None or sampling.top_p is not None or bool(sampling.min_p)
    # the draft's q as reported with temperature (and penalties) only: top-k / top-p / min-p left out
    temperature_only = replace(sampling, top_k=None, top_p=None, min_p=None)
    q_temp = None
    if not sampling.uses_context:
        # one forward pass per model: temperature, top-k and top-p are invariant to the per-row constant
        # between raw logits and log(softmax(raw logits)), so the processed probs come from the raw ones
        p_raw = _teacher_forced(target_ref, prompt, tokens, UNPROCESSED)
        q_raw = _teacher_forced(draft_ref, prompt, tokens, UNPROCESSED)
        p, q = (p_raw, q_raw) if sampling == UNPROCESSED else (_reprocess(p_raw, sampling), _reprocess(q_raw, sampling))
        q_temp = _reprocess(q_raw, temperature_only) if filtered else q
    else:  # a penalty is not shift invariant: process the model's own logits
        p = _teacher_forced(target_ref, prompt, tokens, sampling)
        q = _teacher_forced(draft_ref, prompt, tokens, sampling)
        p_raw = q_raw = None
        if raw:
            p_raw = _teacher_forced(target_ref, prompt, tokens, UNPROCESSED)
            q_raw = _teacher_forced(draft_ref, prompt, tokens, UNPROCESSED)
            q_temp = _teacher_forced(draft_ref, prompt, tokens, temperature_only) if filtered else q
    return SequenceProbs(tokens, p, q, p_raw, q_raw, target_ref.eos_token_id, tuple(int(t) for t in prompt),
                         draft_after=ProbsAfter(draft_ref, sampling, len(prompt)),
                         target_after=ProbsAfter(target_ref, sampling, len(prompt)),
                         penalised=sampling.uses_context, q_temp=q_temp)


def all_sequences(vocab_size: int, num_tokens: int, eos_token_id: int | None) -> np.ndarray:
    """Every emitted outcome of ``num_tokens`` tokens (-1 after EOS), shape (outcomes, num_tokens), int64."""
    seen = set()
    for combo in itertools.product(range(vocab_size), repeat=num_tokens):
        if eos_token_id is not None and eos_token_id in combo:
            cut = combo.index(eos_token_id) + 1
            combo = combo[:cut] + (PADDING_TOKEN_ID,) * (num_tokens - cut)
        seen.add(combo)
    return np.array(sorted(seen), dtype=np.int64).reshape(-1, num_tokens)


def joint_codes(tokens: np.ndarray, vocab_size: int) -> np.ndarray:
    """Category index of each row in :func:`verifier.runner.analysis.joint_counts` order."""
    codes = np.zeros(len(tokens), dtype=np.int64)
    for t in range(tokens.shape[1]):
        col = np.where(tokens[:, t] == PADDING_TOKEN_ID, vocab_size, tokens[:, t])
        codes = codes * (vocab_size + 1) + col
    return codes


def mechanism_law(mechanism: Mechanism, target_ref, draft_ref, prompt, sampling: SamplingConfig,
                  num_draft_tokens: int, num_tokens: int) -> np.ndarray | None:
    """Law of the first ``num_tokens`` emitted tokens under ``mechanism``, float64, shape ((V + 1) ** J,).

    Returns None when there are more than :data:`MAX_LAW_OUTCOMES` outcomes, or for a latent mechanism
    whose state cannot be enumerated for this pair.  Category order as
    :func:`verifier.runner.analysis.joint_counts` (index V = the row had ended).
    """
    vocab = target_ref.vocab_size
    if vocab ** num_tokens > MAX_LAW_OUTCOMES:
        return None
    key = (target_ref, draft_ref, tuple(prompt), sampling, num_tokens)  # the objects, not ids: never a recycled id
    if key not in _OUTCOME_PROBS:  # the same outcomes and probs for every mechanism: computed once
        if len(_OUTCOME_PROBS) >= 16:
            _OUTCOME_PROBS.clear()
        seqs = all_sequences(vocab, num_tokens, target_ref.eos_token_id)
        _OUTCOME_PROBS[key] = (seqs, sequence_probs(target_ref, draft_ref, prompt, seqs, sampling))
    seqs, sp = _OUTCOME_PROBS[key]
    if mechanism.latent:
        from verifier.diagnose.latent import feasible

        if feasible(sp, num_draft_tokens, mechanism.name) is not None:
            return None
    probs = np.exp(log_likelihood(mechanism, sp, num_draft_tokens))
    law = np.zeros((vocab + 1) ** num_tokens)
    np.add.at(law, joint_codes(seqs, vocab), probs)
    return law
