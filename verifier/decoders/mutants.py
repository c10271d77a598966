"""The decoder-level bug zoo: named one-defect variants of the reference speculative decoder.

``DECODER_REGISTRY`` maps a stable snake_case name to a :class:`DecoderSpec` (description, declared
status, when the defect is visible at all, factory); :func:`make_decoder` builds one by name.
``declared`` is ``"exact"`` for the reference decoders, ``"biased"`` for bugs and ``"lossy"`` for a
deliberately approximate rule (typical acceptance) that a suite must still report as biased.

``visible_when`` says which cells can see each defect, so a suite can be designed to catch it: a
cell outside that set has the reference's law, and a mutant there must *not* be flagged.
"""

from __future__ import annotations

import torch

from verifier.decoders import kernels as K
from verifier.decoders.kernels import sample_from_probs
from verifier.decoders.lossless import block_verification_kernel, fresh_target_match_kernel
from verifier.decoders.spec import DecoderSpec
from verifier.decoders.speculative import AncestralDecoder, SpeculativeDecoder
from verifier.errors import invalid_argument
from verifier.sampling import SamplingConfig, processed_probs

__all__ = ["DecoderSpec", "DECODER_REGISTRY", "make_decoder", "mutant_names"]

_UNPROCESSED = SamplingConfig()  # what a decoder gets when it forgets the user's sampling params


class GreedyDraftSoftmaxQDecoder(SpeculativeDecoder):
    """Mutant: the draft proposes its argmax but the ratio uses its softmax q."""

    def _propose(self, logits, sampling, seen, gen):
        q = processed_probs(logits, sampling, seen)
        torch.rand(q.shape[0], dtype=torch.float64, device=q.device, generator=gen)  # keep the RNG stream aligned
        return q.argmax(dim=-1), q  # BUG: token should be drawn from q


class DraftRawQDecoder(SpeculativeDecoder):
    """Mutant: the draft samples processed probs, but the kernel gets softmax(raw logits)."""

    def _propose(self, logits, sampling, seen, gen):
        q = processed_probs(logits, sampling, seen)
        token = sample_from_probs(q, torch.rand(q.shape[0], dtype=torch.float64, device=q.device, generator=gen))
        return token, processed_probs(logits, _UNPROCESSED)  # BUG: should return q


class TargetUnprocessedDecoder(SpeculativeDecoder):
    """Mutant: the target is verified (and the bonus drawn) with default sampling params."""

    def _target_probs(self, logits, sampling, seen):
        return processed_probs(logits, _UNPROCESSED)  # BUG: should use `sampling` and `seen`


class KVNotRolledBackDecoder(SpeculativeDecoder):
    """Mutant: the rejected draft suffix stays visible in the target and draft KV caches."""

    roll_back_caches = False  # BUG


def _spec(kernel):
    return lambda target, draft, k, **options: SpeculativeDecoder(target, draft, k, kernel=kernel, **options)


def _synthetic(target, draft, k, rates=None, **options):
    """``synthetic_acceptance`` with option ``rates`` (conditional acceptance per draft position, default (0.8, 0.6))."""
    decoder = SpeculativeDecoder(target, draft, k, kernel=K.make_synthetic_acceptance_kernel(rates), **options)
    decoder.settings = {**decoder.settings, **decoder.kernel.settings}
    return decoder


def _cls(cls):
    return lambda target, draft, k, **options: cls(target, draft, k, **options)


