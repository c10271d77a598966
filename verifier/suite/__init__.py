"""Suites: the strict, versioned TOML schema that declares a verification run (see :mod:`.schema`)."""

from verifier.suite.schema import (
    BUILTIN_PROFILES,
    DEFAULT_TESTS,
    SCHEMA_VERSION,
    TEST_NAMES,
    DecoderSpec,
    ModelPair,
    Profile,
    Prompt,
    StatsSettings,
    Suite,
    load_suite,
    parse_suite,
)

__all__ = [
    "BUILTIN_PROFILES",
    "DEFAULT_TESTS",
    "SCHEMA_VERSION",
    "TEST_NAMES",
    "DecoderSpec",
    "ModelPair",
    "Profile",
    "Prompt",
    "StatsSettings",
    "Suite",
    "load_suite",
    "parse_suite",
]
