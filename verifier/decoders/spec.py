"""One entry of a decoder registry (:data:`~verifier.decoders.mutants.DECODER_REGISTRY`,
:data:`~verifier.decoders.tree_mutants.TREE_DECODER_REGISTRY`): its own module, so the two registries
need not import each other."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

__all__ = ["DecoderSpec"]


@dataclass(frozen=True)
class DecoderSpec:
    """One registered decoder.

    Attributes
    ----------
    name : str
        Stable snake_case identifier used by suites.
    description : str
        The defect in one sentence.
    declared : {"exact", "biased", "lossy"}
        What its law is supposed to be.
    visible_when : str
        Sampling configs, k, batch and positions under which the law differs from the target's.
    factory : callable (target, draft, num_draft_tokens, **options) -> decoder
    kernel : callable or None
        The kernel-level variant it plugs in, when the defect lives in the verify step.
    """

    name: str
    description: str
    declared: str
    visible_when: str
    factory: Callable
    kernel: Callable | None = None
