"""The harness's default test battery, simulated from exact laws (no decoder, no model).

A sample set of n rows of ``num_tokens`` emitted tokens is drawn iid from a known law over token
tuples (a mutant's :func:`verifier.exact.n_token_law`, or the target's law under the null), and
the runner's cells are computed exactly as :mod:`verifier.runner.analysis` does:

``gof@t``     Pearson chi-square of emitted token t (``vocab + 1`` categories, the last = ended)
              against its marginal, data-blind pooling (:func:`verifier.stats.gof_pvalues`).
``joint``     the same on the tuple of the first ``joint_tokens`` emitted tokens.
              Both use :func:`verifier.stats.gof_test`'s ``"auto"`` p-values, small-sample
              regime included (finer pooling + Monte Carlo), at the runner's per-cell level.
``surprisal`` mean surprisal of the first ``min(joint_tokens, N)`` emitted tokens against the
              entropy of their exact law (:mod:`verifier.stats.surprisal`).
``pit``       randomized PIT of every emitted token against the target's conditional probs,
              one-sample KS (exact Kolmogorov law up to 10,000 values, as ``scipy.stats.kstest``).
gate          Holm at alpha/2 over the cells plus the Cauchy combination at alpha/2 (the
              runner's ``gate`` with ``dependent=True``): the family rejects iff
              ``min p <= alpha / (2 m)`` or ``cauchy(p) <= alpha / 2``
              (equivalent to :func:`verifier.stats.adjust` ``.family_rejected``; checked in tests).
              A support violation (an emitted tuple with target prob 0) rejects outright.

Sequential form: one Dirichlet-multinomial e-process (:func:`verifier.stats.e_process`) per
``gof``/``joint`` cell at ``alpha / m`` (union bound over cells; Ville's inequality per cell), and
optionally one on the whole emitted tuple.

The runner's ``accepted`` cell is left out: the decoder reports its accepted counts, which are
not part of the emitted-token law the Neyman–Pearson oracle is given.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Mapping, Sequence

import numpy as np
from scipy import stats

from verifier.protocols import PADDING_TOKEN_ID
from verifier.runner.verdict import cell_level
from verifier.stats import e_process, gof_pvalues
from verifier.stats.surprisal import surprisal_pvalues

__all__ = ["BatterySpec", "TupleLaw", "FirstRejections", "first_rejections", "family_rejects", "ks_uniform_pvalues", "n_grid"]

KS_EXACT_MAX = 10_000  # scipy.stats.kstest (method "auto") uses the exact Kolmogorov law up to here
KS_EXACT_BELOW = 0.05  # above this (Stephens' approximation, abs. error < 1e-2) the exact p cannot change a decision
CAUCHY_P_FLOOR = 1e-300  # as verifier.stats.multiple: p = 0 would overflow tan()
GRID_DENSE_UNTIL = 40  # first-rejection grid: every n up to here ...
GRID_RATIO = 1.05  # ... then geometric steps of 5% (a quantile is located to within 5%)


@dataclass(frozen=True)
class BatterySpec:
    """Which cells the simulated battery has (defaults: the runner's defaults).

    Attributes
    ----------
    gof_positions : tuple of int
        Positions t of the ``gof@t`` cells (suite default ``[1, 2]``), kept when ``t <= num_tokens``.
    joint_tokens : int
        J of the joint cell (suite default 2); 0 or ``J > num_tokens`` drops it.
    surprisal : bool
        Include the surprisal cell on the first ``min(joint_tokens, num_tokens)`` tokens.
    pit : bool
        Include the randomized-PIT KS cell.
    alpha : float
        Family-wise level (the benchmark uses 0.01).
    tuple_e_process : bool
        Sequential battery only: add an e-process on the whole emitted tuple.
    """

    gof_positions: tuple[int, ...] = (1, 2)
    joint_tokens: int = 2
    surprisal: bool = True
    pit: bool = True
    alpha: float = 0.01
    tuple_e_process: bool = False

    def label(self) -> str:
        parts = [f"gof@{','.join(map(str, self.gof_positions))}"] if self.gof_positions else []
        parts += [f"joint@1..{self.joint_tokens}"] if self.joint_tokens else []
        parts += ["surprisal"] if self.surprisal else []
        parts += ["pit"] if self.pit else []
        return " + ".join(parts)


class TupleLaw:
    """The outcome space of a case (emitted-token tuples) with each outcome's cell categories.

    Parameters
    ----------
    target_law : dict tuple -> Fraction
        Law of the first ``num_tokens`` emitted tokens under the target (-1 after EOS).
    target_next : callable (prefix tuple) -> sequence of probs
        The target's next-token probs after the prompt plus ``prefix`` (for the PIT).
    vocab : int
    other_laws : sequence of dict
        Laws whose outcomes must be representable (mutants may emit tuples the target never does).
    """

    def __init__(self, target_law: Mapping, target_next, vocab: int, other_laws: Sequence[Mapping] = ()) -> None:
        keys = set(target_law)
        for law in other_laws:
            keys |= set(law)
        self.outcomes = sorted(keys)
        self.vocab = int(vocab)
        self.num_tokens = len(self.outcomes[0])
        self.index = {o: i for i, o in enumerate(self.outcomes)}
        self.target = self.vector(target_law)
        out = np.array(self.outcomes, dtype=np.int64)
        self.categories = np.where(out == PADDING_TOKEN_ID, self.vocab, out)  # (O, N)
        self.violation = self.target == 0
        lo = np.full(out.shape, np.nan)
        width = np.full(out.shape, np.nan)
        for i, o in enumerate(self.outcomes):
            for t, x in enumerate(o):
                if x == PADDING_TOKEN_ID:
                    break
                row = np.array([float(v) for v in target_next(tuple(o[:t]))])
                if row[x] == 0:
                    self.violation[i] = True
                    break
                before = (row > row[x]) | ((row == row[x]) & (np.arange(row.size) < x))  # prob desc, ties by id
                lo[i, t], width[i, t] = row[before].sum(), row[x]
        self.pit_lo, self.pit_width = lo, width

    def vector(self, law: Mapping) -> np.ndarray:
        """Probabilities of ``law`` over :attr:`outcomes`, float64 (exact Fractions rounded once)."""
        v = np.zeros(len(self.outcomes))
        for o, p in law.items():
            v[self.index[o]] = float(Fraction(p)) if not isinstance(p, float) else p
        return v / v.sum()

    def window(self, tokens: int) -> tuple[np.ndarray, np.ndarray]:
        """(category of each outcome (O,), law over categories) of the first ``tokens`` emitted tokens."""
        base = self.vocab + 1
        code = np.zeros(len(self.outcomes), dtype=np.int64)
        for t in range(tokens):
            code = code * base + self.categories[:, t]
        return code, np.bincount(code, weights=self.target, minlength=base ** tokens)

    def cell_codes(self, spec: BatterySpec) -> list[tuple[str, np.ndarray, np.ndarray]]:
        """``(cell id, category of each outcome (O,), expected law over categories)`` per count cell."""
        cells = []
        base = self.vocab + 1
        for t in spec.gof_positions:
            if t <= self.num_tokens:
                code = self.categories[:, t - 1]
                cells.append((f"gof@{t}", code, np.bincount(code, weights=self.target, minlength=base)))
        j = spec.joint_tokens
        if j and j <= self.num_tokens:
            cells.append((f"joint@1..{j}",) + self.window(j))
        return cells


def family_rejects(pvalues: np.ndarray, alpha: float) -> np.ndarray:
    """Gate decision per row of a (runs, cells) p-value matrix: Holm(alpha/2) or Cauchy(alpha/2) rejects."""
    p = np.maximum(np.asarray(pvalues, dtype=np.float64), CAUCHY_P_FLOOR)
    m = p.shape[1]
    holm_any = p.min(axis=1) <= alpha / (2 * m)
    combined = stats.cauchy.sf(np.mean(np.tan((0.5 - p) * np.pi), axis=1))
    return holm_any | (combined <= alpha / 2)


def ks_uniform_pvalues(u: np.ndarray) -> np.ndarray:
    """Two-sided one-sample KS p-values against Uniform(0, 1), one per row; NaN entries are skipped.

    Same law as ``scipy.stats.kstest(row, "uniform")`` with method "auto" (exact Kolmogorov
    distribution up to ``KS_EXACT_MAX`` values, asymptotic beyond) wherever the p-value is below
    ``KS_EXACT_BELOW``; above it Stephens' finite-n approximation (absolute error < 1e-2, measured
    8e-3 at n = 300; it moves a Cauchy-combination term ``tan((0.5 - p) pi)`` by < 0.1, far below
    the threshold a rejection needs) saves the slow exact law.
    """
    s = np.sort(u, axis=1)  # NaN sort last
    m = np.count_nonzero(~np.isnan(s), axis=1)
    i = np.arange(1, s.shape[1] + 1)[None, :]
    with np.errstate(invalid="ignore", divide="ignore"):  # rows with m = 0 (no emitted token) get p = 1 below
        d_plus = np.nanmax(np.where(i <= m[:, None], i / m[:, None] - s, -np.inf), axis=1)
        d_minus = np.nanmax(np.where(i <= m[:, None], s - (i - 1) / m[:, None], -np.inf), axis=1)
    d = np.maximum(d_plus, d_minus)
    out = np.ones(len(m))
    ok = m > 0
    root = np.sqrt(np.maximum(m, 1))
    out[ok] = stats.kstwobign.sf(d[ok] * (root[ok] + 0.12 + 0.11 / root[ok]))  # Stephens (1970) finite-n form
    # the exact law (slow: Pomeranz recursion) only where a decision could hinge on it
    exact = ok & (m <= KS_EXACT_MAX) & (out < KS_EXACT_BELOW)
    out[exact] = stats.kstwo.sf(d[exact], m[exact])
    big = ok & (m > KS_EXACT_MAX)
    out[big] = stats.kstwobign.sf(d[big] * root[big])
    return np.clip(out, 0.0, 1.0)


@dataclass(frozen=True)
class FirstRejections:
    """How soon a battery rejects, over simulated seeds.

    Attributes
    ----------
    grid : np.ndarray, shape (points,)
        Sample sizes (rows) at which the fixed-n battery was evaluated (every n up to 40, then
        steps of 5%), up to the first where it rejected on every seed's stream (or ``max_n``).
    power : np.ndarray, shape (points,)
        Share of seeds on which the fixed-n battery, run once at that n, rejects: the battery's
        power curve (its sample-size function), from nested prefixes of each seed's stream.
    sequential : np.ndarray, shape (seeds,)
        E-process battery: exact stopping time per seed (checked after every row); ``inf`` = not
        stopped within ``max_n``.
    max_n : int
    cells, sequential_cells : tuple of str
    """

    grid: np.ndarray
    power: np.ndarray
    sequential: np.ndarray
    max_n: int
    cells: tuple[str, ...]
    sequential_cells: tuple[str, ...]

    def fixed_n_quantile(self, q: float) -> float:
        """Smallest grid n whose fixed-n power is >= q (``inf`` if none within ``max_n``).

        ``P(N_detect <= n) = power(n)`` makes this the q-quantile of "samples at which the
        fixed-n battery rejects" without optional stopping (each n is one pre-registered test).
        """
        hit = np.flatnonzero(self.power >= q - 1e-12)
        return float(self.grid[hit[0]]) if hit.size else math.inf

    def sequential_quantile(self, q: float) -> float:
        """q-quantile of the e-process stopping time (``inf`` if censored there)."""
        return float(np.quantile(self.sequential, q, method="higher"))


def n_grid(max_n: int) -> np.ndarray:
    """Sample sizes at which the fixed-n battery is evaluated."""
    grid = list(range(1, min(GRID_DENSE_UNTIL, max_n) + 1))
    while grid[-1] < max_n:
        grid.append(min(max_n, max(grid[-1] + 1, int(round(grid[-1] * GRID_RATIO)))))
    return np.array(grid)


def first_rejections(tl: TupleLaw, alt: np.ndarray, spec: BatterySpec, *, seeds: int, max_n: int,
                     seed: int = 0, sequential: bool = True) -> FirstRejections:
    """Simulate ``seeds`` independent streams from ``alt`` and find where each battery first rejects.

    Parameters
    ----------
    tl : TupleLaw
    alt : np.ndarray, shape (outcomes,), float64
        Law the rows are drawn from (``tl.target`` for a null run).
    spec : BatterySpec
    seeds : int
        Independent streams (>= 1).
    max_n : int
        Rows per stream; a battery that has not rejected by then is censored (``inf``).
    seed : int
        numpy SeedSequence entropy; stream ``s`` uses ``default_rng([seed, s])``.
    sequential : bool
        Also run the e-process battery.
    """
    count_cells = tl.cell_codes(spec)
    sw = min(spec.joint_tokens or tl.num_tokens, tl.num_tokens)  # surprisal window (runner: min(joint_tokens, max_new_tokens))
    s_code, s_law = tl.window(sw) if spec.surprisal else (None, None)
    names = (tuple(c[0] for c in count_cells) + ((f"surprisal@1..{sw}",) if spec.surprisal else ())
             + (("pit",) if spec.pit else ()))
    m = len(names)
    level = cell_level(spec.alpha, m, "gate")  # the runner's per-cell level: Monte Carlo resolution
    rngs = [np.random.default_rng([seed, s]) for s in range(seeds)]
    ids = np.stack([r.choice(len(alt), size=max_n, p=alt) for r in rngs])  # (S, max_n)
    first_violation = np.where(tl.violation[ids].any(axis=1), np.argmax(tl.violation[ids], axis=1) + 1, np.inf)
    u = None
    if spec.pit:
        v = np.stack([r.random((max_n, tl.num_tokens)) for r in rngs])
        u = tl.pit_lo[ids] + v * tl.pit_width[ids]  # NaN after EOS and on violating outcomes

    grid, power = [], []
    counts = np.zeros((seeds, len(tl.outcomes)), dtype=np.int64)
    prev = 0
    offsets = (np.arange(seeds) * len(tl.outcomes))[:, None]
    for n in n_grid(max_n):
        block = ids[:, prev:n] + offsets
        counts += np.bincount(block.ravel(), minlength=seeds * len(tl.outcomes)).reshape(seeds, -1)
        prev = n
        a = np.arange(seeds)
        pv = np.ones((a.size, m))
        for j, (_, code, expected) in enumerate(count_cells):
            cell_counts = np.zeros((a.size, expected.size), dtype=np.int64)
            np.add.at(cell_counts.T, code, counts[a].T)
            pv[:, j] = gof_pvalues(cell_counts, expected, pvalue_method="auto", alpha=level)
        col = len(count_cells)
        if spec.surprisal:
            s_counts = np.zeros((a.size, s_law.size), dtype=np.int64)
            np.add.at(s_counts.T, s_code, counts[a].T)
            clean = ~(s_counts[:, s_law == 0] > 0).any(axis=1)  # rows with a violation are rejected below anyway
            if clean.any():
                pv[clean, col], _ = surprisal_pvalues(s_counts[clean], s_law, alpha=level)
            col += 1
        if spec.pit:
            pv[:, col] = ks_uniform_pvalues(u[a, :n].reshape(a.size, -1))
        rejected = family_rejects(pv, spec.alpha) | (first_violation[a] <= n)
        grid.append(n)
        power.append(float(rejected.mean()))
        if rejected.all():
            break

    seq_names: tuple[str, ...] = ()
    seq = np.full(seeds, np.inf)
    if sequential:
        cells = [(name, code, expected) for name, code, expected in count_cells]
        if spec.tuple_e_process:
            cells.append(("tuple", np.arange(len(tl.outcomes)), tl.target))
        seq_names = tuple(c[0] for c in cells)
        level = spec.alpha / len(cells)
        for s in range(seeds):
            best = first_violation[s]
            for _, code, expected in cells:
                keep = expected > 0
                stream = code[ids[s]]
                ok = keep[stream]
                if not ok.all():  # a category with expected 0 is a support violation: stop there
                    best = min(best, int(np.argmax(~ok)) + 1)
                    stream = stream[: int(np.argmax(~ok))]
                if stream.size == 0:
                    continue
                res = e_process(stream, expected, alpha=level)
                if res.stopped_at is not None:
                    best = min(best, res.stopped_at)
            seq[s] = best
    return FirstRejections(np.array(grid), np.array(power), seq, max_n, names, seq_names)
