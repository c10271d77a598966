"""``specverify bench detect --recurrent``: samples to detect the recurrent-state zoo against the oracle (issue 29, kind 8).

The mutants (:mod:`verifier.decoders.recurrent_mutants`) keep every row well formed and move the law of the emitted
tokens from the second round on; their exact laws on the ``parity3`` pair are
:func:`verifier.exact.recurrent.recurrent_law` (``rollback="not_rolled_back"`` / ``"stale_checkpoint"``; the
decoders' rows match them, ``tests/decoders/test_recurrent_mutants.py``).  Per (mutant, draftless-round probability):

* the **oracle**: the Neyman--Pearson test of the target's law of the :data:`WIDTH` tokens against the mutant's
  (:func:`verifier.bench._oracle.np_oracle_samples`, at the family-wise alpha), median (power 0.5) and n at power
  0.99;
* **measured**: the cells a default suite runs on these rows -- ``gof@1..WIDTH`` (one per position) and the joint
  cell of all :data:`WIDTH` positions, each the pooled chi-square of :func:`verifier.stats.gof.gof_test` at the
  Bonferroni level ``alpha / (WIDTH + 1)``; rejected when one cell rejects.  Each n is a separate fixed-n test on a
  prefix of each seed's stream of iid rows drawn from the mutant's exact law; median and p90 over the seeds of the
  first n on the grid (:func:`verifier.bench._battery.n_grid`, up to 20 oracle n; evaluated until the power reaches
  0.9) where the power reaches 0.5 / 0.9.

Case: ``parity3`` (a 3-token target whose state is (last token, parity of the 0s); bigram draft), prompt (0,),
:data:`WIDTH` = 4 tokens, k = :data:`K`, T = 1.
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

__all__ = ["RECURRENT_SCENARIOS", "RecurrentDetectRow", "detect_recurrent_rows", "render_recurrent_markdown"]

PROMPT, WIDTH, K = (0,), 4, 2
RECURRENT_SCENARIOS = {  # name -> (mutant, its rollback policy, draftless-round probability)
    "state_not_rolled_back": ("state_not_rolled_back", "not_rolled_back", Fraction(0)),
    "state_not_rolled_back/skip1/2": ("state_not_rolled_back", "not_rolled_back", Fraction(1, 2)),
    "state_checkpoint_stale/skip1/2": ("state_checkpoint_stale", "stale_checkpoint", Fraction(1, 2)),
    "state_checkpoint_stale/skip1/5": ("state_checkpoint_stale", "stale_checkpoint", Fraction(1, 5)),
}


@dataclass
class RecurrentDetectRow:
    """One scenario's measurement; sample sizes in rows of :data:`WIDTH` tokens."""

    scenario: str
    mutant: str
    skip_prob: str
    tv: float
    oracle_median: float
    oracle_n: int
    oracle_method: str
    median: float
    p90: float
    max_n: int
    seeds: int
    seconds: float

    @property
    def ratio(self) -> float:
        return self.median / self.oracle_median

    def to_json(self) -> dict[str, Any]:
        return row_json(self, ratio=self.ratio)


def _vector(law: dict, outcomes: list) -> np.ndarray:
    return np.array([float(law.get(o, 0)) for o in outcomes])


