"""The few statistics calls the audit makes, in one place (all delegated to verifier.stats / scipy)."""

from __future__ import annotations

import numpy as np

__all__ = ["gof_cell"]


def gof_cell(name: str, counts: np.ndarray, expected_probs: np.ndarray, alpha: float):
    """Pooled Pearson goodness-of-fit of ``counts`` against ``expected_probs`` as a :class:`KernelCell`."""
    from scipy.stats import chisquare

    from verifier.audit.kernel_audit import KernelCell
    from verifier.stats.pooling import pool_categories
    from verifier.stats.power import min_detectable_effect

    counts = np.asarray(counts, dtype=np.int64)
    n = int(counts.sum())
    support_violation = bool((counts[expected_probs == 0] > 0).any())
    pooling = pool_categories(expected_probs, n)
    df = pooling.num_categories - 1
    if df < 1 or support_violation:  # a support violation is a hard failure whatever the statistic
        stat, pvalue = 0.0, 1.0
    else:
        observed = pooling.pool(counts)
        stat, pvalue = chisquare(observed, n * pooling.expected_probs)
    mde = min_detectable_effect(n, expected_probs, alpha=alpha)
    return KernelCell(name=name, counts=counts, expected_probs=np.asarray(expected_probs, dtype=np.float64), statistic=float(stat),
                      pvalue=0.0 if support_violation else float(pvalue), n=n, df=df, mde_tv=float(mde.tv),
                      support_violation=support_violation)
