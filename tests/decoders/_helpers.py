"""Shared helpers: processed tabular models (exact) and a data-blind pooled chi-square vs an exact law."""

from __future__ import annotations

from collections import Counter
from fractions import Fraction

import numpy as np
from scipy import stats

from verifier.models import processed_tabular  # noqa: F401  (re-exported for the tests)

MIN_EXPECTED = 5  # pool categories (sorted by expected count, descending) until each bin expects >= 5


def chisquare_vs_law(samples: np.ndarray, law: dict[tuple, Fraction]) -> tuple[float, float]:
    """Pearson chi-square of the rows of ``samples`` (as tuples) against an exact law.

    Categories are pooled without looking at the data: sorted by expected count, the tail is merged
    until every bin expects >= ``MIN_EXPECTED``; unobserved categories stay in.  A row outside the
    law's support returns ``(inf, 0.0)`` (support violation).
    """
    n = samples.shape[0]
    counts = Counter(map(tuple, samples.tolist()))
    if any(law.get(key, 0) == 0 for key in counts):
        return float("inf"), 0.0
    keys = sorted(law, key=lambda key: law[key], reverse=True)
    obs, exp = [], []
    tail_o, tail_e = 0.0, 0.0
    for key in keys:
        e = float(law[key]) * n
        if e >= MIN_EXPECTED:
            obs.append(counts.get(key, 0))
            exp.append(e)
        else:
            tail_o += counts.get(key, 0)
            tail_e += e
    if tail_e > 0:
        if tail_e < MIN_EXPECTED and exp:  # merge an under-filled tail into the smallest bin
            obs[-1] += tail_o
            exp[-1] += tail_e
        else:
            obs.append(tail_o)
            exp.append(tail_e)
    if len(exp) < 2:
        return 0.0, 1.0
    exp_arr = np.array(exp)
    exp_arr *= n / exp_arr.sum()  # remove float rounding of the Fractions
    res = stats.chisquare(np.array(obs, dtype=float), exp_arr)
    return float(res.statistic), float(res.pvalue)
