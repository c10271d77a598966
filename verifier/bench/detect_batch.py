"""``specverify bench detect --batch``: rows to detect the batch-shape zoo per batch level (issue 29, bug kind 1).

``corrupt_batch_gt2`` (:mod:`verifier.decoders.batch_mutants`) is exact in calls of 1 or 2 rows and corrupts the
slots >= 2 of larger calls (their recovered token from ``p``, the ``full_p_fallback`` rule), so the rows of calls of
``b`` rows have the exact mixture :func:`verifier.exact.batch_level_law` -- the target's law at b <= 2 (no test can
detect it there: "never"), ``(1 - s) target + s full_p_fallback`` with ``s = (b - 2) / b`` above.  Per (case, level):

* **battery** -- the cells of ``tests/runner/suites/batch.toml`` at that level, ``gof@1`` and ``joint@1..J`` (J = 2;
  pooled chi-square, :func:`verifier.stats.gof.gof_pvalues` with the runner's small-sample regime "auto") at the Holm level of the suite's
  first step, ``alpha / (2 m)`` with ``m = 2 x`` :data:`LEVELS_IN_SUITE` ``= 8`` cells (two cells at each of the
  suite's four levels); rejects when either cell does.  Each n is a separate fixed-n test on a prefix of each seed's
  stream of iid J-token rows drawn from the level's exact law (the decoder's rows at that level have it:
  ``tests/decoders/test_batch_mutants.py``); median and p90 over the seeds of the first n in the grid where the
  battery's power over the seeds reaches 0.5 / 0.9;
* **oracle** -- the Neyman--Pearson test of the J-token law of the level against the target's, at the family-wise
  alpha (:func:`verifier.bench._oracle.np_oracle_samples`): no test of those rows needs fewer.

Rows are rows *at that level*; a suite with the axis draws that many at every level.  Cases: ``bigram4_eos`` (prompt
(0,), EOS 3) and ``trigram3`` (prompt (0, 1)), k = 2, T = 1.

``prompt_length_leak`` (every row of a mixed-length call started at slot 0's prompt length) is the reference at the
plain levels ("never") and, at a mixed-prompts level, draws every audited row from the target after the leaked prompt
(:func:`verifier.exact.mixed_prompts_level_law`, the same at every ``b >= 2``), so it has one mixed row per case,
``rows per call`` "2 mixed prompts": audited prompt and slot 0's filler from :data:`PROMPT_CASES` (a bigram's pad
after prompt (0,) would be invisible: the pad id is 0).  Its Holm level counts the suite's four plain levels plus
three mixed ones (2, 4, 16), 14 cells.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Sequence

import numpy as np

from verifier.bench._battery import n_grid
from verifier.bench._common import fmt_n, fmt_ratio, md_table, names_from, row_json

__all__ = ["BATCH_CASES", "BATCH_MUTANTS", "BATCH_LEVELS", "PROMPT_CASES", "BatchDetectRow", "detect_batch_rows",
           "render_batch_markdown"]

BATCH_CASES = {"bigram4_eos": (0,), "trigram3": (0, 1)}  # pair -> prompt
BATCH_MUTANTS = ("corrupt_batch_gt2", "prompt_length_leak")
# prompt_length_leak's cases: pair -> (audited prompt, slot 0's filler prompt of another length)
PROMPT_CASES = {"bigram4_eos": ((1,), (2, 0)), "trigram3": ((0, 1), (2, 1, 0))}
MIXED_LEVELS_IN_SUITE = 3  # prompt_length_leak's suite adds mixed-prompts levels 2, 4, 16 to the four plain ones
BATCH_LEVELS = (1, 2, 4, 16)  # rows per generate call (tests/runner/suites/batch.toml)
LEVELS_IN_SUITE = 4  # the suite's levels: 2 cells each, Holm's first step at alpha / (2 * 2 * LEVELS_IN_SUITE)
K, J = 2, 2
MAX_FACTOR = 8  # streams run to MAX_FACTOR x the oracle n (censored beyond: `>M`)


@dataclass
class BatchDetectRow:
    """One (mutant, case, level) measurement; sample sizes in rows at that level."""

    mutant: str
    case: str
    batch_rows: int
    corrupted_share: str
    tv_first: float  # TV of the first token's law from the target's (exact)
    tv_joint: float  # TV of the J-token law (exact)
    oracle_median: float
    oracle_n: float
    oracle_method: str
    median: float
    p90: float
    max_n: int
    seeds: int
    seconds: float
    level: str = ""  # the level's name where it is not plain: "2 mixed prompts"

    @property
    def ratio(self) -> float:
        return self.median / self.oracle_median if math.isfinite(self.oracle_median) else math.nan

    def to_json(self) -> dict[str, Any]:
        return row_json(self, ratio=self.ratio)


def _level_row(mutant: str, case: str, b: int, *, seeds: int, alpha: float, power: float, seed: int,
               mixed_prompts: bool = False) -> BatchDetectRow:
    from verifier.exact import (batch_level_law, corrupted_share, mixed_prompts_level_law, standard_tabular_pairs,
                                target_law)

    t0 = time.perf_counter()
    pair = standard_tabular_pairs()[case]
    if mutant == "prompt_length_leak":
        prompt, filler = PROMPT_CASES[case]
        null = target_law(pair.target, prompt, J)
        alt = mixed_prompts_level_law(pair.target, prompt, filler, J) if mixed_prompts else null
        share, levels = ("1" if mixed_prompts else "0"), LEVELS_IN_SUITE + MIXED_LEVELS_IN_SUITE
    else:
        prompt = BATCH_CASES[case]
        null = target_law(pair.target, prompt, J)
        alt = batch_level_law(pair.target, pair.draft, prompt, K, J, b, mutant)
        share, levels = str(corrupted_share(b)), LEVELS_IN_SUITE
    common = dict(mutant=mutant, case=case, batch_rows=b, corrupted_share=share, seeds=seeds,
                  level=f"{b} mixed prompts" if mixed_prompts else "")
    return _measured(common, null, alt, levels, alpha=alpha, power=power, seed=seed, t0=t0)


def _measured(common: dict, null: dict, alt: dict, levels: int, *, alpha: float, power: float, seed: int,
              t0: float) -> BatchDetectRow:
    """The row of one level: exact TVs, the oracle, and the battery's rows to detect (module docstring)."""
    from verifier.bench._oracle import np_oracle_samples
    from verifier.exact import marginal, total_variation
    from verifier.stats.gof import gof_pvalues

    seeds = common["seeds"]
    outcomes = sorted(set(null) | set(alt))
    p0 = [null.get(x, Fraction(0)) for x in outcomes]
    p1 = [alt.get(x, Fraction(0)) for x in outcomes]
    tv_first = float(total_variation(marginal(null, (0,)), marginal(alt, (0,))))
    tv_joint = float(total_variation(null, alt))
    common = dict(common, tv_first=tv_first, tv_joint=tv_joint)
    if tv_joint == 0:  # the target's law exactly: nothing can detect it
        return BatchDetectRow(**common, oracle_median=math.inf, oracle_n=math.inf, oracle_method="equal laws",
                              median=math.inf, p90=math.inf, max_n=0, seconds=time.perf_counter() - t0)
    oracle = np_oracle_samples(p0, p1, alpha=alpha, power=power)
    max_n = max(50, MAX_FACTOR * oracle.n)
    grid = n_grid(max_n)
    level = alpha / (2 * 2 * levels)
    firsts = [x[0] for x in outcomes]
    first_ids = sorted(set(firsts))
    to_first = np.array([first_ids.index(f) for f in firsts])
    q0 = np.array([float(f) for f in p0])
    q0_first = np.bincount(to_first, weights=q0, minlength=len(first_ids))
    q1 = np.array([float(f) for f in p1])
    streams = np.stack([np.random.default_rng([seed, 2, s]).choice(len(q1), size=max_n, p=q1 / q1.sum())
                        for s in range(seeds)])
    powers = np.zeros(len(grid))
    for gi, n in enumerate(grid):  # each n a separate fixed-n test on the streams' first n rows, all seeds at once
        joint = np.stack([np.bincount(st[:n], minlength=len(q0)) for st in streams])
        first = np.stack([np.bincount(to_first, weights=c, minlength=len(first_ids)) for c in joint]).astype(np.int64)
        p = np.minimum(gof_pvalues(joint, q0, pvalue_method="auto", alpha=level),
                       gof_pvalues(first, q0_first, pvalue_method="auto", alpha=level))
        powers[gi] = float(np.mean(p <= level))
        if powers[gi] >= 0.9:  # both quantiles found
            break

    def quantile(q: float) -> float:
        hit = np.flatnonzero(powers >= q - 1e-12)
        return float(grid[hit[0]]) if hit.size else math.inf

    return BatchDetectRow(**common, oracle_median=float(np_oracle_samples(p0, p1, alpha=alpha, power=0.5).n),
                          oracle_n=float(oracle.n), oracle_method=f"NP {oracle.method}", median=quantile(0.5),
                          p90=quantile(0.9), max_n=int(max_n), seconds=time.perf_counter() - t0)


