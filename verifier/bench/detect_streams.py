"""``specverify bench detect --streams``: samples to detect the randomness zoo against an oracle.

The mutants of :mod:`verifier.decoders.stream_mutants` have the target's law in every row, so the rule-level
method of :mod:`verifier.bench.detect` (rows iid from a mutant's law) cannot represent them.  Same method
otherwise:

* **streams** are simulated exactly, numpy only: rows in calls of :data:`STREAM_CHUNK` rows (the chunk the
  independence suite uses); each row draws its N tokens by inverse CDF in token-id order from the exact target
  (a tabular pair of :func:`verifier.exact.standard_tabular_pairs` at its prompt, T = 1, N = 3) with uniforms
  ``u_{r,t}`` structured as the mutant's ``_uniforms`` makes them: ``shared_stream`` row ``2i + 1`` re-uses row
  ``2i``'s, ``serial_stream`` row ``r`` of a call takes ``frac(u_{0,t} + r * WEYL_STEP)``.  Calls are independent;
* the **battery** is the independence suite's cells -- ``gof@1`` (Pearson, the runner's pooling and
  small-sample regime), ``collision@1..N`` (identical disjoint pairs, exact Poisson-binomial tail) and
  ``serial@1`` (id-order randomized PIT of the first token, Ljung--Box lags 1..5, Monte Carlo p-value against
  one null sample of ``20 / level`` draws per n shared by all seeds, :func:`verifier.stats.serial.serial_null_sample`:
  its Monte Carlo error moves every seed's critical value together, by about 20% in level) -- under the gate at family-wise
  alpha 0.01 (Holm + Cauchy), each n a separate fixed-n test on a prefix of each seed's stream; median / p90 of
  "samples at which it rejects" over ``--seeds`` streams (default 100), and, per cell, the median n at which
  that cell alone rejects at its Holm level ``alpha / (2 m)`` (``>max``: never within the simulated rows);
* the **oracle** knows the mutant: ``shared_stream``'s pairs are iid, with law ``P(x) P(y)`` under the null and
  ``P(x) 1[x = y]`` under the mutant, so the Neyman--Pearson n comes from :func:`verifier.bench._oracle.np_oracle_samples`
  on the pair laws (rows = 2 x pairs).  ``serial_stream``'s rows are a deterministic function of one uniform per
  position and call: the likelihood of the first n rows is the Lebesgue measure of the base uniforms consistent
  with all of them (intervals on the circle, intersected exactly), and the test "likelihood ratio >= 1 / alpha"
  has level alpha by Markov's inequality; its power over the same streams gives the oracle n -- an upper bound
  on the Neyman--Pearson n (the most powerful test is at least as powerful).

No e-process: the sequential battery of :mod:`verifier.bench.detect` is a count-cell battery, blind here.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Sequence

import numpy as np

from verifier.bench._battery import family_rejects, n_grid
from verifier.bench._common import fmt_n, fmt_ratio, md_table, names_from, row_json
from verifier.runner.verdict import cell_level

__all__ = ["STREAM_CHUNK", "STREAM_CASES", "STREAM_ROWS", "STREAM_MUTANTS", "StreamDetectRow", "detect_stream_rows", "render_stream_markdown"]

STREAM_CHUNK = 200  # rows per generate call (tests/runner/suites/independence.toml)
STREAM_CASES = ("bigram4_eos", "trigram3")  # the independence suite's pair and the ci suite's
STREAM_TOKENS = 3
STREAM_ROWS = 600  # rows per simulated stream (three calls): the battery needs < 150 on both mutants
STREAM_MUTANTS = ("shared_stream", "serial_stream")  # verifier.decoders.stream_mutants.STREAM_DECODER_REGISTRY (tests check)
WEYL_STEP = (math.sqrt(5.0) - 1.0) / 2.0  # = verifier.decoders.stream_mutants.WEYL_STEP, without importing torch here
NULL_SEED = 0  # one serial null sample per n, shared by every row of the benchmark (cached)
CELLS = ("gof@1", f"collision@1..{STREAM_TOKENS}", "serial@1")


@dataclass
class StreamDetectRow:
    """One (mutant, case) measurement; sample sizes in rows of N emitted tokens."""

    mutant: str
    case: str
    oracle_n: int
    oracle_method: str
    fixed_median: float
    fixed_p90: float
    cell_medians: dict
    max_n: int
    seeds: int
    chunk: int
    seconds: float

    @property
    def ratio(self) -> float:
        return self.fixed_median / self.oracle_n

    def to_json(self) -> dict[str, Any]:
        return row_json(self, ratio=self.ratio)


class _Target:
    """The exact target of one case: next-token probs (float64) and id-order CDFs per prefix, cached."""

    def __init__(self, case: str) -> None:
        from verifier.exact import standard_tabular_pairs, target_law

        pair = standard_tabular_pairs()[case]
        self.lm, self.prompt, self.eos = pair.target, tuple(pair.prefix), pair.target.eos_token_id
        self.vocab = pair.target.vocab_size
        self.law = target_law(pair.target, pair.prefix, STREAM_TOKENS)
        self._next: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}

    def next(self, prefix: tuple) -> np.ndarray:
        return self._row(prefix)[0]

    def _row(self, prefix: tuple) -> tuple[np.ndarray, np.ndarray]:
        if prefix not in self._next:
            p = np.array([float(v) for v in self.lm.probs(self.prompt + prefix)])
            self._next[prefix] = (p, np.cumsum(p))
        return self._next[prefix]

    def rows(self, u: np.ndarray) -> tuple[list[tuple], np.ndarray, np.ndarray]:
        """Rows drawn with uniforms ``u`` (rows, N): (padded tuples, interval low, interval high) -- the id-order
        CDF interval ``[F(x^-), F(x))`` of each token given its prefix (NaN after EOS)."""
        out, lo, hi = [], np.full(u.shape, np.nan), np.full(u.shape, np.nan)
        for r in range(u.shape[0]):
            prefix: tuple = ()
            for t in range(STREAM_TOKENS):
                if prefix and prefix[-1] == self.eos:
                    break
                p, cdf = self._row(prefix)
                x = int(min(np.searchsorted(cdf, u[r, t] * cdf[-1], side="right"), len(p) - 1))
                lo[r, t], hi[r, t] = cdf[x] - p[x], cdf[x]
                prefix += (x,)
            out.append(prefix + (-1,) * (STREAM_TOKENS - len(prefix)))
        return out, lo, hi


def _uniforms(mutant: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """The mutant's uniforms for ``n`` rows in calls of :data:`STREAM_CHUNK` (each call its own base draws)."""
    out = np.empty((n, STREAM_TOKENS))
    for start in range(0, n, STREAM_CHUNK):
        rows = min(STREAM_CHUNK, n - start)
        r = np.arange(rows)[:, None]
        if mutant == "shared_stream":
            base = rng.random((rows, STREAM_TOKENS))
            out[start:start + rows] = base[r[:, 0] - r[:, 0] % 2]
        elif mutant == "serial_stream":
            out[start:start + rows] = np.mod(rng.random(STREAM_TOKENS)[None, :] + r * WEYL_STEP, 1.0)
        else:  # "independent": the null
            out[start:start + rows] = rng.random((rows, STREAM_TOKENS))
    return out


