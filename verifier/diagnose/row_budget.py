"""The rows a diagnosis reads: every row, or the first rows of each sample set up to a budget of distinct rows.

Every likelihood of the ranking scores each *distinct* emitted row once (:func:`verifier.diagnose.sample_set
.diagnose_sample_set` weights them by their counts), and the costly hypotheses pay per distinct row or prefix: the
stale-KV Monte Carlo 32 paths per distinct row, ``recovered_one_late`` a target and a draft forward row per distinct
prefix and latent token (:mod:`verifier.diagnose.late`).  At T = 1 on the shipped pair (vocab 384, k = 3) almost every
row is distinct, and the diagnosis of an OpenVINO GenAI BIAS run costs ~40 ms CPU per row beside ~20 s of fixed cost:
215 s for 5,000 rows sampled in 12 s (reports/benchmarks.md section 43).

The runner's automatic diagnosis therefore reads the first rows of each sample set, in generate order, up to
:data:`AUTO_DIAGNOSE_DISTINCT_ROWS` distinct rows (``--diagnose-rows``); ``specverify diagnose RUN_DIR`` reads every row
unless given ``--rows``.  The cut:

* is a stopping time of the row sequence (the row that brings the distinct count to the budget is the last one read),
  so the ranking's thresholds keep their guarantee: each hypothesis's likelihood ratio over the target is a
  non-negative martingale in the rows under the null (:mod:`verifier.diagnose.robust`), and Ville's inequality holds
  at a stopping time as at a fixed n;
* keeps each generate call's leading rows, its first row included: batch cross-talk's likelihood of a call,
  ``sum_c P(row 0, c) prod_i P(row i | c)`` (:func:`verifier.diagnose.latent.call_log_likelihood`), is then the exact
  marginal of the rows read;
* leaves sets with few distinct rows whole (T < 1 with top-k, greedy-like rows: cheap to diagnose);
* is reported: each cut set says ``rows_diagnosed`` of ``rows``, the decoder's sentence says how many rows were read and
  that ``specverify diagnose RUN_DIR`` reads them all, and a stored diagnosis that read fewer rows than asked for is not
  reused (:func:`verifier.diagnose.run_dir.stored_diagnosis`).

Fewer rows are less evidence: a mechanism the whole set would name can stay unnamed on the first rows, and a best
hypothesis's own goodness of fit has less power there (the fit check, :func:`verifier.diagnose.sample_set.fit_check`).
That is why the sentence says so and the full diagnosis is one command away.
"""

from __future__ import annotations

import numpy as np

from verifier._diagnose_mode import AUTO_DIAGNOSE_DISTINCT_ROWS  # the default; `run`/`audit --diagnose-rows` set it

__all__ = ["AUTO_DIAGNOSE_DISTINCT_ROWS", "CUT_MARK", "READ_ALL", "rows_read", "rows_text", "RowBudget", "budget_sentence"]

CUT_MARK = "diagnosed on the first"  # every text of a cut diagnosis says it (run_dir.stored_diagnosis reads it back)
READ_ALL = "`specverify diagnose RUN_DIR` reads every row"


def rows_read(tokens: np.ndarray, max_distinct: int | None) -> int:
    """How many leading rows of a sample set a diagnosis reads: all of them when ``max_distinct`` is None or the set
    holds at most that many distinct rows; else up to the row that brings the distinct count to ``max_distinct``.

    Parameters
    ----------
    tokens : np.ndarray, shape (rows, max_new_tokens), int
        Emitted tokens in generate order.
    max_distinct : int or None
        Budget of distinct rows (>= 1), None for every row.

    Returns
    -------
    int
        Rows read, ``1 <= m <= rows`` (0 for no rows).

    Raises
    ------
    InvalidArgumentError
        ``max_distinct`` is not None and not an integer >= 1.
    """
    from verifier.errors import invalid_argument

    if max_distinct is not None and (isinstance(max_distinct, bool) or not isinstance(max_distinct, (int, np.integer))
                                     or max_distinct < 1):
        raise invalid_argument("max_distinct", max_distinct, "an integer >= 1 or None (every row)")
    n = len(tokens)
    if max_distinct is None or n == 0:
        return n
    _, first = np.unique(tokens, axis=0, return_index=True)  # the row where each distinct row first appears
    if len(first) <= max_distinct:
        return n
    return int(np.sort(first)[max_distinct - 1]) + 1  # through the row that brings the distinct count to the budget


class RowBudget:
    """Loads each sample set's rows for a diagnosis, cut by :func:`rows_read`, and remembers what it cut.

    Parameters
    ----------
    load : callable
        ``load(plan) -> (tokens, origins, calls)`` (:func:`verifier.diagnose.run_dir.load_tokens` with calls).
    max_distinct : int or None
        Distinct rows per set (None: every row).
    """

    def __init__(self, load, max_distinct: int | None) -> None:
        self._load, self.max_distinct = load, max_distinct
        self.cut: dict[str, tuple[int, int]] = {}  # set_id -> (rows read, rows stored), sets actually cut only
        self._memo: dict[str, tuple] = {}

    def load(self, plan) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        """(tokens, origins, calls) of ``plan``'s set, the first :func:`rows_read` rows."""
        if plan.set_id not in self._memo:
            tokens, origins, calls = self._load(plan)
            m = rows_read(tokens, self.max_distinct)
            if m < len(tokens):
                self.cut[plan.set_id] = (m, len(tokens))
                tokens, calls = tokens[:m], calls[:m]
                origins = None if origins is None else origins[:m]
            self._memo[plan.set_id] = (tokens, origins, calls)
        return self._memo[plan.set_id]

    def tokens(self, plan) -> np.ndarray:
        """The set's tokens as :meth:`load` reads them."""
        return self.load(plan)[0]

    def cut_of(self, set_ids) -> dict[str, tuple[int, int]]:
        """The cuts among ``set_ids``: set_id -> (rows read, rows stored)."""
        return {s: self.cut[s] for s in set_ids if s in self.cut}


def rows_text(read: int, stored: int) -> str:
    """"diagnosed on the first 1,383 of 5,000 rows": the words every cut diagnosis uses (:data:`CUT_MARK`)."""
    return f"{CUT_MARK} {read:,} of {stored:,} rows"


def budget_sentence(cuts: dict[str, tuple[int, int]], max_distinct: int) -> str:
    """"; diagnosed on the first 1,383 of 5,000 rows (up to 1,000 distinct rows per sample set; ...)" -- '' when
    nothing was cut."""
    if not cuts:
        return ""
    read = sum(m for m, _ in cuts.values())
    stored = sum(n for _, n in cuts.values())
    sets = f" in {len(cuts)} sample sets" if len(cuts) > 1 else ""
    return f"; {rows_text(read, stored)}{sets} (up to {max_distinct:,} distinct rows per sample set; {READ_ALL})"
