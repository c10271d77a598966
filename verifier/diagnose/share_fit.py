"""Maximum-likelihood shares of a mixture of predicted laws (EM), for a named hypothesis's own fit check.

A mixture hypothesis of :mod:`verifier.diagnose.engine_laws` says each row comes from one of several component laws
(and the target's) in unknown shares ``w`` on the simplex; a single law contaminated by the target
(:mod:`verifier.diagnose.robust`) is the two-component case ``(1 - eps) P_m + eps P_target``.  The ranking scores
them as a Bayes mixture over a grid of shares (an e-value), but a goodness-of-fit check at the best *grid* point is
miscalibrated at large n: when the true shares lie between grid points (vLLM's uniform class at 0.008 on a grid of
0.05), the grid point's law differs from the truth by far more than the sampling error, and a correct hypothesis is
rejected far more often than the check's level.  The check therefore runs at the maximum-likelihood shares, with the
chi-square's degrees of freedom reduced by the number of free shares (components - 1); a share fitted to 0 on the
boundary still counts as fitted, which makes the check conservative there (Chernoff & Lehmann 1954: with the
parameters fitted on the ungrouped rows the statistic lies between chi-square(bins - 1 - fitted) and
chi-square(bins - 1)).

EM (Dempster, Laird & Rubin 1977) on the distinct rows: the responsibility of component c for row i is
``w_c P_c(x_i) / sum_d w_d P_d(x_i)``; the new share is the row-weighted mean responsibility.  Each step does not
decrease the log-likelihood, which is concave in ``w`` (a log of a linear function), so the fixed point is the
global maximum over the simplex.

References
----------
Dempster, A. P., Laird, N. M., Rubin, D. B. (1977). Maximum likelihood from incomplete data via the EM algorithm.
Chernoff, H., Lehmann, E. L. (1954). The use of maximum likelihood estimates in chi-square tests for goodness of fit.
"""

from __future__ import annotations

import numpy as np

__all__ = ["mle_shares", "EM_MAX_ITER", "EM_TOL"]

EM_MAX_ITER = 5000  # EM steps at most (a share converging to the boundary 0 moves sublinearly)
EM_TOL = 1e-9  # stop when one step gains less than this many nats of log-likelihood


def mle_shares(component_ll: np.ndarray, weights: np.ndarray, *, max_last: float = 1.0) -> tuple[np.ndarray, float]:
    """Maximum-likelihood shares of a mixture whose component log-likelihoods per row are known.

    Parameters
    ----------
    component_ll : np.ndarray, shape (rows, components), float64
        ``log P_c(x_i)`` of each distinct row under each component law; ``-inf`` where a component cannot emit it.
        Rows no component can emit say nothing about the shares and are left out.
    weights : np.ndarray, shape (rows,), float64
        How many observed rows each distinct row stands for.
    max_last : float, default 1.0
        Upper bound on the last component's share (the target's, in a contamination mixture whose grid stops at
        ``max(EPS_GRID)``).  Only with two components, where the log-likelihood is concave in that one share and
        the bounded maximum is the unbounded one clipped.

    Returns
    -------
    (shares, log-likelihood)
        shares : np.ndarray, shape (components,), non-negative, summing to 1;
        log-likelihood : nats, ``sum_i weights_i log sum_c shares_c P_c(x_i)`` over the rows some component can
        emit (``-inf`` when there is none).

    Raises
    ------
    ValueError
        When ``max_last < 1`` with more than two components (a bounded share needs the one-dimensional case), or the
        shapes disagree.

    Examples
    --------
    >>> ll = np.log(np.array([[0.5, 0.25], [0.5, 0.75]]))  # two rows, laws A = (0.5, 0.5), B = (0.25, 0.75)
    >>> shares, _ = mle_shares(ll, np.array([30.0, 70.0]))
    >>> [round(float(s), 3) for s in shares]  # 0.5 a + 0.25 (1 - a) = 0.3: a = 0.2
    [0.2, 0.8]
    """
    ll = np.asarray(component_ll, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    if ll.ndim != 2 or w.shape != (ll.shape[0],):
        raise ValueError(f"component_ll shape {ll.shape} and weights shape {w.shape}: expected (rows, components) "
                         "and (rows,)")
    parts = ll.shape[1]
    if max_last < 1.0 and parts != 2:
        raise ValueError(f"max_last={max_last!r} with {parts} components: a bounded share needs exactly 2 components")
    ok = np.isfinite(ll).any(axis=1) & (w > 0)
    ll, w = ll[ok], w[ok]
    if not len(ll):
        return np.full(parts, 1.0 / parts), -np.inf
    shift = ll.max(axis=1, keepdims=True)
    lik = np.exp(ll - shift)  # (rows, components), each row scaled so its largest component is 1
    const, n = float(w @ shift[:, 0]), float(w.sum())
    shares = np.full(parts, 1.0 / parts)  # interior start: a share started at 0 would stay there
    prev = -np.inf
    for _ in range(EM_MAX_ITER):
        mix = np.maximum(lik @ shares, np.finfo(np.float64).tiny)
        total = float(w @ np.log(mix))
        if total - prev < EM_TOL:
            break
        prev = total
        shares = shares * ((w / mix) @ lik) / n  # the row-weighted mean responsibility of each component
    if parts == 2 and shares[1] > max_last:
        shares = np.array([1.0 - max_last, max_last])
    shares = shares / shares.sum()
    mix = np.maximum(lik @ shares, np.finfo(np.float64).tiny)
    return shares, float(w @ np.log(mix)) + const
