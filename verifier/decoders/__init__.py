"""Decoders: plain sampling, the reference speculative and tree decoders, verification kernels, the bug zoo
and the teacher-forced target scorer.  See docs/ARCHITECTURE.md."""

from verifier.decoders.kernels import KERNELS, residual_or_target, sample_from_probs, verify_chain
from verifier.decoders.lossless import LOSSLESS_KERNELS
from verifier.decoders.mutants import DECODER_REGISTRY, DecoderSpec, make_decoder, mutant_names
from verifier.decoders.scorer import ScoredBatch, TargetScorer
from verifier.decoders.speculative import AncestralDecoder, SpeculativeDecoder
from verifier.decoders.tree_decoder import TreeDecoder

KERNELS.update(LOSSLESS_KERNELS)  # the lossless non-canonical kernels (fresh_target_match, block_verification)

__all__ = [
    "AncestralDecoder",
    "DECODER_REGISTRY",
    "DecoderSpec",
    "KERNELS",
    "ScoredBatch",
    "SpeculativeDecoder",
    "TargetScorer",
    "TreeDecoder",
    "make_decoder",
    "mutant_names",
    "residual_or_target",
    "sample_from_probs",
    "verify_chain",
]