_ENTRIES = [
    DecoderSpec("reference", "The reference speculative decoder (Leviathan Alg. 1 / Chen Alg. 2).", "exact",
                "never (its law is the target's for every config, k and batch)", _spec(K.verify_chain), K.verify_chain),
    DecoderSpec("ancestral", "Plain target sampling (ignores the draft and k).", "exact",
                "never", lambda target, draft, k, **options: AncestralDecoder(target, **options)),
    DecoderSpec("fresh_target_match", "Lossless, non-canonical: accept a draft iff it equals a fresh target sample; on "
                "mismatch emit that sample (as several production engines do).", "exact",
                "never (its law is the target's); it accepts fewer drafts than the canonical rule (sum q*p instead of "
                "sum min(p, q) per position), which the acceptance audit reports", _spec(fresh_target_match_kernel),
                fresh_target_match_kernel),
    DecoderSpec("block_verification", "Lossless, non-canonical: Sun et al. 2024 block verification (the draft block is "
                "verified jointly).", "exact",
                "never (its law is the target's); it accepts at least as many drafts as the canonical rule in "
                "expectation, which the acceptance audit reports", _spec(block_verification_kernel),
                block_verification_kernel),
    DecoderSpec("full_p_fallback", "The recovered token is drawn from the target row p instead of the residual max(0, p - q).",
                "biased", "any config with T > 0 and any k, at the first emitted position already, whenever p != q "
                "where both have mass; invisible when the draft is one-hot on a token with p = 0 or q == p",
                _spec(K.full_p_fallback_kernel), K.full_p_fallback_kernel),
    DecoderSpec("greedy_draft_softmax_q", "The draft proposes its argmax but the accept ratio and residual use its softmax q.",
                "biased", "T > 0 with a draft that is not one-hot (any k, first emitted position); identical at T = 0",
                _cls(GreedyDraftSoftmaxQDecoder)),
    DecoderSpec("draft_raw_q", "The draft samples from processed probs, but q handed to the kernel is softmax(raw logits).",
                "biased", "only when processing changes the draft's probs: T != 1, top_k < vocab, top_p < 1 or a "
                "repetition penalty (any k, first position); identical at T = 1 without top-k/top-p",
                _cls(DraftRawQDecoder)),
    DecoderSpec("target_unprocessed", "The target is verified and the bonus drawn with default params (T=1, no top-k/top-p).",
                "biased", "only when T != 1, top_k < vocab, top_p < 1 or a repetition penalty is set (any k, first "
                "position); identical at T = 1 without processing", _cls(TargetUnprocessedDecoder)),
    DecoderSpec("bonus_wrong_position", "The bonus token is drawn from target row k - 1 instead of row k.", "biased",
                "only after all k drafts are accepted, at emitted position k + 1 of a round (first round: position "
                "k + 1), and only with a context-dependent target (bigram or richer); high draft acceptance helps",
                _spec(K.bonus_wrong_position_kernel), K.bonus_wrong_position_kernel),
    DecoderSpec("draft_suffix_kept", "After the recovered token, the unverified draft tokens after the rejected position "
                "are emitted too.", "biased",
                "k >= 2 and T > 0 with a rejection before position k; visible from the token after the recovered one",
                _spec(K.draft_suffix_kept_kernel), K.draft_suffix_kept_kernel),
    DecoderSpec("kv_not_rolled_back", "Rejected draft tokens stay visible in the KV caches after a rejection.", "biased",
                "T > 0 with rejections, at tokens of the round after a rejection, and only with a target whose next "
                "token depends on more than the last token (trigram table or a transformer): a bigram target reads "
                "only the last token, which is always fed correctly", _cls(KVNotRolledBackDecoder)),
    DecoderSpec("greedy_acceptance", "The T = 0 rule at T > 0: accept iff the draft is the target argmax, else draw "
                "from p.", "biased", "any T > 0 where p is not one-hot (any k, first position)",
                _spec(K.greedy_acceptance_kernel), K.greedy_acceptance_kernel),
    DecoderSpec("deterministic_acceptance", "Accept iff p(d) >= q(d) without a coin flip.", "biased",
                "T > 0 where some draft token has 0 < p(d) < q(d) (any k, first position)",
                _spec(K.deterministic_acceptance_kernel), K.deterministic_acceptance_kernel),
    DecoderSpec("batch_cross_talk", "Row 0's accepted length is applied to every row of the batch.", "biased",
                "num_samples >= 2 and T > 0 with rejections: rows other than row 0 are biased from the first position",
                _spec(K.batch_cross_talk_kernel), K.batch_cross_talk_kernel),
    DecoderSpec("typical_acceptance", "Medusa typical acceptance (p(d) > min(0.09, 0.3 exp(-H(p)))); declared lossy.", "lossy",
                "any T > 0 in practice (it accepts low-p drafts and rejects tokens p would keep); the effect size is "
                "reported, not a bug", _spec(K.typical_acceptance_kernel), K.typical_acceptance_kernel),
    DecoderSpec("accept_all", "Every draft token is accepted (no acceptance test); the bonus token from target row k.",
                "biased", "any T where q != p (any k, first position); the acceptance rate is 1, above the coupling "
                "bound", _spec(K.accept_all_kernel), K.accept_all_kernel),
    DecoderSpec("residual_by_index", "On rejection the residual subtracts the draft prob at the same index of the "
                "id-sorted candidate arrays (llama.cpp speculative.cpp).", "biased",
                "only when target and draft keep different token sets (top-k / top-p, zero probs), at the first "
                "position already; identical to the reference when every prob is positive (T > 0, no filter)",
                _spec(K.residual_by_index_kernel), K.residual_by_index_kernel),
    DecoderSpec("synthetic_acceptance", "A synthetic-acceptance benchmarking mode left on (vLLM "
                "rejection_sample_method='synthetic'): draft j accepted with a fixed probability (option rates, default "
                "(0.8, 0.6)) whatever p and q are; recovered token ~ residual; declared lossy.", "lossy",
                "any T wherever the fixed rate differs from the canonical min(1, p/q) (first position already); its "
                "acceptance per position is the same in every sample set (prompt, T): the acceptance audit's "
                "fingerprint", _synthetic, K.synthetic_acceptance_kernel),
    DecoderSpec("degenerate_residual_div0", "Normalises the residual by its sum with no fallback: an all-zero residual "
                "becomes NaN and the recovered token is token 0.", "biased",
                "only when a rejection meets an all-zero residual: target rows that do not sum to 1 (rounding, or "
                "unnormalised synthetic probs at the kernel level); with float64 model probs ~1e-16 per rejection, so "
                "drive the kernel directly", _spec(K.degenerate_residual_div0_kernel), K.degenerate_residual_div0_kernel),
]