def _row(scenario: str, *, seeds: int, alpha: float, power: float, seed: int) -> RecurrentDetectRow:
    from verifier.bench._oracle import np_oracle_samples
    from verifier.exact import total_variation
    from verifier.exact.recurrent import parity3, recurrent_law, recurrent_target_law
    from verifier.stats.gof import gof_test

    t0 = time.perf_counter()
    mutant, policy, skip = RECURRENT_SCENARIOS[scenario]
    target, draft = parity3()
    null = recurrent_target_law(target, PROMPT, WIDTH)
    alt = recurrent_law(target, draft, PROMPT, K, WIDTH, rollback=policy, skip_prob=skip)
    oracle = np_oracle_samples(null, alt, alpha=alpha, power=power)
    outcomes = sorted(set(null) | set(alt))
    p0, p1 = _vector(null, outcomes), _vector(alt, outcomes)
    codes = np.array(outcomes)  # (outcomes, WIDTH)
    marginals = [np.array([p0[codes[:, j] == t].sum() for t in range(target.vocab_size)]) for j in range(WIDTH)]
    level = alpha / (WIDTH + 1)
    max_n = max(50, 20 * oracle.n)
    grid = n_grid(max_n)
    rng = np.random.default_rng([seed, 1])
    streams = [np.random.default_rng([seed, 2, s]).choice(len(p1), size=max_n, p=p1 / p1.sum()) for s in range(seeds)]
    powers = []
    for n in grid:
        rejected = 0
        for st in streams:
            drawn = st[:n]
            cells = [(np.bincount(codes[drawn, j], minlength=target.vocab_size), marginals[j]) for j in range(WIDTH)]
            cells.append((np.bincount(drawn, minlength=len(p0)), p0))
            rejected += any(gof_test(c, p, alpha=level, rng=rng).pvalue <= level for c, p in cells)
        powers.append(rejected / seeds)
        if powers[-1] >= 0.9:  # both quantiles found; larger n cannot change them
            break

    def quantile(q: float) -> float:
        hit = np.flatnonzero(np.array(powers) >= q - 1e-12)
        return float(grid[hit[0]]) if hit.size else math.inf  # grid[:len(powers)]: the evaluated prefix

    return RecurrentDetectRow(scenario=scenario, mutant=mutant, skip_prob=str(skip), tv=float(total_variation(null, alt)),
                              oracle_median=float(np_oracle_samples(null, alt, alpha=alpha, power=0.5).n),
                              oracle_n=oracle.n, oracle_method=f"NP {oracle.method}", median=quantile(0.5),
                              p90=quantile(0.9), max_n=max_n, seeds=seeds, seconds=time.perf_counter() - t0)


def detect_recurrent_rows(scenarios: Sequence[str] | None = None, *, seeds: int = 100, alpha: float = 0.01,
                          power: float = 0.99, seed: int = 0, progress=None) -> list[RecurrentDetectRow]:
    """Rows to detect each recurrent-state scenario (module docstring).

    Parameters
    ----------
    scenarios : sequence of str, optional
        Keys of :data:`RECURRENT_SCENARIOS` (``bench detect --rule``); default all.
    seeds : int, default 100
        Streams per scenario.
    alpha, power : float
        Family-wise level (each cell at ``alpha / (WIDTH + 1)``) and the oracle's power.
    seed : int, default 0
        Base of every stream's seed.

    Returns
    -------
    list[RecurrentDetectRow]

    Raises
    ------
    InvalidArgumentError
        Unknown scenario, seeds < 1, alpha / power outside (0, 1).
    """
    from verifier.bench._common import check_detect_args

    names = names_from("scenarios", scenarios, RECURRENT_SCENARIOS)
    check_detect_args(seeds=seeds, alpha=alpha, power=power, max_factor=1.0)
    out = []
    for i, name in enumerate(names):
        row = _row(name, seeds=seeds, alpha=alpha, power=power, seed=seed + 80_000 + i)
        out.append(row)
        if progress:
            progress(f"  {name:<32} oracle median {row.oracle_median:>6g}  measured median "
                     f"{fmt_n(row.median, row.max_n):>6} ({fmt_ratio(row.ratio)})  [{row.seconds:.1f}s]")
    return out


def render_recurrent_markdown(rows: Sequence[RecurrentDetectRow]) -> str:
    """One table: every scenario with its TV, oracle and measured rows to detect."""
    if not rows:
        return "_no recurrent scenario selected_\n"
    table = [[r.scenario, r.skip_prob, f"{r.tv:.4f}", f"{r.oracle_median:g}", f"{r.oracle_n} ({r.oracle_method})",
              fmt_n(r.median, r.max_n), fmt_n(r.p90, r.max_n), fmt_ratio(r.ratio)] for r in rows]
    head = (f"parity3, prompt {PROMPT}, rows of {WIDTH} tokens, k = {K}, T = 1; cells gof@1..{WIDTH} + joint at "
            f"alpha / {WIDTH + 1}; {rows[0].seeds} seeds; rows to detect (median / p90); `>M`: not within M rows.\n\n")
    return head + md_table(["scenario", "draftless prob", "TV", "oracle median", "oracle n at power 0.99 (method)",
                            "median", "p90", "median / oracle"], table) + "\n"
