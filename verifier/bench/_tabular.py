"""Exact laws of suite sample sets on tabular model pairs, for simulating them without a decoder.

A sample set on a :class:`~verifier.exact.TabularLM` pair under a sampling config samples from the
*processed* tables; :func:`processed_tabular` builds them as exact rationals (float64 processed
probs converted exactly and renormalised -- the decoders' own float64 rows, up to rounding), and
:func:`tokens_and_accepted_law` gives the joint law of (first N emitted tokens, accepted drafts of
the first round) that a decoder following a rule produces.
"""

from __future__ import annotations

from collections import defaultdict
from fractions import Fraction

from verifier.exact import TabularLM, get_rule, n_token_law
from verifier.protocols import PADDING_TOKEN_ID
from verifier.models.tabular import processed_tabular  # re-exported for the benchmarks

__all__ = ["processed_tabular", "tokens_and_accepted_law", "marginal_tokens"]


def tokens_and_accepted_law(target: TabularLM, draft: TabularLM, prefix: tuple[int, ...], num_draft_tokens: int,
                            num_tokens: int, rule: str = "canonical") -> dict[tuple[tuple[int, ...], int], Fraction]:
    """Joint law of (first ``num_tokens`` emitted tokens, -1 padded; drafts accepted in round 1).

    The first round comes from the enumerator's round outcomes (:mod:`verifier.exact.laws`, which
    carries the accepted count); what later rounds emit is :func:`verifier.exact.n_token_law` after
    the first round's tokens.  Its token marginal equals ``n_token_law(..., num_tokens, rule)``.
    """
    from verifier.exact.laws import _round_outcomes  # the one enumerator; the public laws drop the accepted count

    r = get_rule(rule)
    eos = target.eos_token_id
    law: dict = defaultdict(Fraction)
    for emitted, accepted, prob in _round_outcomes(target, draft, tuple(prefix), num_draft_tokens, r):
        first = emitted
        if eos is not None and eos in first:
            first = first[: first.index(eos) + 1]
        first = first[:num_tokens]
        if len(first) == num_tokens or (eos is not None and first[-1] == eos):
            law[(first + (PADDING_TOKEN_ID,) * (num_tokens - len(first)), accepted)] += prob
            continue
        rest = n_token_law(target, draft, tuple(prefix) + first, num_draft_tokens, num_tokens - len(first), r)
        for cont, pc in rest.items():
            law[(first + cont, accepted)] += prob * pc
    return dict(law)


def marginal_tokens(law: dict) -> dict[tuple[int, ...], Fraction]:
    """Token-tuple marginal of a :func:`tokens_and_accepted_law` law."""
    out: dict = defaultdict(Fraction)
    for (tokens, _), p in law.items():
        out[tokens] += p
    return dict(out)