def _serial_log_lr(lo: np.ndarray, hi: np.ndarray, log_p0: np.ndarray) -> np.ndarray:
    """``log LR_n`` of serial_stream against iid rows for n = 1..rows: the measure of base uniforms consistent
    with the first n rows of each call (per position, intervals on the circle) over the rows' iid likelihood."""
    out = np.empty(lo.shape[0])
    log_p1 = 0.0
    for start in range(0, lo.shape[0], STREAM_CHUNK):
        alive = [[(0.0, 1.0)] for _ in range(STREAM_TOKENS)]
        for r in range(min(STREAM_CHUNK, lo.shape[0] - start)):
            i = start + r
            for t in range(STREAM_TOKENS):
                if math.isnan(lo[i, t]):
                    continue  # the row ended: its uniform at t is drawn and discarded
                before = sum(b - a for a, b in alive[t])
                a0, b0 = (lo[i, t] - r * WEYL_STEP) % 1.0, (hi[i, t] - r * WEYL_STEP) % 1.0
                allowed = [(a0, b0)] if a0 < b0 else [(a0, 1.0), (0.0, b0)]
                alive[t] = [(max(a, c), min(b, d)) for a, b in alive[t] for c, d in allowed if max(a, c) < min(b, d)]
                after = sum(b - a for a, b in alive[t])
                log_p1 += math.log(after / before) if after > 0 else -math.inf
            out[i] = log_p1 - log_p0[: i + 1].sum()
    return out


