"""spec-verifier: exact and statistical verification that a speculative decoder preserves its
target model's distribution.  See README.md and docs/ARCHITECTURE.md.

Importing ``verifier`` is cheap and torch-free: the error classes load eagerly, everything else
(which pulls in torch, scipy, statsmodels) loads on first attribute access.  The pytest plugin
relies on this, so a broken torch install cannot break an unrelated pytest run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from verifier._lazy import lazy_names
from verifier.errors import (
    ConfigError,
    DecoderError,
    DecoderOutputError,
    InvalidArgumentError,
    ModelLoadError,
    ReportWriteError,
    VerifierError,
)

__version__ = "0.1.0"

# public name -> module that defines it (loaded lazily by __getattr__)
_LAZY = {
    # contracts
    "PADDING_TOKEN_ID": "verifier.protocols",
    "Decoder": "verifier.protocols",
    "DecoderStats": "verifier.protocols",
    "VerificationKernel": "verifier.protocols",
    "SamplingConfig": "verifier.sampling",
    "processed_probs": "verifier.sampling",
    "check_emitted_tokens": "verifier.validation",
    # exact stage
    "RULES": "verifier.exact",
    "TabularLM": "verifier.exact",
    "step_law": "verifier.exact",
    "round_law": "verifier.exact",
    "n_token_law": "verifier.exact",
    "target_law": "verifier.exact",
    "run_exact_stage": "verifier.exact",
    "standard_tabular_pairs": "verifier.exact",
    # models and decoders
    "load_model": "verifier.models",
    "shipped_checkpoint": "verifier.models",
    "TabularCausalLM": "verifier.models",
    "AncestralDecoder": "verifier.decoders",
    "SpeculativeDecoder": "verifier.decoders",
    "TargetScorer": "verifier.decoders",
    "make_decoder": "verifier.decoders",
    "verify_chain": "verifier.decoders",
    # test-suite API
    "assert_preserves_target": "verifier.api",
    "check_preserves_target": "verifier.api",
    "min_num_samples": "verifier.api",
    "min_detectable_effect": "verifier.api",
    "PreservationResult": "verifier.api",
    "PreservationError": "verifier.api",
}

__all__ = sorted(
    [
        "ConfigError",
        "DecoderError",
        "DecoderOutputError",
        "InvalidArgumentError",
        "ModelLoadError",
        "ReportWriteError",
        "VerifierError",
        *_LAZY,
    ]
)


__getattr__, __dir__ = lazy_names("verifier", _LAZY, globals())


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs
    from verifier.api import (
        PreservationError,
        PreservationResult,
        assert_preserves_target,
        check_preserves_target,
        min_detectable_effect,
        min_num_samples,
    )
    from verifier.decoders import AncestralDecoder, SpeculativeDecoder, TargetScorer, make_decoder, verify_chain
    from verifier.exact import (
        RULES,
        TabularLM,
        n_token_law,
        round_law,
        run_exact_stage,
        standard_tabular_pairs,
        step_law,
        target_law,
    )
    from verifier.models import TabularCausalLM, load_model, shipped_checkpoint
    from verifier.protocols import PADDING_TOKEN_ID, Decoder, DecoderStats, VerificationKernel
    from verifier.sampling import SamplingConfig, processed_probs
    from verifier.validation import check_emitted_tokens
