"""``specverify bench coverage``: measured coverage of the TV effect interval of every TV cell.

Method.  For each law ``p0`` (the expected law of a cell), sample size ``n`` and scenario (the law
``p`` the rows are drawn from), ``replicates`` count vectors are drawn from Multinomial(n, p) and
each gets the effect interval exactly as :func:`verifier.stats.gof_test` computes it for a cell:
categories pooled data-blind from ``p0`` at ``n`` (expected count >= 10), one extra "outside the
support" category, :func:`verifier.stats.effect.tv_estimate`.  The interval's parameter is the TV
the test sees, ``TV(pool(p), pool(p0))``, computed exactly; *coverage* is the fraction of
replicates whose interval contains it, shown with its 95% Clopper-Pearson interval.  The goal is
coverage >= the nominal level (95%, the level in reports, and 99%, ``gof_test``'s default).
"0 excluded" is the fraction of null replicates whose interval lies above 0 -- a report that would
claim bias which is not there.

Laws.  ``shipped-384``: the shipped target's processed probs (T = 1) of the first token after the
prompt ``"def "`` (vocab 384); its alternatives mix in the shipped draft's probs on the same prompt.
``zipf-32k``: a Zipf-Mandelbrot law ``p_i ~ (i + 2.7)^-1.1`` over 32,768 tokens (a realistic
next-token law shape); its alternatives mix in a Zipf law of exponent 1.3 over a fixed random
permutation of the tokens.  Scenarios: ``null`` (p = p0), ``mix e`` (``p = (1 - e) p0 + e q``) and
``T 0.8`` (``p ~ p0^(1/0.8)``, a temperature error).

For reference the same replicates (up to ``--bootstrap-replicates``) also get the interval this
replaced: multinomial bootstrap around the observed frequencies (1000 resamples), lower end
``max(0, 2 T - q_hi)``, upper end ``q_hi``.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
import numpy as np
from scipy import stats

from verifier.bench._common import Stopwatch, md_table
from verifier.stats.effect import _tv_estimate
from verifier.stats.pooling import MIN_EXPECTED_COUNT, _pool

__all__ = ["HELP", "CoverageRow", "bench_laws", "measure_coverage", "run_coverage", "render_markdown", "register", "run"]

HELP = "Coverage of the TV effect interval over >= 1000 replicates at V = 384 and V = 32k, null and biased laws."
DEFAULT_REPLICATES = 1000
DEFAULT_SIZES = (1_000, 10_000)
LEVELS = (0.95, 0.99)  # the level in reports (runner.analysis.CI_LEVEL) and gof_test's default
BOOTSTRAP_RESAMPLES = 1000  # of the replaced interval, as it ran in the cells
ZIPF_VOCAB = 32_768
SEED = 20261201
INTERVAL_NOTE = (
    "with probability >= confidence, |T - tau| <= D / 2 <= (E D + t) / 2 for the plug-in T, the true pooled TV tau "
    "and D = ||p_hat - p||_1 (triangle inequality; McDiarmid, t = sqrt(2 ln(1/delta) / n)); E D <= "
    "min(sum sqrt(p0) + sqrt(2 K tau), sqrt(K - 1)) / sqrt(n) over the K categories, so inverting in tau gives an interval "
    "valid at every n, whatever the law. The point estimate is T minus its estimated bias (closed-form bootstrap bias), "
    "clipped into the interval.")


@dataclass
class CoverageRow:
    """Coverage of one (law, n, scenario)."""

    law: str
    vocab: int
    n: int
    scenario: str
    true_tv: float  # TV(pool(p), pool(p0)): the interval's parameter
    categories: int  # pooled categories + the "outside the support" one
    replicates: int
    covered: dict[str, int]  # level -> replicates whose interval contains true_tv
    zero_excluded: dict[str, int]  # level -> replicates whose interval lies above 0
    mean_width: dict[str, float]
    mean_plug_in: float
    mean_estimate: float
    bootstrap_replicates: int = 0
    bootstrap_covered: int = 0  # old interval at 99%
    bootstrap_zero_excluded: int = 0
    seconds: float = 0.0

    def coverage(self, level: float) -> tuple[float, float, float]:
        """(coverage, 95% Clopper-Pearson low, high) at ``level``."""
        k, m = self.covered[f"{level:g}"], self.replicates
        lo = float(stats.beta.ppf(0.025, k, m - k + 1)) if k else 0.0
        hi = float(stats.beta.isf(0.025, k + 1, m - k)) if k < m else 1.0
        return k / m, lo, hi

    @property
    def meets_goal(self) -> bool:
        return all(self.coverage(lv)[0] >= lv for lv in LEVELS)


def _zipf(vocab: int, exponent: float, shift: float = 2.7) -> np.ndarray:
    w = (np.arange(vocab) + shift) ** -exponent
    return w / w.sum()


def _shipped_laws(prompt: str = "def ") -> tuple[np.ndarray, np.ndarray]:
    """(target, draft) processed probs at T = 1 of the first token after ``prompt`` (shipped models)."""
    import torch

    from verifier.models import load_model, load_tokenizer, shipped_checkpoint
    from verifier.sampling import SamplingConfig, processed_probs

    tok = load_tokenizer(shipped_checkpoint("target"))
    ids = torch.tensor([tok.encode(prompt)])
    out = []
    for role in ("target", "draft"):
        model = load_model(shipped_checkpoint(role))
        with torch.no_grad():
            logits = model(ids).logits[0, -1].double().numpy()
        probs = np.asarray(processed_probs(torch.from_numpy(logits), SamplingConfig(temperature=1.0)), dtype=np.float64)
        out.append(probs / probs.sum())
    return out[0], out[1]


def bench_laws(which: tuple[str, ...] = ("shipped-384", "zipf-32k")) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``{law name: (p0, q)}``: the expected law and the law mixed into it by the biased scenarios."""
    laws = {}
    if "shipped-384" in which:
        laws["shipped-384"] = _shipped_laws()
    if "zipf-32k" in which:
        p0 = _zipf(ZIPF_VOCAB, 1.1)
        perm = np.random.default_rng(SEED).permutation(ZIPF_VOCAB)
        laws["zipf-32k"] = (p0, _zipf(ZIPF_VOCAB, 1.3)[perm])
    return laws


