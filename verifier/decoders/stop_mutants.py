"""The stop-rule zoo: speculative decoders that check the request's stop rule per round, not per token.

Issue 29, bug kind 5 ("stop rules inside accepted blocks"): a round emits a block of tokens (the accepted drafts,
then the recovered or bonus token), and engines have checked stop strings, stop tokens and ``max_tokens`` only
once the whole block is appended -- so a stop token accepted in the middle of a block is followed by the rest of
the block, and the last round overshoots ``max_tokens`` by the tail of its block.  Every token these decoders emit
is drawn exactly as the reference's (same kernel, same random stream): the rows *up to* the stop are correct
samples, and the law of the stopping position (the first stop token or EOS, or the limit) is the target's.  What is
wrong is what comes after it, which only the ``stop`` test's violation cell (:mod:`verifier.runner.stop`) sees; a
cell that reads one position's token cannot.

:data:`STOP_DECODER_REGISTRY` maps a name to a :class:`~verifier.decoders.spec.DecoderSpec`;
:func:`verifier.decoders.make_decoder` finds these names too (``decoder = "stop_mid_block"`` in a suite, which also
sets ``stop_token_ids`` / ``max_tokens``: without a stop rule both decoders are the reference).

The model's EOS keeps its cut in both: a token after EOS is invalid output under the decoder contract
(:func:`verifier.validation.check_emitted_tokens`, exit 3), so the harness already refuses a decoder that runs past
EOS; the request's extra stop tokens and ``max_tokens`` are where a statistical run needs a cell.
"""

from __future__ import annotations

import torch

from verifier.decoders.spec import DecoderSpec
from verifier.decoders.speculative import SpeculativeDecoder, _Output

__all__ = ["STOP_DECODER_REGISTRY", "StopMidBlockDecoder", "MaxTokensOvershootDecoder", "stop_decoder_names"]


class _StopAtRoundEnd(_Output):
    """A result array whose request stop tokens are checked once per written block, not per token."""

    def _stop_cut(self, emitted: torch.Tensor, count: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        cols = torch.arange(emitted.shape[1], device=emitted.device)[None]
        is_eos = torch.isin(emitted, self.eos_ids) & (cols < count[:, None])
        hit_eos = is_eos.any(dim=1)
        count = torch.where(hit_eos, is_eos.to(torch.int8).argmax(dim=1) + 1, count)  # EOS: cut (contract, module doc)
        hit = (torch.isin(emitted, self.stop_ids) & (cols < count[:, None])).any(dim=1)
        return count, hit  # BUG on purpose: the whole block is written; a stop token only ends the row after it


class _LimitAtRoundEnd(_Output):
    """A result array whose ``max_tokens`` is checked once per written block: the block runs on to the array's width."""

    def _room(self, written: torch.Tensor) -> torch.Tensor:
        return self.max_new_tokens - written  # BUG on purpose: should be self.limit - written


class StopMidBlockDecoder(SpeculativeDecoder):
    """Reference speculative decoding whose request stop tokens are checked at the end of each round.

    A stop token accepted as a draft at position ``j`` of a round is followed by the rest of the block (the later
    accepted drafts and the recovered or bonus token); the row ends after the round.  Parameters as for
    :class:`~verifier.decoders.SpeculativeDecoder`.
    """

    def _output(self, num_samples, max_new_tokens, stop_token_ids, max_tokens) -> _Output:
        return _StopAtRoundEnd(num_samples, max_new_tokens, self.eos_token_id, self.device, stop_token_ids, max_tokens)


class MaxTokensOvershootDecoder(SpeculativeDecoder):
    """Reference speculative decoding whose ``max_tokens`` is checked at the end of each round.

    The round that reaches the limit is written whole (up to ``max_new_tokens``, the array's width), so a row holds
    up to ``k`` tokens past ``max_tokens``.  Parameters as for :class:`~verifier.decoders.SpeculativeDecoder`.
    """

    def _output(self, num_samples, max_new_tokens, stop_token_ids, max_tokens) -> _Output:
        return _LimitAtRoundEnd(num_samples, max_new_tokens, self.eos_token_id, self.device, stop_token_ids, max_tokens)


def _factory(cls):
    return lambda target, draft, k, **options: cls(target, draft, k, **options)


_ENTRIES = [
    DecoderSpec("stop_mid_block", "Request stop tokens are checked once per round: a stop token accepted inside a "
                "block is followed by the rest of the block (the later accepted drafts and the recovered or bonus "
                "token).", "biased",
                "with stop_token_ids, when a stop token is accepted as a draft (k >= 1); every token has the "
                "reference's law up to the stop, so only the stop violation cell sees it",
                _factory(StopMidBlockDecoder)),
    DecoderSpec("max_tokens_overshoot", "max_tokens is checked once per round: the round that reaches it is written "
                "whole, up to k tokens past the limit.", "biased",
                "with max_tokens < max_new_tokens, when a round's block crosses the limit (k >= 2, or k = 1 with the "
                "bonus token); only the stop violation cell sees it", _factory(MaxTokensOvershootDecoder)),
]

STOP_DECODER_REGISTRY: dict[str, DecoderSpec] = {spec.name: spec for spec in _ENTRIES}


def stop_decoder_names() -> list[str]:
    """Names of the stop-rule zoo's decoders."""
    return list(STOP_DECODER_REGISTRY)