def detect_batch_rows(mutants: Sequence[str] | None = None, cases: Sequence[str] | None = None, *, seeds: int = 100,
                      alpha: float = 0.01, power: float = 0.99, seed: int = 0, levels: Sequence[int] = BATCH_LEVELS,
                      progress=None) -> list[BatchDetectRow]:
    """Rows to detect each batch-shape mutant on each case at each batch level (module docstring).

    Parameters
    ----------
    mutants : sequence of str, optional
        Names from :data:`BATCH_MUTANTS`; default all.
    cases : sequence of str, optional
        Tabular pairs from :data:`BATCH_CASES`; default both.
    seeds : int, default 100
        Streams per (mutant, case, level).
    alpha, power : float
        Family-wise level (the cells test at ``alpha / (4 * LEVELS_IN_SUITE)``; ``prompt_length_leak`` at
        ``alpha / (4 * (LEVELS_IN_SUITE + MIXED_LEVELS_IN_SUITE))``) and the oracle's power.
    seed : int
        Base of every stream's seed.
    levels : sequence of int, default (1, 2, 4, 16)
        Rows per generate call; ``prompt_length_leak`` also gets one mixed-prompts row per case at the smallest
        level >= 2 (its law there is the same at every b >= 2).

    Returns
    -------
    list[BatchDetectRow]

    Raises
    ------
    InvalidArgumentError
        Unknown mutant or case, seeds < 1, alpha / power outside (0, 1), a level that is not an integer >= 1.
    """
    from verifier.bench._common import check_detect_args
    from verifier.errors import invalid_argument

    names = names_from("mutants", mutants, BATCH_MUTANTS)
    case_names = names_from("cases", cases, BATCH_CASES)
    check_detect_args(seeds=seeds, alpha=alpha, power=power, max_factor=1.0)
    if not levels or any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in levels):
        raise invalid_argument("levels", levels, "integers >= 1 (rows per generate call)")
    out = []
    jobs = [(m, c, b, False) for m in names for c in case_names for b in levels]
    jobs += [("prompt_length_leak", c, min(b for b in levels if b >= 2), True) for c in case_names
             if "prompt_length_leak" in names and max(levels) >= 2]  # one mixed row: its law is the same at every b
    for i, (mutant, case, b, mixed) in enumerate(jobs):
        row = _level_row(mutant, case, b, seeds=seeds, alpha=alpha, power=power, seed=seed + 90_000 + i,
                         mixed_prompts=mixed)
        out.append(row)
        if progress:
            progress(f"  {mutant:<20} {case:<12} batch {row.level or b:>3}: oracle median {fmt_n(row.oracle_median):>6}"
                     f"  measured median {fmt_n(row.median, row.max_n):>6} ({fmt_ratio(row.ratio)})  [{row.seconds:.1f}s]")
    return out


