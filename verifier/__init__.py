"""spec-verifier: exact and statistical verification that a speculative decoder preserves its
target model's distribution.  See README.md and docs/ARCHITECTURE.md."""

from verifier.errors import (
    ConfigError,
    DecoderError,
    DecoderOutputError,
    InvalidArgumentError,
    ModelLoadError,
    ReportWriteError,
    VerifierError,
)
from verifier.protocols import PADDING_TOKEN_ID, Decoder, DecoderStats, VerificationKernel
from verifier.sampling import SamplingConfig, processed_probs

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "Decoder",
    "DecoderError",
    "DecoderOutputError",
    "DecoderStats",
    "InvalidArgumentError",
    "ModelLoadError",
    "PADDING_TOKEN_ID",
    "ReportWriteError",
    "SamplingConfig",
    "VerificationKernel",
    "VerifierError",
    "processed_probs",
]