def _scenarios(p0: np.ndarray, q: np.ndarray) -> dict[str, np.ndarray]:
    sharp = p0 ** 1.25
    return {"null": p0, "mix 0.05": 0.95 * p0 + 0.05 * q, "mix 0.2": 0.8 * p0 + 0.2 * q, "T 0.8": sharp / sharp.sum()}


def _bootstrap_interval(counts: np.ndarray, probs: np.ndarray, rng: np.random.Generator, confidence: float) -> tuple[float, float]:
    """The interval the cells used before (module docstring)."""
    n = int(counts.sum())
    freq = counts / n
    est = 0.5 * float(np.abs(freq - probs).sum())
    tvs = 0.5 * np.abs(rng.multinomial(n, freq, size=BOOTSTRAP_RESAMPLES) / n - probs).sum(axis=1)
    q_hi = float(np.quantile(tvs, (1 + confidence) / 2))
    return max(0.0, 2 * est - q_hi), min(1.0, max(q_hi, est))


def measure_coverage(law: str, p0: np.ndarray, p: np.ndarray, n: int, scenario: str, *, replicates: int,
                     rng: np.random.Generator, bootstrap_replicates: int = 0) -> CoverageRow:
    """Coverage of the effect interval for rows drawn from ``p`` against the expected law ``p0`` at ``n``."""
    with Stopwatch() as sw:
        pooling = _pool(p0, n, MIN_EXPECTED_COUNT)
        expected = np.append(pooling.expected_probs, 0.0)
        true_probs = np.append(pooling.pool(p[None, :])[0], 0.0)
        true_tv = 0.5 * float(np.abs(true_probs - expected).sum())
        covered = {f"{lv:g}": 0 for lv in LEVELS}
        zero = {f"{lv:g}": 0 for lv in LEVELS}
        width = {f"{lv:g}": 0.0 for lv in LEVELS}
        plug = est = 0.0
        boot_cov = boot_zero = 0
        done = 0
        chunk = max(1, min(replicates, 4_000_000 // len(p)))
        while done < replicates:
            size = min(chunk, replicates - done)
            pooled = pooling.pool(rng.multinomial(n, p, size=size))
            for row in pooled:
                counts = np.append(row, 0)
                for lv in LEVELS:
                    e = _tv_estimate(counts, expected, lv)
                    key = f"{lv:g}"
                    covered[key] += e.ci_low - 1e-12 <= true_tv <= e.ci_high + 1e-12
                    zero[key] += e.ci_low > 0
                    width[key] += e.ci_high - e.ci_low
                plug += e.plug_in
                est += e.estimate
                if done < bootstrap_replicates:
                    lo, hi = _bootstrap_interval(counts, expected, rng, 0.99)
                    boot_cov += lo - 1e-12 <= true_tv <= hi + 1e-12
                    boot_zero += lo > 0
                done += 1
    return CoverageRow(law, len(p0), n, scenario, true_tv, len(expected), replicates, covered, zero,
                       {k: v / replicates for k, v in width.items()}, plug / replicates, est / replicates,
                       min(bootstrap_replicates, replicates), boot_cov, boot_zero, sw.seconds)


def run_coverage(*, replicates: int = DEFAULT_REPLICATES, sizes: tuple[int, ...] = DEFAULT_SIZES,
                 laws: tuple[str, ...] = ("shipped-384", "zipf-32k"), bootstrap_replicates: int = 200,
                 seed: int = SEED) -> list[CoverageRow]:
    """Every (law, n, scenario) row of the benchmark (module docstring)."""
    rng = np.random.default_rng(seed)
    rows = []
    for name, (p0, q) in bench_laws(laws).items():
        for n in sizes:
            for scenario, p in _scenarios(p0, q).items():
                rows.append(measure_coverage(name, p0, p, n, scenario, replicates=replicates, rng=rng,
                                             bootstrap_replicates=bootstrap_replicates))
    return rows


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def render_markdown(rows: list[CoverageRow]) -> str:
    headers = ["law", "V", "n", "scenario", "true TV (pooled)", "categories", "replicates",
               "coverage 95% (95% CI)", "coverage 99% (95% CI)", "0 excluded at 95%", "mean width 95%",
               "mean plug-in", "mean estimate", "old bootstrap 99%: coverage / 0 excluded"]
    body = []
    for r in rows:
        cov = {lv: r.coverage(lv) for lv in LEVELS}
        old = (f"{r.bootstrap_covered}/{r.bootstrap_replicates} / {r.bootstrap_zero_excluded}/{r.bootstrap_replicates}"
               if r.bootstrap_replicates else "")
        body.append([r.law, r.vocab, r.n, r.scenario, f"{r.true_tv:.4f}", r.categories, r.replicates,
                     *(f"{_pct(c)} ({_pct(lo)}-{_pct(hi)})" for c, lo, hi in (cov[lv] for lv in LEVELS)),
                     f"{r.zero_excluded['0.95']}/{r.replicates}", f"{r.mean_width['0.95']:.4f}",
                     f"{r.mean_plug_in:.4f}", f"{r.mean_estimate:.4f}", old])
    met = all(r.meets_goal for r in rows)
    return "\n".join([md_table(headers, body), "",
                      f"Coverage >= nominal in every row: {'yes' if met else '**no**'}."])


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--replicates", type=int, default=DEFAULT_REPLICATES, metavar="N",
                        help=f"Replicates per (law, n, scenario). Default: {DEFAULT_REPLICATES}.")
    parser.add_argument("--sizes", type=int, nargs="+", default=list(DEFAULT_SIZES), metavar="N",
                        help=f"Sample sizes. Default: {' '.join(map(str, DEFAULT_SIZES))}.")
    parser.add_argument("--laws", nargs="+", choices=("shipped-384", "zipf-32k"), default=["shipped-384", "zipf-32k"],
                        help="Expected laws. Default: both.")
    parser.add_argument("--bootstrap-replicates", type=int, default=200, metavar="N",
                        help="Replicates per row that also get the replaced bootstrap interval. Default: 200.")
    parser.add_argument("--seed", type=int, default=SEED, help=f"Default: {SEED}.")
    parser.add_argument("--format", choices=("markdown", "json"), default="markdown", help="Default: markdown.")


def run(args: argparse.Namespace) -> int:
    from verifier.errors import invalid_argument

    if args.replicates < 1 or any(n < 1 for n in args.sizes) or args.bootstrap_replicates < 0:
        raise invalid_argument("--replicates/--sizes/--bootstrap-replicates",
                               (args.replicates, args.sizes, args.bootstrap_replicates), "positive integers (bootstrap >= 0)")
    rows = run_coverage(replicates=args.replicates, sizes=tuple(args.sizes), laws=tuple(args.laws),
                        bootstrap_replicates=args.bootstrap_replicates, seed=args.seed)
    if args.format == "json":
        print(json.dumps([asdict(r) | {"meets_goal": r.meets_goal} for r in rows], indent=1))
    else:
        print(render_markdown(rows))
    return 0 if all(r.meets_goal for r in rows) else 1