def _oracle(mutant: str, target: _Target, streams: list, alpha: float, power: float) -> tuple[int, str]:
    if mutant == "shared_stream":
        from verifier.bench._oracle import np_oracle_samples

        null = {(x, y): px * py for x, px in target.law.items() for y, py in target.law.items()}
        alt = {(x, y): (px if x == y else Fraction(0)) for x, px in target.law.items() for y in target.law}
        res = np_oracle_samples(null, alt, alpha=alpha, power=power)
        return 2 * res.n, f"{res.method}, pairs"
    lrs = np.stack([s["log_lr"] for s in streams])  # (seeds, max_n)
    ok = (lrs >= math.log(1 / alpha)).mean(axis=0) >= power - 1e-12
    hit = np.flatnonzero(ok)
    return (int(hit[0]) + 1 if hit.size else lrs.shape[1] + 1), "LR >= 1/alpha (Markov), <= NP n"


def _measure(mutant: str, case: str, *, seeds: int, alpha: float, power: float, max_n: int, seed: int) -> StreamDetectRow:
    from verifier.stats.collisions import poisson_binomial_sf
    from verifier.stats.gof import gof_pvalues
    from verifier.stats.montecarlo import draws_for, upper_pvalues
    from verifier.stats.serial import SERIAL_LAGS, SERIAL_MIN_ROWS, ljung_box_rows, serial_null_sample

    t0 = time.perf_counter()
    target = _Target(case)
    first_law = target.next(())
    law = {o: float(p) for o, p in target.law.items()}
    streams = []
    for s in range(seeds):
        rng = np.random.default_rng([seed, s])
        rows, lo, hi = target.rows(_uniforms(mutant, max_n, rng))  # noqa: F841 (lo, hi: the oracle's intervals)
        row_p = np.array([law[r] for r in rows])
        x1 = np.array([r[0] for r in rows])
        u = (np.cumsum(first_law) - first_law)[x1] + rng.random(max_n) * first_law[x1]  # id-order PIT
        streams.append({"rows": rows, "row_p": row_p, "x1": x1, "u": u,
                        "log_lr": _serial_log_lr(lo, hi, np.log(row_p)) if mutant == "serial_stream" else None})
    oracle_n, method = _oracle(mutant, target, streams, alpha, power)
    m = len(CELLS)
    level = cell_level(alpha, m, "gate")
    draws = draws_for(level)
    grid, fam_power, cell_power = [], [], {c: [] for c in CELLS}
    for n in n_grid(max_n):
        pv = np.ones((seeds, m))
        counts = np.stack([np.bincount(st["x1"][:n], minlength=target.vocab) for st in streams])
        pv[:, 0] = gof_pvalues(counts, first_law, pvalue_method="auto", alpha=level)
        for i, st in enumerate(streams):
            pairs = n // 2
            if pairs:
                same = sum(st["rows"][2 * j] == st["rows"][2 * j + 1] for j in range(pairs))
                pv[i, 1] = poisson_binomial_sf(st["row_p"][0:2 * pairs:2], same)
        if n >= SERIAL_MIN_ROWS:
            q = ljung_box_rows(np.stack([st["u"][:n] for st in streams]), SERIAL_LAGS)
            pv[:, 2] = upper_pvalues(q, serial_null_sample(n, SERIAL_LAGS, draws, null_seed=NULL_SEED))
        grid.append(n)
        fam_power.append(float(family_rejects(pv, alpha).mean()))
        for j, c in enumerate(CELLS):
            cell_power[c].append(float((pv[:, j] <= alpha / (2 * m)).mean()))
    grid_a = np.array(grid)

    def quantile(pw: list, q: float) -> float:
        hit = np.flatnonzero(np.array(pw) >= q - 1e-12)
        return float(grid_a[hit[0]]) if hit.size else math.inf

    return StreamDetectRow(mutant=mutant, case=case, oracle_n=oracle_n, oracle_method=method,
                           fixed_median=quantile(fam_power, 0.5), fixed_p90=quantile(fam_power, 0.9),
                           cell_medians={c: quantile(cell_power[c], 0.5) for c in CELLS}, max_n=max_n, seeds=seeds,
                           chunk=STREAM_CHUNK, seconds=time.perf_counter() - t0)


