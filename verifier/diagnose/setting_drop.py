"""The request without one processor group: the settings the request-setting laws drop (issue 26).

Pure functions over :class:`verifier.sampling.SamplingConfig`, shared by the setting laws
(:mod:`verifier.diagnose.setting_laws`) and the exact penalty finding (:mod:`verifier.diagnose.penalty`), which ranks the
same laws by enumeration.  The law names and sentences: :data:`verifier.diagnose.glossary.SETTINGS`.
"""

from __future__ import annotations

from dataclasses import replace

from verifier.diagnose.glossary import SETTINGS
from verifier.sampling import SamplingConfig

__all__ = ["without", "candidates"]


def without(sampling: SamplingConfig, name: str) -> SamplingConfig | None:
    """The request ``sampling`` with the processor group of hypothesis ``name`` removed; None when it has none."""
    if sampling.greedy:
        return None
    if name == "temperature_ignored":
        return replace(sampling, temperature=1.0) if float(sampling.temperature) != 1.0 else None
    if name == "top_k_top_p_ignored":
        return replace(sampling, top_k=None, top_p=None) if (sampling.top_k is not None or sampling.top_p is not None) else None
    if name == "penalties_ignored":
        return (replace(sampling, repetition_penalty=None, presence_penalty=None, frequency_penalty=None)
                if sampling.uses_context else None)
    if name == "min_p_ignored":
        return replace(sampling, min_p=None) if sampling.min_p else None
    raise KeyError(name)


def candidates(samplings) -> list[str]:
    """The setting laws worth ranking for sets with these requests: a group present in some set whose removal is not
    the unprocessed target in every set where it is present (that law is ``target_unprocessed``)."""
    out = []
    for name in SETTINGS:
        reduced = [r for r in (without(s, name) for s in samplings) if r is not None]
        if reduced and any(r != SamplingConfig() for r in reduced):
            out.append(name)
    return out
