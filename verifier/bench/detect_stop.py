"""``specverify bench detect --stop``: samples to detect the stop-rule zoo against an oracle (issue 29, bug kind 5).

Two kinds of defect, two methods:

* **the stop rule broken** (``stop_mid_block``, ``max_tokens_overshoot``, :mod:`verifier.decoders.stop_mutants`):
  a violating row is impossible under the null, and every other row is *less* likely under the mutant than under
  the target (the mutant's non-violating rows are the reference's rows whose stop happened to end their block).  So
  the likelihood ratio is infinite on a violating row and at most 1 elsewhere, and the Neyman--Pearson test rejects
  iff a violating row appeared -- which is what the deterministic ``stop-rule`` cell does: the cell *is* the oracle.
  Rows to detect are geometric in the exact per-row violation probability ``pi``
  (:func:`verifier.exact.stop_violation_prob`): the oracle's median ``ceil(log 0.5 / log(1 - pi))`` and its n at power
  0.99 ``ceil(log 0.01 / log(1 - pi))``.  Measured: the real decoder (tabular torch models, the suite's setting) in
  calls of :data:`STOP_CHUNK` rows, one stream of independent rows until ``--seeds`` (default 100) violating rows
  appeared; by memorylessness the gaps between successive violating rows (the first from the start) are ``--seeds``
  iid "rows to the first violation"; their median and p90 beside the geometric ones (a check that the decoder's rate
  is the exact ``pi``);
* **the stopping law moved** (``deterministic_acceptance``, accept iff p >= q: every row keeps the stop rule, the law
  of the stopping position moves): the ``stop-position@1..L`` cell (pooled chi-square of
  :func:`verifier.stats.gof.gof_test`, the runner's statistic) at its Holm level ``alpha / (2 m)``, ``m = 2`` cells,
  each n a separate fixed-n test on a prefix of each seed's stream of iid stopping positions drawn from the mutant's
  exact stopping law (``stop_position_of(n_token_law(..., rule))``), against the Neyman--Pearson oracle on the two
  stopping laws (:func:`verifier.bench._oracle.np_oracle_samples`, at the family-wise alpha).

Cases: ``bigram4_eos`` (prompt (0,), EOS 3) and ``trigram3`` (prompt (0, 1), no EOS), stop token 2, max_tokens 6 in
rows of 8 columns, k = 3, T = 1 (``tests/runner/suites/stop.toml`` is the first).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from verifier.bench._battery import n_grid
from verifier.bench._common import fmt_n, fmt_ratio, md_table, names_from, row_json

__all__ = ["STOP_CHUNK", "STOP_CASES", "STOP_MUTANTS", "StopDetectRow", "detect_stop_rows", "render_stop_markdown"]

STOP_CHUNK = 200  # rows per generate call (tests/runner/suites/stop.toml)
STOP_CASES = {"bigram4_eos": (0,), "trigram3": (0, 1)}  # pair -> prompt
STOP_TOKEN, MAX_TOKENS, WIDTH, K = 2, 6, 8, 3
STOP_MUTANTS = {"stop_mid_block": "round_stops", "max_tokens_overshoot": "round_limit",  # -> stop_violation_prob check
                "deterministic_acceptance": None}  # None: the stopping law moves (rule of the same name)
MAX_ROWS = 20_000  # rows per measured stream (censored beyond: `>M`)
NUM_CELLS = 2  # stop-rule and stop-position@1..L: the Holm level of one cell is alpha / (2 * NUM_CELLS)


@dataclass
class StopDetectRow:
    """One (mutant, case) measurement; sample sizes in rows."""

    mutant: str
    case: str
    cell: str
    effect: str  # "violating rows pi = ..." or "stopping-law TV ..."
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


def _geometric_n(pi: float, q: float) -> int:
    """Smallest n with P(at least one violating row in n) >= q."""
    return int(math.ceil(math.log1p(-q) / math.log1p(-pi)))


def _violation_row(mutant: str, case: str, check: str, *, seeds: int, seed: int) -> StopDetectRow:
    from verifier.decoders import make_decoder
    from verifier.exact import standard_tabular_pairs, stop_violation_prob
    from verifier.models import TabularCausalLM
    from verifier.runner.stop import stop_ends, stop_violations
    from verifier.sampling import SamplingConfig

    t0 = time.perf_counter()
    pair, prompt = standard_tabular_pairs()[case], STOP_CASES[case]
    pi = float(stop_violation_prob(pair.target, pair.draft, prompt, K, MAX_TOKENS, WIDTH, [STOP_TOKEN], check=check))
    decoder = make_decoder(mutant, TabularCausalLM(pair.target), TabularCausalLM(pair.draft), K)
    ends = stop_ends([STOP_TOKEN], pair.target.eos_token_id)
    # one long stream of independent rows in calls of STOP_CHUNK: by memorylessness the gaps between successive
    # violating rows (the first from the start) are iid "rows to the first violation" -- one per seed
    firsts, done, last = [], 0, 0
    while len(firsts) < seeds and done < MAX_ROWS * seeds:
        rows = decoder.generate(list(prompt), STOP_CHUNK, WIDTH, SamplingConfig(temperature=1.0), seed * 1_000_003 + done,
                                stop_token_ids=[STOP_TOKEN], max_tokens=MAX_TOKENS)
        for i in np.flatnonzero(stop_violations(rows, ends, MAX_TOKENS)[0]):
            firsts.append(done + int(i) + 1 - last)
            last = done + int(i) + 1
        done += STOP_CHUNK
    firsts = (firsts + [math.inf] * seeds)[:seeds]  # censored where a stream ran out of rows
    med, p90 = (float(np.quantile(np.array(firsts), q, method="higher")) for q in (0.5, 0.9))
    return StopDetectRow(mutant=mutant, case=case, cell="stop-rule", effect=f"violating rows pi = {pi:.4g}",
                         oracle_median=_geometric_n(pi, 0.5), oracle_n=_geometric_n(pi, 0.99),
                         oracle_method="exact pi; NP test = the cell", median=med, p90=p90, max_n=MAX_ROWS, seeds=seeds,
                         seconds=time.perf_counter() - t0)


def _law_row(mutant: str, case: str, *, seeds: int, alpha: float, power: float, seed: int) -> StopDetectRow:
    from verifier.bench._oracle import np_oracle_samples
    from verifier.exact import n_token_law, standard_tabular_pairs, stop_position_law, stop_position_of
    from verifier.stats.gof import gof_test

    t0 = time.perf_counter()
    pair, prompt = standard_tabular_pairs()[case], STOP_CASES[case]
    null = stop_position_law(pair.target, prompt, MAX_TOKENS, [STOP_TOKEN])
    alt = stop_position_of(n_token_law(pair.target, pair.draft, prompt, K, MAX_TOKENS, mutant), MAX_TOKENS, [STOP_TOKEN],
                           pair.target.eos_token_id)
    tv = float(sum(abs(a - b) for a, b in zip(null, alt)) / 2)
    oracle = np_oracle_samples(list(null), list(alt), alpha=alpha, power=power)
    p0, p1 = np.array([float(f) for f in null]), np.array([float(f) for f in alt])
    max_n = max(50, 20 * oracle.n)
    grid = n_grid(max_n)
    level = alpha / (2 * NUM_CELLS)
    rng = np.random.default_rng([seed, 1])
    streams = [np.random.default_rng([seed, 2, s]).choice(len(p1), size=max_n, p=p1 / p1.sum()) for s in range(seeds)]
    powers = []
    for n in grid:
        rejected = 0
        for st in streams:
            counts = np.bincount(st[:n], minlength=len(p0))
            rejected += gof_test(counts, p0, alpha=level, rng=rng).pvalue <= level
        powers.append(rejected / seeds)

    def quantile(q: float) -> float:
        hit = np.flatnonzero(np.array(powers) >= q - 1e-12)
        return float(grid[hit[0]]) if hit.size else math.inf

    return StopDetectRow(mutant=mutant, case=case, cell=f"stop-position@1..{MAX_TOKENS}", effect=f"stopping-law TV {tv:.3f}",
                         oracle_median=float(np_oracle_samples(list(null), list(alt), alpha=alpha, power=0.5).n),
                         oracle_n=oracle.n, oracle_method=f"NP {oracle.method}", median=quantile(0.5), p90=quantile(0.9),
                         max_n=max_n, seeds=seeds, seconds=time.perf_counter() - t0)


def detect_stop_rows(mutants: Sequence[str] | None = None, cases: Sequence[str] | None = None, *, seeds: int = 100,
                     alpha: float = 0.01, power: float = 0.99, seed: int = 0, progress=None) -> list[StopDetectRow]:
    """Samples to detect each stop-rule mutant on each case (module docstring).

    Parameters
    ----------
    mutants : sequence of str, optional
        Names from :data:`STOP_MUTANTS`; default all three.
    cases : sequence of str, optional
        Tabular pairs from :data:`STOP_CASES`; default both.
    seeds : int, default 100
        Streams per (mutant, case).
    alpha, power : float
        Family-wise level (the law cell tests at ``alpha / (2 * NUM_CELLS)``) and the oracle's power.
    seed : int
        Base of every stream's seed.

    Returns
    -------
    list[StopDetectRow]

    Raises
    ------
    InvalidArgumentError
        Unknown mutant or case, seeds < 1, alpha / power outside (0, 1).
    """
    from verifier.bench._common import check_detect_args

    names = names_from("mutants", mutants, STOP_MUTANTS)
    case_names = names_from("cases", cases, STOP_CASES)
    check_detect_args(seeds=seeds, alpha=alpha, power=power, max_factor=1.0)
    out = []
    for i, (mutant, case) in enumerate((m, c) for m in names for c in case_names):
        check = STOP_MUTANTS[mutant]
        row = (_violation_row(mutant, case, check, seeds=seeds, seed=seed + 70_000 + i) if check is not None
               else _law_row(mutant, case, seeds=seeds, alpha=alpha, power=power, seed=seed + 70_000 + i))
        out.append(row)
        if progress:
            progress(f"  {mutant:<24} {case:<12} oracle median {row.oracle_median:>6g}  measured median "
                     f"{fmt_n(row.median, row.max_n):>6} ({fmt_ratio(row.ratio)})  [{row.seconds:.1f}s]")
    return out


def render_stop_markdown(rows: Sequence[StopDetectRow]) -> str:
    """One table: every (mutant, case) with its cell, effect, oracle and measured rows to detect."""
    if not rows:
        return "_no stop mutant selected_\n"
    table = [[r.mutant, r.case, r.cell, r.effect, f"{r.oracle_median:g}", f"{r.oracle_n} ({r.oracle_method})",
              fmt_n(r.median, r.max_n), fmt_n(r.p90, r.max_n), fmt_ratio(r.ratio)] for r in rows]
    head = (f"Stop token {STOP_TOKEN}, max_tokens {MAX_TOKENS} in rows of {WIDTH}, k = {K}, T = 1; {rows[0].seeds} seeds; "
            "rows to detect (median / p90 over the seeds); `>M`: not detected within M rows.\n\n")
    return head + md_table(["mutant", "case", "cell", "effect", "oracle median", "oracle n at power 0.99 (method)",
                            "median", "p90", "median / oracle"], table) + "\n"
