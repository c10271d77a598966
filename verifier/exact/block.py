"""Block verification (Sun et al. 2024): a round-level verification rule, enumerated exactly.

Token-wise verification (the canonical rule) accepts each draft token on its own with
``min(1, p/q)``.  Block verification decides the whole draft block jointly: it carries a running
weight ``w_i`` along the drafted path and, scanning all positions, keeps the *last* position whose
coin accepts, so a rejection early in the block can be overruled by the tokens after it.  It is
not a per-position rule (the decision at position i depends on positions after i), so its law is
enumerated here round by round and plugged into :mod:`verifier.exact.laws` through
:attr:`verifier.exact.rules.Rule.round_outcomes`.

Algorithm (Sun et al. 2024, Algorithm 2), for drafts ``x_1..x_k`` with target probs ``p_i`` and
draft probs ``q_i`` at position i (each conditioned on ``x_1..x_{i-1}``)::

    w_0 = 1
    w_i = min(1, w_{i-1} * p_i(x_i) / q_i(x_i))                      i = 1..k
    r_i = sum_y max(0, w_i * p_{i+1}(y) - q_{i+1}(y))                 i = 0..k-1
    h_i = r_i / (r_i + 1 - w_i)   (i < k),   h_k = w_k
    tau = the largest i in 1..k with eta_i < h_i (eta_i ~ U[0, 1) independent), else 0
    emit x_1..x_tau, then
        the bonus token ~ p_{k+1}                          when tau = k
        the recovered token ~ max(0, w_tau p_{tau+1} - q_{tau+1}) / r_tau   otherwise

So ``P(tau = i) = h_i * prod_{j > i} (1 - h_j)`` (``h_0 := 1``).  Degenerate ``0/0``: when
``w_i = 1`` and ``p_{i+1} == q_{i+1}`` (``r_i = 0``) we take ``h_i = 1`` and the recovered token
from ``p_{i+1}`` itself, the limit the float kernel
(:func:`verifier.decoders.lossless.block_verification_kernel`, via
:func:`~verifier.decoders.kernels.residual_or_target`) also takes; the exact stage checks that
this keeps the law exact.  A draft EOS at position ``m < k`` ends the block there (what follows
EOS is deterministic under both models), so ``h_m = w_m`` and an accepted EOS ends the round
with no bonus token.  For ``k = 1`` the rule is the canonical one.

References
----------
Sun, Mendlovic, Leviathan, Aharoni, Beirami, Ro, Suresh (2024), "Block Verification Accelerates
Speculative Decoding", arXiv:2403.10444 (ICLR 2025), Algorithm 2 and Theorem 2 (lossless, and
never fewer accepted tokens in expectation than token-wise verification).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Iterator

from verifier.exact.tabular import TabularLM

__all__ = ["block_round_outcomes", "block_weights"]


def block_weights(target_rows, draft_rows, drafts) -> tuple[list[Fraction], list[Fraction]]:
    """Weights ``w_0..w_m`` and stop probabilities ``h_1..h_m`` of one drafted block.

    Parameters
    ----------
    target_rows : sequence of probs, length m + 1
        ``p_1..p_{m+1}``: target probs at each draft position and the one after (row ``m`` is only
        read when ``m`` is not the last position of the block, see ``drafts``).
    draft_rows : sequence of probs, length m + 1 (row ``m`` may be None)
        ``q_1..q_{m+1}``; row ``m`` is needed only like ``target_rows[m]``.
    drafts : sequence of int, length m
        The drafted tokens; the last one ends the block (``h_m = w_m``).

    Returns
    -------
    (w, h) : lists of Fraction, lengths m + 1 and m + 1 (``h[0]`` unused, set to 1)
    """
    m = len(drafts)
    w = [Fraction(1)]
    for i, x in enumerate(drafts):
        w.append(min(Fraction(1), w[-1] * target_rows[i][x] / draft_rows[i][x]))
    h = [Fraction(1)]
    for i in range(1, m + 1):
        if i == m:
            h.append(w[m])
            continue
        r = _residual_mass(w[i], target_rows[i], draft_rows[i])
        denom = r + 1 - w[i]
        h.append(r / denom if denom else Fraction(1))
    return w, h


def _residual_mass(weight: Fraction, target_row, draft_row) -> Fraction:
    return sum((max(Fraction(0), weight * p - q) for p, q in zip(target_row, draft_row)), Fraction(0))


def _recovered(weight: Fraction, target_row, draft_row) -> tuple[Fraction, ...]:
    deficit = [max(Fraction(0), weight * p - q) for p, q in zip(target_row, draft_row)]
    total = sum(deficit, Fraction(0))
    if total == 0:  # degenerate 0/0 (weight 1 and p == q): the target row itself
        return tuple(target_row)
    return tuple(d / total for d in deficit)


def _draft_blocks(draft: TabularLM, prefix: tuple[int, ...], k: int) -> Iterator[tuple[tuple[int, ...], Fraction]]:
    """Every draft block (k tokens, or fewer ending at EOS) with its draft probability."""
    eos = draft.eos_token_id

    def grow(block: tuple[int, ...], prob: Fraction):
        if len(block) == k or (block and block[-1] == eos):
            yield block, prob
            return
        for x, qx in enumerate(draft.probs(prefix + block)):
            if qx:
                yield from grow(block + (x,), prob * qx)

    yield from grow((), Fraction(1))


def block_round_outcomes(target: TabularLM, draft: TabularLM, prefix: tuple[int, ...], k: int,
                         rule=None) -> Iterator[tuple[tuple[int, ...], int, Fraction]]:
    """Yield ``(emitted tokens, accepted drafts tau, probability)`` of one block-verification round.

    Same contract as the canonical enumerator in :mod:`verifier.exact.laws` (emitted tuples not
    yet cut at EOS or a length limit; outcomes may repeat).  ``rule`` is ignored (the signature of
    :attr:`verifier.exact.rules.Rule.round_outcomes`).
    """
    eos = target.eos_token_id
    for block, q_block in _draft_blocks(draft, prefix, k):
        m = len(block)
        contexts = [prefix + block[:i] for i in range(m + 1)]
        p_rows = [target.probs(c) for c in contexts[:m]] + [target.probs(contexts[m]) if block[-1] != eos else None]
        q_rows = [draft.probs(c) for c in contexts[:m]] + [None]
        w, h = block_weights(p_rows, q_rows, block)
        later_reject = Fraction(1)  # prod_{j > i} (1 - h_j), built from i = m down to 0
        for tau in range(m, -1, -1):
            prob = q_block * h[tau] * later_reject if tau else q_block * later_reject
            later_reject *= (1 - h[tau]) if tau else 1
            if not prob:
                continue
            kept = block[:tau]
            if tau == m and block[-1] == eos:  # an accepted EOS ends the sequence: no bonus
                yield kept, tau, prob
            elif tau == m:  # all k drafts accepted: bonus token from the target after the block
                for y, py in enumerate(p_rows[m]):
                    if py:
                        yield kept + (y,), tau, prob * py
            else:
                for y, ry in enumerate(_recovered(w[tau], p_rows[tau], q_rows[tau])):
                    if ry:
                        yield kept + (y,), tau, prob * ry
