"""The logprob zoo: speculative decoders that sample right and *report* the wrong logprobs.

Issue 29, bug kind 4 ("reported logprobs under speculation"): engines that return logprobs with speculation on
have returned ``0.0`` for every token (llama-server reports ``prob 1.0`` for the tokens of a verification step,
docs/servers.md; vLLM 0.7.3 with the n-gram drafter, vllm-project/vllm#17876), the right value for the first token
of a step only, or the draft model's row for accepted drafts.  Every token these decoders emit is drawn exactly as
the reference's (same kernel, same random stream), so the rows are correct samples and every distribution cell
passes; only the value reported beside each token is wrong, which the ``logprob`` cell
(:mod:`verifier.runner.logprob`) sees by scoring the same prefixes with the local reference.

Reported logprob (``generate(..., return_logprobs=True)``): the natural log of the emitted token's processed target
prob given its prefix (:meth:`~verifier.decoders.SpeculativeDecoder.generate`).  Each mutant overrides one hook,
:meth:`~verifier.decoders.SpeculativeDecoder._reported_logprobs`, which maps a round's right values (log p per
emitted column), the drafts' log q and the accepted count to what is reported:

``logprobs_zero``
    ``0.0`` (log 1) for every emitted token: wrong wherever ``p(x) < 1``.
``logprobs_first_only``
    The round's first emitted token carries its right value; the later tokens of the round repeat it (one logprob
    slot per engine step, copied to every token the step emitted): wrong at a later column whose ``p`` differs
    from the first column's.
``logprobs_draft_row``
    Accepted draft tokens report ``log q(x)`` (the draft's processed prob, read from the proposal) instead of
    ``log p(x)``; the recovered and bonus tokens are right: wrong at accepted drafts with ``q(x) != p(x)``.

The exact share of wrong tokens per position on a tabular pair is :func:`verifier.exact.logprob_defect_law`.
:data:`LOGPROB_DECODER_REGISTRY` maps a name to a :class:`~verifier.decoders.spec.DecoderSpec`;
:func:`verifier.decoders.make_decoder` finds these names too.
"""

from __future__ import annotations

import torch

from verifier.decoders.spec import DecoderSpec
from verifier.decoders.speculative import SpeculativeDecoder

__all__ = ["LOGPROB_DECODER_REGISTRY", "LogprobsZeroDecoder", "LogprobsFirstOnlyDecoder", "LogprobsDraftRowDecoder",
           "logprob_decoder_names", "LOGPROB_DEFECTS"]

# defect name (verifier.exact.logprob_defect_law, the diagnosis) -> zoo decoder
LOGPROB_DEFECTS = {"zero": "logprobs_zero", "first_only": "logprobs_first_only", "draft_row": "logprobs_draft_row"}


class LogprobsZeroDecoder(SpeculativeDecoder):
    """Reference speculative decoding that reports logprob 0.0 (probability 1) for every emitted token."""

    def _reported_logprobs(self, target_logprobs, draft_logprobs, retained):
        return torch.zeros_like(target_logprobs)  # BUG on purpose: should be target_logprobs


class LogprobsFirstOnlyDecoder(SpeculativeDecoder):
    """Reference speculative decoding whose later tokens of a round repeat the round's first logprob."""

    def _reported_logprobs(self, target_logprobs, draft_logprobs, retained):
        return target_logprobs[:, :1].expand_as(target_logprobs).clone()  # BUG on purpose: one value per round


class LogprobsDraftRowDecoder(SpeculativeDecoder):
    """Reference speculative decoding whose accepted draft tokens report the draft's log q instead of log p."""

    def _reported_logprobs(self, target_logprobs, draft_logprobs, retained):
        k = draft_logprobs.shape[1]
        accepted = torch.arange(k, device=retained.device)[None] < retained[:, None]  # (B, k): accepted drafts
        out = target_logprobs.clone()
        out[:, :k] = torch.where(accepted, draft_logprobs, target_logprobs[:, :k])  # BUG on purpose: the draft's row
        return out


def _factory(cls):
    return lambda target, draft, k, **options: cls(target, draft, k, **options)


_WHERE = "only with return_logprobs (the logprob cell); the tokens are the reference's, so every distribution cell passes"
_ENTRIES = [
    DecoderSpec("logprobs_zero", "Reports logprob 0.0 (probability 1) for every emitted token; samples correctly.",
                "biased", f"at every token with p < 1; {_WHERE}", _factory(LogprobsZeroDecoder)),
    DecoderSpec("logprobs_first_only", "Reports the right logprob for the first token of each round and repeats it "
                "for the round's later tokens; samples correctly.", "biased",
                f"at a round's second and later tokens whose p differs from the first's (k >= 1); {_WHERE}",
                _factory(LogprobsFirstOnlyDecoder)),
    DecoderSpec("logprobs_draft_row", "Reports the draft's log q for accepted draft tokens instead of the target's "
                "log p; samples correctly.", "biased",
                f"at accepted drafts with q != p; {_WHERE}", _factory(LogprobsDraftRowDecoder)),
]

LOGPROB_DECODER_REGISTRY: dict[str, DecoderSpec] = {spec.name: spec for spec in _ENTRIES}


def logprob_decoder_names() -> list[str]:
    """Names of the logprob zoo's decoders."""
    return list(LOGPROB_DECODER_REGISTRY)
