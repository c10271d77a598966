"""The planned alpha allocation of ``specverify audit --alpha-allocation planned`` (issue 27).

:func:`planned_weights` turns an audit's exact TV laws into ``[stats] cell_weights``: the weights of weighted Holm
(:mod:`verifier.stats.allocation`) that equalise the TV cells' n.  A weight is per cell *test label* (``gof@1``,
``joint@1..2``, ``stop-position@1..L``), shared by the prompts' cells of that label (each label's level is what its
hardest prompt needs); the non-TV cells (surprisal, PIT, collision, ...) keep weight 1, the equal level
``alpha / (2 m)``.  The weights use the exact laws and the plan's power only: they are fixed before any sample is drawn.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

__all__ = ["planned_weights"]


def planned_weights(laws: Mapping[str, Sequence[np.ndarray]], *, equal_level: float, holm_alpha: float, tv_test: str,
                    target_tv: float, power: float) -> tuple[dict[str, float], int | None]:
    """Weights (relative to the equal level) of the TV cell labels, and the n at which they equalise the cells.

    Parameters
    ----------
    laws : mapping of test label -> sequence of exact laws (one per prompt), each shape (categories,), float64
        The TV cells to plan (a law with one possible outcome has no n to plan: leave it out).
    equal_level : float
        The equal per-cell level ``alpha / (2 m)``; the TV labels share ``len(laws) x equal_level``.
    holm_alpha : float
        The Holm half ``alpha / 2`` (the largest level a cell may need).
    tv_test : {"pearson", "weighted", "mixture"}
        The TV cells' test (the mixture test is weighted by the weighted test's computed power:
        :func:`verifier.stats.allocation.tv_level_at`).
    target_tv, power : float

    Returns
    -------
    (dict, int or None)
        ``{label: weight}`` (``weight x equal_level`` = the cell's planned level; the weights of the TV labels sum
        to their number), and the n at which every TV cell reaches ``target_tv`` at its planned level under the test
        the weights were planned with; ``({}, None)`` when no n up to 1e8 does (the caller keeps equal weights).

    Raises
    ------
    InvalidArgumentError
        ``tv_test`` unknown.
    """
    from verifier.stats.allocation import equalised_levels, tv_level_at

    if not laws:
        return {}, None
    per_prompt = {label: [tv_level_at(law, tv_test, target_tv, power, holm_alpha) for law in group]
                  for label, group in laws.items()}

    def hardest(ats):
        def at(n: int) -> float | None:
            got = [f(n) for f in ats]
            return None if any(g is None for g in got) else max(got)
        return at

    n, levels = equalised_levels({label: hardest(ats) for label, ats in per_prompt.items()}, equal_level * len(laws))
    if n is None:
        return {}, None
    return {label: lv / equal_level for label, lv in levels.items()}, n
