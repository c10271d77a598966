"""Robust likelihood ratios: a mechanism that explains most rows survives a few it cannot explain.

Real engines rarely follow one zoo law exactly: a second defect, a rare code path or a numeric corner makes a few
emitted rows impossible (likelihood 0) under the mechanism that explains the rest, and one impossible row zeroes a
pure likelihood ratio (llama.cpp's greedy draft scored minus infinity because of its by-index residual).  The
diagnosis therefore scores each mechanism m as a mixture with a small contamination by the target:

    P_eps(x) = (1 - eps) P_m(x) + eps P_target(x)

and mixes over a fixed grid of eps with prior weights ``PRIOR`` (half on eps = 0):

    LR = sum_e PRIOR[e] prod_i P_e(x_i) / P_target(x_i) = sum_e PRIOR[e] prod_i ((1 - e) LR_i + e).

Under the null (rows i.i.d. from the target) every product has mean 1, so LR is a non-negative martingale with
mean 1 and Ville's inequality bounds ``P(LR >= c) <= 1 / c``: the ranking's threshold keeps its false-diagnosis
guarantee.  Between two hypotheses, each mixture is a proper law of the data, so ``LR_a / LR_b`` has mean at most
``1 / PRIOR[0] = 2`` under a pure b: the separation threshold is ``log(2 M / alpha)``.  Under a b contaminated by a
share eps of the grid the factor is ``1 / PRIOR[eps] = 12`` (log 12 = 2.5 nats more than the separation allows for):
the wrong-name bound then holds at ``6 alpha``.  The fitted share is the
grid value with the largest product (the maximum-likelihood eps on the grid), reported beside the mechanism when it
gains at least ``SHARE_EVIDENCE`` nats over no contamination (else 0).
"""

from __future__ import annotations

import numpy as np

__all__ = ["EPS_GRID", "PRIOR", "mixture_log_likelihood"]

EPS_GRID = (0.0, 0.001, 0.003, 0.01, 0.03, 0.1, 0.3)  # contamination shares (fraction of rows from the target)
SHARE_EVIDENCE = 3.32  # nats a non-zero share must gain over none before it is reported (chi-square(1) at 0.01, halved)
PRIOR = (0.5,) + (0.5 / (len(EPS_GRID) - 1),) * (len(EPS_GRID) - 1)


def mixture_log_likelihood(ll: np.ndarray, ll_target: np.ndarray, weights: np.ndarray) -> tuple[float, float]:
    """Log-likelihood of the rows under the contamination mixture of a mechanism, and the fitted share.

    Parameters
    ----------
    ll, ll_target : np.ndarray, shape (rows,), float64
        Log probability of each (distinct) row under the mechanism and under the target; ``-inf`` where one
        cannot emit the row.
    weights : np.ndarray, shape (rows,), float64
        How many observed rows each row stands for.

    Returns
    -------
    (log-likelihood in nats, fitted contamination share)
        ``log sum_e PRIOR[e] prod_i ((1 - e) P_m(x_i) + e P_target(x_i))``; subtract the target's log-likelihood for
        the log LR (``+inf`` when the target cannot emit a row that the mixture can).
    """
    ll = np.asarray(ll, dtype=np.float64)
    ll_target = np.asarray(ll_target, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    totals = []
    for eps in EPS_GRID:
        if eps == 0.0:
            terms = ll
        else:
            with np.errstate(divide="ignore"):
                terms = np.logaddexp(np.log1p(-eps) + ll, np.log(eps) + ll_target)
        totals.append(float((w * terms).sum()) if np.isfinite(terms).all() else float("-inf"))
    totals_arr = np.array(totals)
    with np.errstate(divide="ignore", invalid="ignore"):
        total = float(np.logaddexp.reduce(np.log(np.array(PRIOR)) + totals_arr))
    best = int(np.argmax(totals_arr))
    if not np.isfinite(totals_arr).any():
        share = float("nan")
    elif best and totals_arr[best] - totals_arr[0] < SHARE_EVIDENCE:  # no evidence for contamination: none reported
        share = 0.0
    else:
        share = float(EPS_GRID[best])
    return total, share
