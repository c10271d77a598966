"""Exact laws used as expected values by the statistics tests.

Single-step output laws are computed with ``fractions.Fraction`` from the rule definitions in
the seeds (Leviathan et al. 2023, Algorithm 1): accepted mass ``min(p, q)``, then either the
residual (canonical) or the full target (the full-p-fallback mutant) after a rejection.
"""

from __future__ import annotations

from fractions import Fraction

from verifier.exact.tabular import as_fraction_probs


def full_p_fallback_law(target, draft) -> tuple[float, ...]:
    """Output law of the full-p-fallback mutant: ``min(p, q) + (1 - sum min(p, q)) * p``, as float64."""
    p, q = as_fraction_probs(target, name="target"), as_fraction_probs(draft, name="draft")
    accepted = [min(a, b) for a, b in zip(p, q)]
    rejection = 1 - sum(accepted, Fraction(0))
    return tuple(float(a + rejection * t) for a, t in zip(accepted, p))