DECODER_REGISTRY: dict[str, DecoderSpec] = {spec.name: spec for spec in _ENTRIES}


def mutant_names() -> list[str]:
    """Names of every registered decoder whose ``declared`` is not ``"exact"``."""
    return [name for name, spec in DECODER_REGISTRY.items() if spec.declared != "exact"]


def make_decoder(name: str, target, draft, num_draft_tokens: int = 4, **options):
    """Build a registered decoder by name.

    Parameters
    ----------
    name : str
        A key of :data:`DECODER_REGISTRY` (``"reference"``, ``"ancestral"`` or a mutant) or of
        :data:`verifier.decoders.tree_mutants.TREE_DECODER_REGISTRY` (``"tree_reference"``, ...; option ``tree``)
        or of :data:`verifier.decoders.stream_mutants.STREAM_DECODER_REGISTRY` (``"shared_stream"``,
        ``"serial_stream"``: rows not independent) or of
        :data:`verifier.decoders.stop_mutants.STOP_DECODER_REGISTRY` (``"stop_mid_block"``, ``"max_tokens_overshoot"``:
        the stop rule checked per round) or of :data:`verifier.decoders.logprob_mutants.LOGPROB_DECODER_REGISTRY`
        (``"logprobs_zero"``, ``"logprobs_first_only"``, ``"logprobs_draft_row"``: wrong reported logprobs) or of
        :data:`verifier.decoders.vocab_mutants.VOCAB_DECODER_REGISTRY` (``"vocab_mapped"``, ``"q_permuted"``, ...: a
        draft over its own vocabulary mapped into the target's ids) or of
        :data:`verifier.decoders.recurrent_mutants.RECURRENT_DECODER_REGISTRY` (``"recurrent_reference"``,
        ``"state_not_rolled_back"``, ``"state_checkpoint_stale"``: a recurrent target; option ``skip_prob``) or of
        :data:`verifier.decoders.batch_mutants.BATCH_DECODER_REGISTRY` (``"corrupt_batch_gt2"``: wrong only in calls of
        more than 2 rows) or of
        :data:`verifier.decoders.penalty_mutants.PENALTY_DECODER_REGISTRY` (``"penalty_once_per_round"``, ...:
        penalties / min-p wrong on the verified positions) or of
        :data:`verifier.decoders.field_mutants.FIELD_DECODER_REGISTRY` (``"recovered_one_late"``,
        ``"draft_accept_same_uniform"``, ``"target_processed_first_only"``: mechanisms the field reports).
    target, draft : causal LM
        As for :class:`~verifier.decoders.SpeculativeDecoder`.
    num_draft_tokens : int, default 4
    **options
        Passed to the decoder's constructor (e.g. ``eos_token_id``).

    Returns
    -------
    Decoder
        With ``name`` set to the registry name.

    Raises
    ------
    InvalidArgumentError
        If ``name`` is not registered (the message lists the names) or ``num_draft_tokens`` is invalid.
    TypeError
        If ``options`` holds a keyword the decoder does not take.
    """
    spec = registered_spec(name)
    decoder = spec.factory(target, draft, num_draft_tokens, **options)
    decoder.name = name
    return decoder


