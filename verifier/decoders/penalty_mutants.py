"""The penalty zoo: speculative decoders whose verification processes the target with the wrong context or processors.

Issue 29, bug kind 3 ("penalties and logits processors under speculation"): with a repetition, presence or frequency
penalty the processed target law changes with every emitted token, and min-p cuts each row; engines have verified
draft positions with stale penalty counts, without the penalties, or without min-p, while the bonus token (drawn by
the engine's regular sampler) had them.  Each decoder here is :class:`~verifier.decoders.SpeculativeDecoder` with one
hook changed, ``_target_probs`` -- the processed target probs ``(batch, num_draft_tokens + 1, vocab)`` the kernel
verifies the k draft positions with (acceptance test and residual) and draws the bonus token from (row k); the draft
proposes from its own fully processed probs, recomputed per drafted token (the reference's ``_propose``).  Their exact
laws: :func:`verifier.exact.penalties.penalty_n_token_law` with the rule of the same name.

* ``penalty_once_per_round`` -- every position of a round processed with the context codes of the round's start
  (``seen_stack[:, 0]``): the counts are updated once per round, not per accepted token.
* ``penalty_ignored_in_verification`` -- the k draft positions without the repetition, presence and frequency
  penalties, the bonus position with them (vLLM v1 before PR #19482, issue #18902).
* ``min_p_skipped_on_verified`` -- the k draft positions without min-p, the bonus position with it (vLLM issue
  #42744: ``RejectionSampler.apply_logits_processors`` skips the argmax-invariant processors).

:data:`PENALTY_DECODER_REGISTRY` maps each name to a :class:`~verifier.decoders.spec.DecoderSpec`;
:func:`verifier.decoders.make_decoder` finds them.  Without their processor (no penalty / no min-p) each is the
reference.
"""

from __future__ import annotations

import dataclasses

import torch

from verifier.decoders.spec import DecoderSpec
from verifier.decoders.speculative import SpeculativeDecoder
from verifier.sampling import SamplingConfig, processed_probs

__all__ = ["PENALTY_DECODER_REGISTRY", "PenaltyOncePerRoundDecoder", "PenaltyIgnoredInVerificationDecoder",
           "MinPSkippedOnVerifiedDecoder", "penalty_decoder_names"]


def _without_penalties(sampling: SamplingConfig) -> SamplingConfig:
    return dataclasses.replace(sampling, repetition_penalty=None, presence_penalty=None, frequency_penalty=None)


class PenaltyOncePerRoundDecoder(SpeculativeDecoder):
    """Reference speculative decoding whose target positions all read the penalty state of the round's start.

    Parameters as for :class:`~verifier.decoders.SpeculativeDecoder`.  A draft position j >= 1 (and the bonus
    position) is verified as if the round's earlier drafts had not been generated.
    """

    def _target_probs(self, logits: torch.Tensor, sampling: SamplingConfig, seen) -> torch.Tensor:
        if seen is None:
            return processed_probs(logits, sampling)
        return processed_probs(logits, sampling, seen[:, :1].expand_as(seen))  # BUG on purpose: seen[:, j] per position


class _BonusOnly(SpeculativeDecoder):
    """Draft positions processed with :meth:`_verify_sampling`, the bonus position with the request's sampling."""

    def _verify_sampling(self, sampling: SamplingConfig) -> SamplingConfig:
        raise NotImplementedError

    def _target_probs(self, logits: torch.Tensor, sampling: SamplingConfig, seen) -> torch.Tensor:
        k = logits.shape[1] - 1
        verify = self._verify_sampling(sampling)
        drafts = processed_probs(logits[:, :k], verify, None if seen is None or not verify.uses_context else seen[:, :k])
        bonus = processed_probs(logits[:, k:], sampling, None if seen is None else seen[:, k:])
        return torch.cat([drafts, bonus], dim=1)


class PenaltyIgnoredInVerificationDecoder(_BonusOnly):
    """Reference speculative decoding whose k draft positions are verified without the repetition, presence and
    frequency penalties; the bonus token is drawn with them.  Parameters as for
    :class:`~verifier.decoders.SpeculativeDecoder`."""

    def _verify_sampling(self, sampling: SamplingConfig) -> SamplingConfig:
        return _without_penalties(sampling)  # BUG on purpose: the rejection sampler drops the penalties


class MinPSkippedOnVerifiedDecoder(_BonusOnly):
    """Reference speculative decoding whose k draft positions are verified without min-p; the bonus token is drawn
    with it.  Parameters as for :class:`~verifier.decoders.SpeculativeDecoder`."""

    def _verify_sampling(self, sampling: SamplingConfig) -> SamplingConfig:
        return dataclasses.replace(sampling, min_p=None)  # BUG on purpose: min-p only on the bonus position


def _factory(cls):
    return lambda target, draft, k, **options: cls(target, draft, k, **options)


_ENTRIES = [
    DecoderSpec("penalty_once_per_round", "Penalty counts updated once per round: every target position of a round "
                "is processed with the tokens emitted before the round (a draft position verifies with stale counts).",
                "biased", "with a repetition, presence or frequency penalty, from the second position of a round "
                "(k >= 1: the bonus position too) when a drafted token changes the penalty state",
                _factory(PenaltyOncePerRoundDecoder)),
    DecoderSpec("penalty_ignored_in_verification", "Target probs at the draft positions verified without the "
                "repetition, presence and frequency penalties; only the bonus token is penalised (vLLM #18902).",
                "biased", "with a penalty whose state is non-empty: from the first position with a repetition "
                "penalty and a prompt, from the second with presence / frequency (generated tokens only)",
                _factory(PenaltyIgnoredInVerificationDecoder)),
    DecoderSpec("min_p_skipped_on_verified", "min-p applied to the bonus token but not to the target probs of the "
                "draft positions (acceptance test and residual; vLLM #42744).", "biased",
                "with min_p when it drops a token the draft proposes or the residual holds (any position; a recovered "
                "token min-p removes is a support violation)", _factory(MinPSkippedOnVerifiedDecoder)),
]

PENALTY_DECODER_REGISTRY: dict[str, DecoderSpec] = {spec.name: spec for spec in _ENTRIES}


def penalty_decoder_names() -> list[str]:
    """Names of the penalty zoo's decoders."""
    return list(PENALTY_DECODER_REGISTRY)
