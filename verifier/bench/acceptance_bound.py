"""``specverify bench acceptance-bound``: how often a run calls a lossless decoder "ABOVE THE COUPLING BOUND".

Method (issue 28 item 2).  For every sample set of the suite (default ``suites/ci.toml``) whose
acceptance the runner audits against the canonical rule, the bound ``b = sum min(p, q)`` at the
prompt is the canonical rule's exact P(draft 1 accepted), from the exact first-round accepted-count
law the runner uses (:func:`verifier.runner.expected.accepted_count_law`, via
:func:`verifier.runner.cells.accepted_law`: ``b = 1 - law[0]``).  The reference decoder samples
exactly this law, so its position-1 accepted count in a set of ``n`` first rounds is
``Binomial(n, b)``; no lossless decoder drafting from this draft has a larger rate, and the test's
p-value only grows as the rate falls, so a set at ``b`` is the least favourable null.  Each simulated
run draws every set's count binomially and applies the runner's decision
(:func:`verifier.runner.acceptance.coupling_bound_check`: one-sided exact binomial p-value per set,
Holm over every set of the run at the suite's alpha times ``ACCUSATION_ALPHA_SHARE``), vectorised over runs.  Two scenarios:

* ``every set at the bound``: all sets of the run are lossless and at the bound (the global null);
  false accusations are any rejection;
* ``the suite as it is``: the sets of ``expect = "pass"`` decoders at the bound, every other set
  rejected with certainty (the least favourable case for them under Holm: each certain rejection
  raises the level of the rest); false accusations are rejections of a ``pass`` decoder's set.

Besides the simulated count, the exact union bound: Holm rejects a null set only if its p-value is
<= alpha / m0 (m0 = null sets), so ``P(any false accusation) <= sum_i P(p_i <= alpha / m0)``, each
term an exact binomial tail.  The rate per run gets a Clopper-Pearson 95% interval.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats as sps

from verifier.bench._common import md_table
from verifier.errors import invalid_argument

__all__ = ["HELP", "BoundSet", "ScenarioResult", "suite_bound_sets", "simulate", "register", "run", "render_markdown"]

HELP = "False 'ACCEPTANCE ABOVE THE COUPLING BOUND' notes of lossless decoders over simulated runs (exact binomial + Holm)."
DEFAULT_SUITE = "suites/ci.toml"
DEFAULT_RUNS = 10_000
DEFAULT_SEED = 20261202
CONFIDENCE = 0.95  # Clopper-Pearson interval of the false-accusation rate per run
_RUN_CHUNK = 2_000  # runs simulated at once (runs x sets p-values in memory)


@dataclass(frozen=True)
class BoundSet:
    """One audited sample set: its position-1 bound and first rounds."""

    set_id: str
    decoder: str
    expect: str
    rounds: int
    bound: float


@dataclass
class ScenarioResult:
    """False accusations of one scenario over ``runs`` simulated runs."""

    scenario: str
    runs: int
    sets: int
    null_sets: int
    runs_with_false_accusation: int
    false_accusations: int
    rate_ci: tuple[float, float]
    union_bound: float  # exact upper bound of P(any false accusation) per run
    alpha: float
    seed: int


def suite_bound_sets(suite_path: str, profile: str | None = None) -> tuple[list[BoundSet], float]:
    """The audited sets of a suite (models loaded, laws enumerated as the runner does) and its alpha."""
    from verifier.runner.cells import accepted_law
    from verifier.runner.context import SuiteContext
    from verifier.suite import load_suite

    suite = load_suite(suite_path, profile)
    ctx = SuiteContext(suite)
    sets = []
    for plan in ctx.plans:
        law = accepted_law(ctx, plan)
        if law is None:
            continue
        law = np.clip(np.asarray(law, dtype=np.float64), 0, None)
        sets.append(BoundSet(plan.set_id, plan.decoder.name, plan.decoder.expect, int(plan.samples),
                             float(1.0 - law[0] / law.sum())))
    return sets, float(suite.stats.alpha)


def _pvalues(x: np.ndarray, n: np.ndarray, b: np.ndarray) -> np.ndarray:
    """One-sided exact binomial p-values P(X >= x), X ~ Binomial(n, b) (as acceptance_audit's bound_test)."""
    return np.where(x > 0, sps.binom.sf(x - 1, n, b), 1.0)


def _union_bound(n: np.ndarray, b: np.ndarray, level: float) -> float:
    """sum_i P(p_i <= level) for sets at their bound: exact binomial tails at each set's critical count."""
    total = 0.0
    for ni, bi in zip(n, b):
        c = int(sps.binom.isf(level, ni, bi))  # P(X > c) <= level; lower c while the tail still fits
        while c > 0 and sps.binom.sf(c - 1, ni, bi) <= level:
            c -= 1
        while sps.binom.sf(c, ni, bi) > level:
            c += 1
        total += float(sps.binom.sf(c, ni, bi))  # P(X >= c + 1) = P(p-value <= level)
    return total


def simulate(sets: list[BoundSet], alpha: float, runs: int = DEFAULT_RUNS, seed: int = DEFAULT_SEED) -> list[ScenarioResult]:
    """Both scenarios over ``runs`` simulated runs (see the module docstring)."""
    from verifier.runner.acceptance import holm_reject

    if not isinstance(runs, int) or runs < 1:
        raise invalid_argument("runs", runs, "an int >= 1")
    n = np.array([s.rounds for s in sets])
    b = np.array([s.bound for s in sets])
    passing = np.array([s.expect == "pass" for s in sets])
    rng = np.random.default_rng(seed)
    scenarios = {"every set at the bound": np.ones(len(sets), bool), "the suite as it is": passing}
    counts = {k: [0, 0] for k in scenarios}
    done = 0
    while done < runs:
        chunk = min(_RUN_CHUNK, runs - done)
        x = rng.binomial(n, b, size=(chunk, len(sets)))  # the same draws serve both scenarios
        p = _pvalues(x, n, b)
        for name, null in scenarios.items():
            q = np.where(null, p, 0.0)  # a non-null set: rejected with certainty (p = 0)
            rejected, _ = holm_reject(q, alpha)
            false = rejected & null
            counts[name][0] += int(false.any(axis=1).sum())
            counts[name][1] += int(false.sum())
        done += chunk
    out = []
    for name, null in scenarios.items():
        hit, total = counts[name]
        ci = sps.binomtest(hit, runs).proportion_ci(CONFIDENCE, "exact")
        m0 = int(null.sum())
        out.append(ScenarioResult(name, runs, len(sets), m0, hit, total, (float(ci.low), float(ci.high)),
                                  _union_bound(n[null], b[null], alpha / m0) if m0 else 0.0, alpha, seed))
    return out


def render_markdown(results: list[ScenarioResult], sets: list[BoundSet]) -> str:
    rows = [[r.scenario, r.sets, r.null_sets, r.runs, r.runs_with_false_accusation, r.false_accusations,
             f"[{r.rate_ci[0]:.2g}, {r.rate_ci[1]:.2g}]", f"{r.union_bound:.2g}", f"{r.union_bound * r.runs:.2f}"]
            for r in results]
    bounds = sorted({(s.rounds, round(s.bound, 5)) for s in sets})
    head = (f"Acceptance-bound check (Holm at alpha = {results[0].alpha:g} over every audited set, one-sided exact "
            f"binomial), seed {results[0].seed}; sets' (first rounds, bound): "
            + ", ".join(f"({n}, {b})" for n, b in bounds))
    return head + "\n\n" + md_table(
        ["scenario", "sets", "lossless sets", "runs", "runs with a false accusation", "false accusations",
         f"rate per run ({CONFIDENCE:.0%} CI)", "exact bound per run", "expected in these runs (bound)"], rows)


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--suite", default=DEFAULT_SUITE, metavar="PATH", help=f"Suite file. Default: {DEFAULT_SUITE}.")
    parser.add_argument("--profile", default=None, help="Suite profile. Default: the suite's default_profile.")
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS, metavar="N", help=f"Simulated runs. Default: {DEFAULT_RUNS}.")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"Seed. Default: {DEFAULT_SEED}.")
    parser.add_argument("--format", choices=("markdown", "json"), default="markdown", help="Output format. Default: markdown.")


def run(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    from verifier.runner.acceptance import ACCUSATION_ALPHA_SHARE

    sets, alpha = suite_bound_sets(args.suite, args.profile)
    results = simulate(sets, alpha * ACCUSATION_ALPHA_SHARE, args.runs, args.seed)  # the level the runner uses
    if args.format == "json":
        print(json.dumps([asdict(r) for r in results], indent=1))
    else:
        print(render_markdown(results, sets))
        print(f"_{time.perf_counter() - t0:.0f} s_", file=sys.stderr)
    return 0
