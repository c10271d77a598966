"""Exact reproduction of OpenVINO GenAI's speculative validation step (``Sampler::validate_candidate``).

Source: ``openvinotoolkit/openvino.genai`` ``src/cpp/src/sampling/sampler.cpp`` (read at master da1db864d,
version 2026.4.0.0; the audited wheel 2026.4.1.0 reports commit ab01d1771e4 of ``releases/2026/4``, which the
available snapshot does not hold -- see ``reports/audits/openvino-genai-2026.4.1.0/FINDINGS.md``).

Glossary (this module): at the first drafted position the target's processed probs are ``p`` and the
draft's ``q`` (both after temperature / top-k / top-p, same prefix).  The draft proposes ``x ~ q``; the
target then draws a *fresh* token ``y ~ p`` (``_multinomial_sample``) and a threshold
``r = j / 100`` with ``j`` uniform on {0, ..., 100} (``std::uniform_int_distribution<>(0, 100)``).

As shipped, ``validate_candidate`` accepts ``x`` iff ``r <= q(x) / p(y)`` (the stored log prob of the
candidate is the draft's; the denominator is the target prob of ``y``, not of ``x``).  On a rejection
``sample_from_sequence_group`` ``continue``s to the next loop index, whose logits are the target's at the
*next* position, i.e. after the rejected ``x``, and emits a plain sample from them
(``get_p_prime`` only rescales the log prob it reports).  So the emitted token at the first drafted
position has the law

    law(z) = q(z) A(z) + sum_x q(x) (1 - A(x)) p_next[x](z),
    A(x)   = sum_y p(y) P(r <= q(x) / p(y)),   P(r <= c) = min(101, floor(100 c) + 1) / 101,

where ``p_next[x]`` is the target's processed law one position later, after ``x``.

The draft's candidate is not an independent ``q`` sample either: both pipelines' samplers are
``std::mt19937(GenerationConfig.rng_seed)`` (``RequestSamplerContext``, one per request in each pipeline), the
target draws token 1 from the prompt with its first uniform, and the draft, which samples nothing at the
prompt step, draws candidate 1 with *its* first uniform -- the same number.  So token 1 and candidate 1 are
``t1 = F_p1^-1(u)``, ``x1 = F_q^-1(u)`` for one ``u``: given ``t1``, ``u`` is uniform on ``t1``'s interval of
``p1``'s CDF and ``x1`` has the law :func:`inverse_cdf_law` of ``q`` on that interval, not ``q``.  The CDFs
are walked in token-id order without top-k / top-p, and by decreasing prob once top-p has sorted the kept
tokens (:func:`walk_order`).  (Replayed token by token from the engine's seeds in
:mod:`verifier.engines.reproductions.openvino_replay`.)

``rule="canonical"`` gives the lossless rule (accept iff ``u < p(x) / q(x)``, ``u ~ U(0, 1)``, residual
``max(p - q, 0)`` at the same position), whose law is ``p``.

>>> from fractions import Fraction as F
>>> p, q = [F(1, 2), F(1, 2), F(0)], [F(1, 4), F(1, 4), F(1, 2)]
>>> nxt = [[F(0), F(0), F(1)]] * 3            # after any candidate the target emits token 2
>>> # token 2 has target prob 0, yet q(2) / p(y) = 1 for every y: it is always accepted
>>> law, acc = validation_step_law(p, q, nxt)
>>> [str(v) for v in law], str(acc)            # token 2 (target prob 0) is emitted
(['51/404', '51/404', '151/202'], '76/101')
>>> validation_step_law(p, q, nxt, rule="canonical")[0] == p
True
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Sequence

import numpy as np

__all__ = ["THRESHOLD_STEPS", "accept_probability", "cdf_interval", "inverse_cdf_law", "validation_step_law",
           "validation_step_law_np", "walk_order"]

THRESHOLD_STEPS = 100  # r_i = dist(0, 100) / 100: 101 equally likely thresholds 0, 0.01, ..., 1


def accept_probability(ratio):
    """``P(j / 100 <= ratio)`` for ``j`` uniform on {0, ..., 100}: ``min(101, floor(100 ratio) + 1) / 101``.

    Exact for a :class:`~fractions.Fraction` or int ``ratio``; float64 otherwise (``ratio >= 0``).

    >>> str(accept_probability(Fraction(0))), str(accept_probability(Fraction(1, 2))), str(accept_probability(3))
    ('1/101', '51/101', '1')
    """
    steps = min(THRESHOLD_STEPS + 1, math.floor(ratio * THRESHOLD_STEPS) + 1)
    if isinstance(ratio, (Fraction, int)):
        return Fraction(steps, THRESHOLD_STEPS + 1)
    return steps / (THRESHOLD_STEPS + 1)


def validation_step_law(target_probs: Sequence, draft_probs: Sequence, next_target_probs: Sequence, *,
                        rule: str = "as_shipped"):
    """Exact law of the token emitted at the first drafted position (independent draws), in fractions.

    Parameters
    ----------
    target_probs, draft_probs : sequence of rationals, shape (vocab,)
        Processed target ``p`` and draft ``q`` probs at the position.
    next_target_probs : sequence of sequences, shape (vocab, vocab)
        Row ``x``: the target's processed probs one position later, after candidate ``x`` (rows with
        ``q(x) = 0`` are not read).
    rule : {"as_shipped", "canonical"}, default "as_shipped"

    Returns
    -------
    law : list of Fraction, shape (vocab,)
    acceptance : Fraction
        Probability that the candidate is accepted.

    Raises
    ------
    ValueError
        If ``rule`` is not one of the values above.
    """
    if rule not in ("as_shipped", "canonical"):
        raise ValueError(f"rule={rule!r}; allowed: 'as_shipped', 'canonical'")
    p = [Fraction(v) for v in target_probs]
    q = [Fraction(v) for v in draft_probs]
    V = len(p)
    law, acceptance = [Fraction(0)] * V, Fraction(0)
    if rule == "canonical":
        resid = [max(Fraction(0), a - b) for a, b in zip(p, q)]
        total = sum(resid)
    for x in range(V):
        if q[x] == 0:
            continue
        if rule == "as_shipped":
            a = sum((p[y] * accept_probability(q[x] / p[y]) for y in range(V) if p[y] > 0), Fraction(0))
            replacement = [Fraction(v) for v in next_target_probs[x]]
        else:
            a = min(Fraction(1), p[x] / q[x])
            replacement = [v / total for v in resid] if total else [Fraction(0)] * V
        law[x] += q[x] * a
        acceptance += q[x] * a
        for z in range(V):
            law[z] += q[x] * (1 - a) * replacement[z]
    return law, acceptance


def _accept_matrix(ratio: np.ndarray) -> np.ndarray:
    return np.minimum(THRESHOLD_STEPS + 1, np.floor(ratio * THRESHOLD_STEPS) + 1) / (THRESHOLD_STEPS + 1)


def walk_order(probs: np.ndarray, sorted_by_prob: bool) -> np.ndarray:
    """Token ids in the order ``_multinomial_sample`` walks the CDF: id order, or decreasing prob (top-p path).

    Only tokens with a non-zero prob are listed in the sorted order (TopPFilter drops the rest).
    """
    probs = np.asarray(probs, dtype=np.float64)
    if not sorted_by_prob:
        return np.arange(len(probs))
    kept = np.nonzero(probs > 0)[0]
    return kept[np.lexsort((kept, -probs[kept]))]


def inverse_cdf_law(probs: np.ndarray, order: np.ndarray, lo: float = 0.0, hi: float = 1.0) -> np.ndarray:
    """Law of ``F^-1(u)`` for ``u ~ U[lo, hi)``, ``F`` the CDF of ``probs`` walked in ``order``.

    Parameters
    ----------
    probs : ndarray, shape (vocab,)
    order : ndarray of int, shape (n,)
        Token ids in walk order (:func:`walk_order`).
    lo, hi : float, 0 <= lo < hi <= 1

    Returns
    -------
    ndarray, shape (vocab,)
        Sums to 1; equals ``probs`` (normalised) for ``lo, hi = 0, 1``.
    """
    probs = np.asarray(probs, dtype=np.float64)
    w = probs[order] / probs[order].sum()
    upper = np.cumsum(w)
    lower = upper - w
    overlap = np.clip(np.minimum(upper, hi) - np.maximum(lower, lo), 0.0, None)
    out = np.zeros(len(probs))
    out[order] = overlap / (hi - lo)
    return out


def cdf_interval(probs: np.ndarray, order: np.ndarray, token: int) -> tuple[float, float]:
    """The interval of ``u`` that ``F^-1`` maps to ``token`` (CDF of ``probs`` walked in ``order``)."""
    probs = np.asarray(probs, dtype=np.float64)
    w = probs[order] / probs[order].sum()
    upper = np.cumsum(w)
    i = int(np.nonzero(order == token)[0][0])
    return float(upper[i] - w[i]), float(upper[i])


def validation_step_law_np(p: np.ndarray, q: np.ndarray, next_p: np.ndarray, proposal: np.ndarray | None = None):
    """Float64 form of :func:`validation_step_law` (as shipped), for any law of the proposed candidate.

    Parameters
    ----------
    p, q : ndarray, shape (vocab,)
        Processed target and draft probs at the first drafted position (``q(x)`` is what the engine
        stores with the candidate and divides in the test).
    next_p : ndarray, shape (vocab, vocab)
        Row ``x``: the target's processed probs after candidate ``x`` (rows where the proposal is 0 are not read).
    proposal : ndarray, shape (vocab,), optional
        Law of the candidate actually proposed; default ``q`` (an independent draft sample).  With the
        shared seed it is :func:`inverse_cdf_law` of ``q`` on token 1's interval.

    Returns
    -------
    law : ndarray, shape (vocab,)
        Law of the emitted token.
    acceptance : float
        Probability that the candidate is accepted.
    """
    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    proposal = q if proposal is None else np.asarray(proposal, dtype=np.float64)
    pos = p > 0
    ratio = q[:, None] / np.where(pos, p, 1.0)[None, :]
    accept = (_accept_matrix(ratio) * np.where(pos, p, 0.0)[None, :]).sum(1)  # A(x), shape (vocab,)
    weight_accept = proposal * accept
    weight_reject = proposal * (1 - accept)
    rows = np.nonzero(weight_reject > 0)[0]
    law = weight_accept + weight_reject[rows] @ np.asarray(next_p, dtype=np.float64)[rows]
    return law, float(weight_accept.sum())