def render_batch_markdown(rows: Sequence[BatchDetectRow]) -> str:
    """One table: every (mutant, case, level) with its effect, oracle and measured rows to detect."""
    if not rows:
        return "_no batch mutant selected_\n"
    table = [[r.mutant, r.case, r.level or r.batch_rows, r.corrupted_share, f"{r.tv_first:.4f}", f"{r.tv_joint:.4f}",
              fmt_n(r.oracle_median), f"{fmt_n(r.oracle_n)} ({r.oracle_method})", fmt_n(r.median, r.max_n or None),
              fmt_n(r.p90, r.max_n or None), fmt_ratio(r.ratio)] for r in rows]
    head = (f"k = {K}, T = 1, cells gof@1 + joint@1..{J} at Holm's first step alpha / {4 * LEVELS_IN_SUITE} "
            f"({LEVELS_IN_SUITE} levels x 2 cells; prompt_length_leak: alpha / "
            f"{4 * (LEVELS_IN_SUITE + MIXED_LEVELS_IN_SUITE)}, with 3 mixed-prompts levels); {rows[0].seeds} seeds; rows at "
            "the level to detect (median / p90 over the seeds); `never`: the level's law is the target's; "
            f"prompt_length_leak's prompts: {PROMPT_CASES} (audited, slot 0's filler).\n\n")
    return head + md_table(["mutant", "case", "rows per call", "corrupted share", "TV token 1", f"TV tokens 1..{J}",
                            "oracle median", "oracle n at power 0.99 (method)", "median", "p90", "median / oracle"],
                           table) + "\n"