def detect_stream_rows(mutants: Sequence[str] | None = None, cases: Sequence[str] | None = None, *, seeds: int = 100,
                       alpha: float = 0.01, power: float = 0.99, rows: int = STREAM_ROWS, seed: int = 0,
                       progress=None) -> list[StreamDetectRow]:
    """Samples to detect each randomness-zoo mutant on each case (module docstring).

    Parameters
    ----------
    mutants : sequence of str, optional
        Names from :data:`STREAM_MUTANTS` (the registry of :mod:`verifier.decoders.stream_mutants`); default both.
    cases : sequence of str, optional
        Tabular pairs from :data:`STREAM_CASES`; default both.
    seeds : int, default 100
        Simulated streams per (mutant, case).
    alpha, power : float
        Family-wise level of the battery and the oracle's level; oracle power.
    rows : int, default :data:`STREAM_ROWS`
        Rows per stream (the oracle and the battery are censored there: ``>rows``).
    seed : int
        Stream ``s`` of a (mutant, case) uses ``numpy.random.default_rng([seed + index, s])``.

    Returns
    -------
    list[StreamDetectRow]

    Raises
    ------
    InvalidArgumentError
        Unknown mutant or case, seeds < 1, alpha / power outside (0, 1), rows < 2 calls.
    """
    from verifier.bench._common import check_detect_args

    names = names_from("mutants", mutants, STREAM_MUTANTS)
    case_names = names_from("cases", cases, STREAM_CASES)
    check_detect_args(seeds=seeds, alpha=alpha, power=power, max_factor=1.0)
    if isinstance(rows, bool) or not isinstance(rows, int) or rows < 2 * STREAM_CHUNK:
        from verifier.errors import invalid_argument

        raise invalid_argument("rows", rows, f"an integer >= {2 * STREAM_CHUNK} (two calls)")
    out = []
    for i, (mutant, case) in enumerate((m, c) for m in names for c in case_names):
        row = _measure(mutant, case, seeds=seeds, alpha=alpha, power=power, max_n=rows, seed=seed + 60_000 + i)
        out.append(row)
        if progress:
            progress(f"  {mutant:<14} {case:<12} oracle {row.oracle_n:>4}  fixed-n median {fmt_n(row.fixed_median, row.max_n):>5} "
                     f"({fmt_ratio(row.ratio)})  [{row.seconds:.1f}s]")
    return out


def render_stream_markdown(rows: Sequence[StreamDetectRow]) -> str:
    """One table: every (mutant, case) with the oracle, the battery's median / p90 and each cell alone."""
    if not rows:
        return "_no stream mutant selected_\n"
    table = [[r.mutant, r.case, f"{r.oracle_n} ({r.oracle_method})", fmt_n(r.fixed_median, r.max_n),
              fmt_n(r.fixed_p90, r.max_n), fmt_ratio(r.ratio)] + [fmt_n(r.cell_medians[c], r.max_n) for c in CELLS]
             for r in rows]
    head = (f"Rows in calls of {rows[0].chunk}; {rows[0].seeds} seeds; per-row TV 0 (every row has the target's law); "
            "`>M`: not rejected within the M rows simulated.\n\n")
    return head + md_table(["mutant", "case", "oracle n (method)", "fixed-n median", "fixed-n p90", "median / oracle"]
                           + [f"{c} alone (median)" for c in CELLS], table) + "\n"
