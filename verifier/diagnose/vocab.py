"""Hypotheses of drafts in another vocabulary whose law needs a stated map or permutation (issue 26, issue 29 kind 7).

``q_permuted`` (the verifier reads q in another id order) and ``many_to_one_q_single`` (the ratio divides by the
sampled draft id's own q) are not in the diagnosis family (:mod:`verifier.diagnose.family`): their law depends on a
permutation of ``0..V-1`` or a draft-to-target map, ``V!`` or ``V^Vd`` candidates, which no fixed family can hold at a
Bonferroni price.  When the permutation or the map is *known* (read off the engine's code or its vocabulary files),
each is one hypothesis, tested here by its own likelihood ratio over the target: ``log LR >= log(1 / alpha)`` rejects
the target in its favour at level alpha (Ville's inequality; one hypothesis, no multiplicity).  When neither is known,
what the diagnosis can still say on such rows is "matches no known mechanism" (the best family member's own law is
rejected by its fit check; ``specverify bench diagnose-vocab``: 20 of 20 runs, never a wrong name).

The harness's draft is the same-vocabulary model; the mapped draft is rebuilt from it as
:func:`verifier.exact.vocab.map_draft` does (``q_D(d) = q(m(d)) w_d / Z``), at the processed q the views carry.

Glossary: see :mod:`verifier.protocols`.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from verifier.diagnose.likelihood import SequenceProbs, log_likelihood, target_log_likelihood
from verifier.diagnose.mechanisms import Mechanism, Views, _ratio, _residual
from verifier.errors import invalid_argument

__all__ = ["KNOWN_MODES", "known_vocab_mechanism", "known_log_lr"]

KNOWN_MODES = ("mapped", "many_to_one_q_single", "q_permuted")


def known_vocab_mechanism(mode: str, vocab_size: int, *, draft_to_target: Sequence[int] | None = None,
                          weights: Sequence[float] | None = None, permutation: Sequence[int] | None = None) -> Mechanism:
    """The float64 chain rule of a vocabulary mode with a stated map / permutation.

    Parameters
    ----------
    mode : {"mapped", "many_to_one_q_single", "q_permuted"}
    vocab_size : int
        V of the target.
    draft_to_target : sequence of int, optional
        The map m (Vd target ids); default the identity (``q_permuted``) or (0, 0, 1, ..., V - 2) (the map modes), as
        :func:`verifier.exact.vocab.default_map_for`.
    weights : sequence of float, optional
        Split weights ``w_d``; default equal within each target id.
    permutation : sequence of int, optional
        ``q_permuted``'s pi (``q_v[t] = q_T[pi[t]]``); default reversed.

    Returns
    -------
    Mechanism
        Named ``mode`` (``[pi]`` / ``[m]`` appended), declared exact for ``mapped``, else biased.

    Raises
    ------
    InvalidArgumentError
        Unknown mode, a bad map, weights or permutation (as :mod:`verifier.exact.vocab`).
    """
    from verifier.exact import vocab as V

    if mode not in KNOWN_MODES:
        raise invalid_argument("mode", mode, "one of " + ", ".join(KNOWN_MODES))
    m = np.array(V._map_iv(V.default_map_for(mode, vocab_size) if draft_to_target is None else draft_to_target, vocab_size))
    w = np.array([float(x) for x in V._weights_iv(weights, tuple(int(t) for t in m))])
    pi = np.array(V._permutation_iv(permutation, vocab_size)) if mode == "q_permuted" else None

    def draft_ids(v: Views) -> tuple[np.ndarray, np.ndarray]:
        """(q_D (batch, Vd), q_T (batch, V)): the mapped draft rebuilt from the views' q."""
        mass = v.q[:, m] * w
        q_d = mass / mass.sum(axis=-1, keepdims=True)
        q_t = np.zeros_like(v.q)
        np.add.at(q_t.T, m, q_d.T)
        return q_d, q_t

    def verified(v: Views) -> np.ndarray:
        q_t = draft_ids(v)[1]
        return q_t if pi is None else q_t[:, pi]

    def acceptance(v: Views) -> np.ndarray:
        if mode != "many_to_one_q_single":  # u * q_v < p: min(1, p / q_v), and 1 where q_v = 0 < p (the kernels' test)
            qv = verified(v)
            return np.where(qv > 0, _ratio(v.p, qv), (v.p > 0).astype(np.float64))
        q_d, q_t = draft_ids(v)  # P(accept | t proposed) = sum_{d: m(d) = t} q_D(d) / q_T(t) * min(1, p(t) / q_D(d))
        share = np.where(q_d > 0, q_d * np.minimum(1.0, v.p[:, m] / np.where(q_d > 0, q_d, 1.0)), 0.0)
        out = np.zeros_like(v.p)
        np.add.at(out.T, m, share.T)
        return np.where(q_t > 0, out / np.where(q_t > 0, q_t, 1.0), 0.0)

    label = "" if mode == "mapped" else (f"[pi={list(pi)}]" if pi is not None else f"[m={list(m)}]")
    return Mechanism(mode + label, "exact" if mode == "mapped" else "biased",
                     f"a draft over its own ids (map {list(m)}), mode {mode}",
                     propose=lambda v: draft_ids(v)[1], acceptance=acceptance,
                     recover=lambda v: _residual(v.p, verified(v)), aliases=())


def known_log_lr(mechanism: Mechanism, seqs: SequenceProbs, num_draft_tokens: int) -> float:
    """``log LR`` of a stated hypothesis over the target on these rows (nats; rows weighted by their multiplicity).

    ``>= log(1 / alpha)`` rejects the target in the hypothesis' favour at level alpha (one hypothesis).
    """
    w = seqs.row_weights
    ll = log_likelihood(mechanism, seqs, num_draft_tokens)
    ll_t = target_log_likelihood(seqs)
    with np.errstate(invalid="ignore"):
        return float((w * (ll - ll_t)).sum())
