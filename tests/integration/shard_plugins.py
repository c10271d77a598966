"""Decoder factories for the sharding suite (loaded by ``module:factory`` from suites/shard.toml)."""

from __future__ import annotations

from verifier.decoders.kernels import full_p_fallback_kernel
from verifier.decoders.speculative import SpeculativeDecoder


def reference(target, draft, num_draft_tokens):
    """The reference speculative decoder on the suite's tabular pair."""
    return SpeculativeDecoder(target, draft, num_draft_tokens, name="reference")


def full_p_fallback(target, draft, num_draft_tokens):
    """Mutant: the recovered token is drawn from the target p instead of the residual."""
    return SpeculativeDecoder(target, draft, num_draft_tokens, kernel=full_p_fallback_kernel, name="full-p-fallback")