def registered_spec(name: str) -> DecoderSpec:
    """The :class:`DecoderSpec` registered under ``name`` in any decoder zoo (see :func:`make_decoder`).

    Raises
    ------
    InvalidArgumentError
        If ``name`` is not registered (the message lists the names).
    """
    from verifier.decoders.field_mutants import FIELD_DECODER_REGISTRY
    from verifier.decoders.logprob_mutants import LOGPROB_DECODER_REGISTRY
    from verifier.decoders.recurrent_mutants import RECURRENT_DECODER_REGISTRY
    from verifier.decoders.batch_mutants import BATCH_DECODER_REGISTRY
    from verifier.decoders.penalty_mutants import PENALTY_DECODER_REGISTRY
    from verifier.decoders.stop_mutants import STOP_DECODER_REGISTRY
    from verifier.decoders.stream_mutants import STREAM_DECODER_REGISTRY
    from verifier.decoders.tree_mutants import TREE_DECODER_REGISTRY  # tree decoders, loaded when a name is looked up
    from verifier.decoders.vocab_mutants import VOCAB_DECODER_REGISTRY

    spec = (DECODER_REGISTRY.get(name) or TREE_DECODER_REGISTRY.get(name) or STREAM_DECODER_REGISTRY.get(name)
            or STOP_DECODER_REGISTRY.get(name) or LOGPROB_DECODER_REGISTRY.get(name) or VOCAB_DECODER_REGISTRY.get(name)
            or RECURRENT_DECODER_REGISTRY.get(name) or BATCH_DECODER_REGISTRY.get(name) or PENALTY_DECODER_REGISTRY.get(name)
            or FIELD_DECODER_REGISTRY.get(name))
    if spec is None:
        raise invalid_argument("name", name, f"one of {sorted(DECODER_REGISTRY) + sorted(TREE_DECODER_REGISTRY)}"
                               f" or {sorted(STREAM_DECODER_REGISTRY) + sorted(STOP_DECODER_REGISTRY)}"
                               f" or {sorted(LOGPROB_DECODER_REGISTRY) + sorted(VOCAB_DECODER_REGISTRY)}"
                               f" or {sorted(RECURRENT_DECODER_REGISTRY) + sorted(BATCH_DECODER_REGISTRY)}"
                               f" or {sorted(PENALTY_DECODER_REGISTRY) + sorted(FIELD_DECODER_REGISTRY)}")
    return spec
