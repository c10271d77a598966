"""The recurrent-state zoo: speculative decoders over a state-space target whose state is not rolled back.

Issue 29, bug kind 8 ("recurrent state not rolled back"): hybrid and state-space targets (Mamba2, gated delta
nets) carry a state that the verify pass advances over every draft token.  Engines have rolled back the KV cache
(or the token position: transformers' ``DynamicCache.crop`` restores a linear-attention layer's conv window, never
its SSM state) but not the state, and have kept a state checkpoint that only rounds with drafts refresh -- so the bug
shows only when a round with drafts follows one with none (an n-gram or prompt-lookup drafter that sometimes proposes
nothing; option ``skip_prob``).

:data:`RECURRENT_DECODER_REGISTRY` maps a name to a :class:`~verifier.decoders.spec.DecoderSpec`;
:func:`verifier.decoders.make_decoder` finds these names.  The exact laws of all three on a
:class:`~verifier.exact.recurrent.RecurrentLM` are :func:`verifier.exact.recurrent.recurrent_law` with
``rollback="rolled_back" / "not_rolled_back" / "stale_checkpoint"``.
"""

from __future__ import annotations

import torch

from verifier.decoders.recurrent import RecurrentSpeculativeDecoder
from verifier.decoders.spec import DecoderSpec
from verifier.models.recurrent import STATE_PARTS

__all__ = ["RECURRENT_DECODER_REGISTRY", "StateNotRolledBackDecoder", "StateCheckpointStaleDecoder",
           "recurrent_decoder_names"]


class StateNotRolledBackDecoder(RecurrentSpeculativeDecoder):
    """The token position (and a Mamba layer's conv window) rolled back, the recurrent state not.

    After a rejection at position ``m + 1`` the state has consumed ``x, d_1..d_k`` -- the rejected drafts
    ``d_{m+1}..d_k`` included -- and the recovered token is fed on top of it next round.  Parameters as for
    :class:`~verifier.decoders.recurrent.RecurrentSpeculativeDecoder`.
    """

    restore_parts = ("conv",)  # BUG on purpose: the recurrent part is left after d_k


class StateCheckpointStaleDecoder(RecurrentSpeculativeDecoder):
    """A rejection restores a committed checkpoint and re-runs the accepted tokens; only rounds with drafts commit.

    A draftless round advances the working state but commits nothing, so a rejection in a round with drafts after
    one or more draftless rounds restores a checkpoint without their tokens.  With ``skip_prob = 0`` this is the
    reference.  Parameters as for :class:`~verifier.decoders.recurrent.RecurrentSpeculativeDecoder`.
    """

    def _roll_back(self, st: dict, accepted: torch.Tensor, drafted: torch.Tensor) -> None:
        target, k = self.target, self.num_draft_tokens
        super()._roll_back(st, accepted, drafted)
        rejected = drafted & (accepted < k)
        if rejected.any():  # restore the checkpoint, re-run x, d_1..d_m from it
            now = target.snapshot()
            target.restore(st["checkpoint"], rejected, STATE_PARTS)
            reruns = []
            for token in st["fed"][: int(accepted[rejected].max()) + 1]:
                target.step(token)
                reruns.append(target.snapshot())
            target.restore(now, ~rejected, STATE_PARTS)
            for i, snap in enumerate(reruns):
                target.restore(snap, rejected & (accepted == i), STATE_PARTS)
        now = target.snapshot()  # commit the checkpoint in the rows that had drafts only (BUG on purpose)
        target.restore(st["checkpoint"], ~drafted, STATE_PARTS)
        st["checkpoint"] = target.snapshot()
        target.restore(now, ~drafted, STATE_PARTS)


def _factory(cls):
    return lambda target, draft, k, **options: cls(target, draft, k, **options)


_ENTRIES = [
    DecoderSpec("recurrent_reference", "Speculative decoding over a recurrent target with the state rolled back to "
                "the accepted prefix (per-position state snapshots); option skip_prob: an intermittent drafter.",
                "exact", "never (its law is the target's for every k and skip_prob)",
                _factory(RecurrentSpeculativeDecoder)),
    DecoderSpec("state_not_rolled_back", "The token position / KV cache (a Mamba layer's conv window) is rolled back "
                "after a rejection, the recurrent state is not: it keeps the rejected drafts.", "biased",
                "recurrent targets only, T > 0 with rejections (k >= 1), from the tokens of the round after a "
                "rejection, when the state reads more than the last token (a rejected draft changes the state)",
                _factory(StateNotRolledBackDecoder)),
    DecoderSpec("state_checkpoint_stale", "A rejection restores the state checkpoint and re-runs the accepted tokens, "
                "but only rounds with drafts commit the checkpoint: after a draftless round it is stale.", "biased",
                "recurrent targets with an intermittent drafter (skip_prob > 0) only: a rejection in a round with "
                "drafts that follows a draftless round; identical to the reference when every round drafts",
                _factory(StateCheckpointStaleDecoder)),
]

RECURRENT_DECODER_REGISTRY: dict[str, DecoderSpec] = {spec.name: spec for spec in _ENTRIES}


def recurrent_decoder_names() -> list[str]:
    """Names of the recurrent-state zoo's decoders."""
    return list(RECURRENT_DECODER_REGISTRY)
