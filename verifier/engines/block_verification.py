"""Exact law of one block-verification round (Sun et al. 2024, Algorithm 2), in fractions.

SGLang's ``block_verification=True`` implements this rule.  It is lossless (the emitted tokens,
continued by target sampling, follow the target) but it is *not* the canonical token-wise rule: it
accepts longer prefixes, so its accepted-count law differs from
:meth:`verifier.audit.kernel_audit.KernelCase.accepted_count_law`.  This enumerator gives the exact
emitted-token law and accepted-count law on independent positions (a :class:`KernelCase`), so the
kernel audit can state an engine's acceptance against the rule it claims, separately from bias.

Rule, with ``p_j, q_j`` the target and draft rows of position ``j = 1..k`` and drafts ``x_j``::

    w_0 = 1,   w_i = min(w_{i-1} * p_i(x_i) / q_i(x_i), 1)
    h_k = w_k;  h_i = r_i / (r_i + 1 - w_i),  r_i = sum_v max(w_i p_{i+1}(v) - q_{i+1}(v), 0)   (i < k)
    (h_i = w_i when w_i is 0 or 1)
    for eta = k, k-1, ..., 1: accept a prefix of length eta with prob h_eta (first success wins); else eta = 0
    next token ~ p_{k+1} if eta = k, else max(w_eta p_{eta+1} - q_{eta+1}, 0) normalised.
"""

from __future__ import annotations

import itertools
from fractions import Fraction
from typing import Sequence

__all__ = ["block_verification_law", "block_accepted_count_law"]


def block_verification_law(target_rows: Sequence[Sequence[Fraction]], draft_rows: Sequence[Sequence[Fraction]]) -> dict[tuple[int, ...], Fraction]:
    """Exact law of the emitted tokens of one block-verification round.

    Parameters
    ----------
    target_rows : sequence of k + 1 rows of Fraction, shape (num_draft_tokens + 1, vocab)
    draft_rows : sequence of k rows of Fraction, shape (num_draft_tokens, vocab)

    Returns
    -------
    dict of tuple to Fraction
        Emitted tuples (accepted drafts then the recovered or bonus token), lengths 1..k+1.

    Examples
    --------
    >>> F = Fraction
    >>> law = block_verification_law([[F(1, 5), F(4, 5)]] * 2, [[F(1, 2), F(1, 2)]])
    >>> sum(law.values()), sum(v for t, v in law.items() if t[0] == 0)  # first emitted token ~ target
    (Fraction(1, 1), Fraction(1, 5))
    """
    k, vocab = len(draft_rows), len(target_rows[0])
    law: dict[tuple[int, ...], Fraction] = {}
    for drafts in itertools.product(range(vocab), repeat=k):
        prob_drafts = Fraction(1)
        for row, x in zip(draft_rows, drafts):
            prob_drafts *= row[x]
        if prob_drafts == 0:
            continue
        weight = [Fraction(1)]
        for i, x in enumerate(drafts):
            weight.append(min(weight[-1] * target_rows[i][x] / draft_rows[i][x], Fraction(1)))
        remaining = Fraction(1)
        for eta in list(range(k, 0, -1)) + [0]:
            if eta == 0:
                stop = remaining
            elif eta == k or weight[eta] in (0, 1):
                stop = remaining * weight[eta]
            else:
                r = sum(max(weight[eta] * target_rows[eta][v] - draft_rows[eta][v], 0) for v in range(vocab))
                stop = remaining * r / (r + 1 - weight[eta])
            remaining -= stop
            if stop == 0:
                continue
            if eta == k:
                residual = list(target_rows[k])
            else:
                residual = [max(weight[eta] * target_rows[eta][v] - draft_rows[eta][v], 0) for v in range(vocab)]
            total = sum(residual)
            for y, mass in enumerate(residual):
                if mass:
                    key = tuple(drafts[:eta]) + (y,)
                    law[key] = law.get(key, Fraction(0)) + prob_drafts * stop * mass / total
    return law


def block_accepted_count_law(target_rows: Sequence[Sequence[Fraction]], draft_rows: Sequence[Sequence[Fraction]]) -> tuple[Fraction, ...]:
    """Exact law of the accepted count ``m = 0..k`` of one block-verification round.

    Examples
    --------
    >>> F = Fraction
    >>> block_accepted_count_law([[F(1, 5), F(1, 2), F(3, 10)]] * 2, [[F(1, 2), F(3, 10), F(1, 5)]])
    (Fraction(3, 10), Fraction(7, 10))
    """
    law = block_verification_law(target_rows, draft_rows)
    k = len(draft_rows)
    return tuple(sum((v for t, v in law.items() if len(t) == m + 1), Fraction(0)) for m in range(k + 1))
