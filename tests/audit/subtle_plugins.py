"""Decoders with subtle defects that the first `specverify audit` missed (issue: one audit pipeline).

Each is the reference speculative decoder with one change; used as plugins ``tests/audit/subtle_plugins.py:make_*``.
"""

from __future__ import annotations

import dataclasses

from verifier.decoders.speculative import SpeculativeDecoder
from verifier.sampling import processed_probs


class TemperatureScaled(SpeculativeDecoder):
    """Samples at ``scale`` times the requested temperature (a config-plumbing bug): its law is the
    target's at T * scale, so its exact TV comes from the target's laws at both temperatures."""

    def __init__(self, target, draft, num_draft_tokens, scale):
        super().__init__(target, draft, num_draft_tokens, name=f"temperature-x{scale:g}")
        self.scale = float(scale)

    def generate(self, prompt_ids, num_samples, max_new_tokens, sampling, seed):
        scaled = dataclasses.replace(sampling, temperature=sampling.temperature * self.scale)
        return super().generate(prompt_ids, num_samples, max_new_tokens, scaled, seed)


class StalePenalty(SpeculativeDecoder):
    """Repetition-penalty state updated once per round instead of per token: the target's k + 1
    positions are all processed with the context of the round's start (drafts accepted earlier in
    the round do not count as seen)."""

    def _target_probs(self, logits, sampling, seen):
        stale = None if seen is None else seen[:, :1].expand_as(seen)  # BUG: should be `seen`
        return processed_probs(logits, sampling, stale)


class SeedIgnoring(SpeculativeDecoder):
    """Draws every call with seed 0, whatever seed it is given."""

    def generate(self, prompt_ids, num_samples, max_new_tokens, sampling, seed):
        return super().generate(prompt_ids, num_samples, max_new_tokens, sampling, 0)


def make_temperature_scaled(target, draft, num_draft_tokens, scale=1.1):
    return TemperatureScaled(target, draft, num_draft_tokens, scale)


def make_stale_penalty(target, draft, num_draft_tokens):
    return StalePenalty(target, draft, num_draft_tokens, name="stale-penalty")


def make_seed_ignoring(target, draft, num_draft_tokens):
    return SeedIgnoring(target, draft, num_draft_tokens, name="seed-ignoring")


def exact_tv(target_ref, prompt, sampling, scale: float, num_tokens: int) -> float:
    """Exact TV between the target's law of the first ``num_tokens`` tokens at T and at T * scale
    (float64 laws enumerated from the processed probs, :func:`verifier.runner.expected.position_laws`;
    the TV by :func:`verifier.exact.total_variation`)."""
    from verifier.exact import total_variation
    from verifier.runner.expected import position_laws

    def law(s):
        laws = position_laws(target_ref, tuple(prompt), s, 1, num_tokens if num_tokens >= 2 else 0)
        return laws.joint if num_tokens >= 2 else laws.marginals[1]

    scaled = dataclasses.replace(sampling, temperature=sampling.temperature * scale)
    return float(total_variation(list(law(sampling)), list(law(scaled))))


__all__ = ["TemperatureScaled", "StalePenalty", "SeedIgnoring", "make_temperature_scaled", "make_stale_penalty",
           "make_seed_ignoring", "exact_tv"]
