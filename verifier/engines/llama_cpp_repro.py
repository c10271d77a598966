"""Exact minimal reproduction of llama.cpp's ``llama-speculative`` verification step (commit 0c1e570).

:func:`speculative_step_law` is the output law, in exact fractions, of one drafted position of
``examples/speculative/speculative.cpp`` with one draft sequence (``-np 1``), written line by line
after the C++ so each defect can be switched on and off alone:

``draft_token``
    ``"most_probable"`` (as shipped): the draft loop calls ``common_sampler_sample`` (which samples a
    token into ``cur_p->selected``), then ``common_sampler_get_candidates(smpl, true)`` sorts the
    candidates by prob and the draft token is ``cur_p->data[0].id`` -- the draft's *most probable*
    token, not the sampled one -- while the acceptance test ``r <= p_tgt / p_dft`` uses the draft's
    softmax prob of it.  This is the bug zoo's ``greedy_draft`` rule.
    ``"sampled"`` (control): ``cur_p->data[cur_p->selected].id``.
``residual``
    ``"by_index"`` (as shipped): on rejection both candidate arrays are sorted by token id and the
    residual is ``max(0, dist_tgt[i].p - dist_dft[i].p)`` for the same *array index* i.  Without
    truncation both arrays hold the whole vocabulary and index = id; once top-k / top-p cut them,
    the arrays hold different token sets and the draft prob of another token is subtracted.
    ``"by_id"`` (control): subtract the draft prob of the same token id.

Candidate arrays are the tokens with a non-zero processed prob (what the sampler chain keeps).

>>> from fractions import Fraction as F
>>> p, q = [F(1, 2), F(1, 3), F(1, 6)], [F(1, 6), F(1, 2), F(1, 3)]
>>> [str(v) for v in speculative_step_law(p, q)]  # as shipped: token 1 always drafted, accepted w.p. 2/3
['1/3', '2/3', '0']
>>> speculative_step_law(p, q, draft_token="sampled") == p
True
"""

from __future__ import annotations

from fractions import Fraction
from typing import Sequence

__all__ = ["speculative_step_law"]


def _residual(target: list[tuple[int, Fraction]], draft: list[tuple[int, Fraction]], mode: str) -> dict[int, Fraction]:
    """speculative.cpp lines 334-357: residual over the target's candidates (both sorted by id)."""
    draft_by_id = dict(draft)
    out = {}
    for i, (tok, p) in enumerate(target):
        if mode == "by_index":
            q = draft[i][1] if i < len(draft) else Fraction(0)
        else:
            q = draft_by_id.get(tok, Fraction(0))
        out[tok] = max(Fraction(0), p - q)
    total = sum(out.values())
    return {t: v / total for t, v in out.items()} if total else out


def speculative_step_law(target_probs: Sequence, draft_probs: Sequence, *, draft_token: str = "most_probable",
                         residual: str = "by_index") -> list[Fraction]:
    """Exact output law of one drafted position of ``llama-speculative`` (k = 1 draft sequence).

    Parameters
    ----------
    target_probs, draft_probs : sequence of rationals, shape (vocab,)
        Processed target and draft probs at the position (after temperature / top-k / top-p);
        zero entries are tokens the sampler chain cut.
    draft_token : {"most_probable", "sampled"}, default "most_probable" (as shipped)
    residual : {"by_index", "by_id"}, default "by_index" (as shipped)

    Returns
    -------
    list of Fraction, shape (vocab,)
        Probability of each emitted token (accepted draft or token from the residual).

    Raises
    ------
    ValueError
        If ``draft_token`` or ``residual`` is not one of the values above.
    """
    if draft_token not in ("most_probable", "sampled") or residual not in ("by_index", "by_id"):
        raise ValueError(f"draft_token={draft_token!r}, residual={residual!r}; allowed: most_probable|sampled, by_index|by_id")
    p = [Fraction(v) for v in target_probs]
    q = [Fraction(v) for v in draft_probs]
    target = [(t, v) for t, v in enumerate(p) if v > 0]  # sorted by id, as after the std::sort in the C++
    draft = [(t, v) for t, v in enumerate(q) if v > 0]
    if draft_token == "most_probable":
        top = max(range(len(q)), key=lambda t: (q[t], -t))  # first max after the stable sort by prob
        proposals = {top: Fraction(1)}
    else:
        proposals = {t: v for t, v in draft}
    law = [Fraction(0)] * len(p)
    for tok, weight in proposals.items():
        accept = min(Fraction(1), p[tok] / q[tok])  # r <= p_tgt / p_dft
        law[tok] += weight * accept
        for t, r in _residual(target, draft, residual).items():
            law[t] += weight * (1 - accept) * r
    return law
