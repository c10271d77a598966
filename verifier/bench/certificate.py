"""``specverify bench certificate``: the samples a TV certificate needs: Pearson's, the weighted and the sign-mixture test.

Method (issue 27, "Fewer samples per certificate").  For each configuration of the shipped pair
(prompt "def ", ``--target-tv`` 0.03, family alpha 1e-3, power 0.99: ``specverify audit``'s plan,
:func:`verifier.audit.suite_builder.plan_audit`) every TV cell (``gof@t``, ``joint@1..J``) gets

* the **old n**: the plan's own -- the smallest n at which the pooled Pearson chi-square's MDE
  (noncentral chi-square, ``w >= 2 TV``) is <= 0.03 at the cell's Holm level;
* the **new n**: the smallest n at which the weighted identity statistic
  (:mod:`verifier.stats.identity`, Valiant--Valiant weights ``p^-2/3``, Monte Carlo null) detects
  every planned least favourable alternative at TV 0.03 with probability 0.99 at the *same* level, on
  the *same* data-blind pooling rule (expected count >= 10 at n).

A certificate needs its largest cell's n.  Both plans are asymptotic; the exact law decides.  On each
plan's binding cell (the cell with the largest n), seeded multinomial simulation from the exact pooled
law measures the power at the planned n and, where it is below 0.99, at n grown by 2% at a time until it
is not (the **exact n**, :func:`exact_check`); at that n it measures

* the **false-alarm rate**: ``--null-runs`` draws under the null, each rejected as the cell rejects it
  (Pearson: ``X2 >= chi2.isf(alpha, df)``, the asymptotic p-value the runner takes at these n; the
  weighted test: ``T`` above the 50th largest of the first ``50 / alpha - 1`` draws of the cell's own
  seeded null stream, which is exactly when its Besag--Clifford p-value is <= alpha); Clopper--Pearson
  95% interval, goal <= the cell's alpha;
* the **power**: ``--alt-runs`` draws from each alternative at TV 0.03 of :func:`alternatives` -- the planned least
  favourable ones (:func:`verifier.stats.identity.least_favourable`, ``delta ~ +-p^gamma``, gamma in 1/2, 2/3, 0.8, 1
  -- gamma = 1 is the alternative the Pearson MDE is tight at), the same magnitudes with random signs, random signs on
  the lightest half of the categories, mass moved into / out of the pooled tail -- the smallest rejection rate with its
  Clopper--Pearson interval, goal >= 0.99.

The **mixture n** (section 25 of reports/benchmarks.md): the sign-mixture statistic ``sum log cosh(a_i Z_i)``
(:mod:`verifier.stats.identity_mixture`; same pooling, same level, same null stream as the weighted test) planned by its
measured power (:func:`verifier.stats.identity_mixture.mixture_samples_needed`) on the cells that can bind
(``MIX_PLAN_SHARE``), then checked like the others.  ``--lower-bound`` adds the Neyman--Pearson power against sign
mixtures (:func:`mixture_np_power`), one sign per pair of categories and one per category.  ``--allocation`` adds the
planned alpha allocation's column (weighted Holm, the mixture test at each TV cell's planned level, every TV cell's
false alarms at its own level: :mod:`verifier.bench.certificate_alloc`, section 32).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import asdict, dataclass, field

import numpy as np
from scipy import stats as sps

from verifier.bench._common import md_table
from verifier.errors import invalid_argument

__all__ = ["HELP", "CONFIGS", "CellPlan", "ConfigPlan", "plan_config", "simulate_cell", "register", "run", "render_markdown"]

HELP = "Samples a TV 0.03 certificate needs on the shipped pair: Pearson's plan beside the weighted and the sign-mixture identity tests', with measured calibration and power."
TARGET_TV = 0.03
DEFAULT_NULL_RUNS = 200_000
DEFAULT_ALT_RUNS = 20_000
DEFAULT_SEED = 20261203
CONFIDENCE = 0.95
_CHUNK = 5_000
MIX_PLAN_SHARE = 0.85  # the mixture plan bisects n only for cells whose weighted n is >= this share of the largest; the
# others are measured once, at the certificate's mixture n (and planned after all where that power falls short)


def _configs():
    from verifier.sampling import SamplingConfig

    return (("T=1, k=1", SamplingConfig(), 1), ("T=1, k=3", SamplingConfig(), 3),
            ("T=0.7 top-k 8, k=1", SamplingConfig(temperature=0.7, top_k=8), 1),
            ("T=0.7 top-k 8, k=3", SamplingConfig(temperature=0.7, top_k=8), 3))


CONFIGS = ("T=1, k=1", "T=1, k=3", "T=0.7 top-k 8, k=1", "T=0.7 top-k 8, k=3")


@dataclass
class CellPlan:
    """One TV cell: its pooled categories at each n and both plans."""

    cell: str
    old_n: int | None
    new_n: int | None
    categories_old: int = 0
    categories_new: int = 0
    norm_ratio: float = math.nan  # ||p||_{2/3} / sqrt(K) of the pooled law at the new n (the theory's noise ratio)
    mix_n: int | None = None  # the sign-mixture test's plan (measured power, verifier.stats.identity_mixture)
    mix_covered: float | None = None  # not planned (weighted n < MIX_PLAN_SHARE of the largest): measured power at the certificate's n
    alloc_mix_n: int | None = None  # the mixture test's plan at the cell's planned level (verifier.bench.certificate_alloc)
    alloc_mix_covered: float | None = None  # not planned: measured power at the allocation certificate's n


@dataclass
class ConfigPlan:
    """One configuration: cells, the certificate's n by each test and the measured checks."""

    config: str
    cell_alpha: float
    cells: list
    old_n: int | None
    new_n: int | None
    old_binding: str = ""
    new_binding: str = ""
    old_n_exact: int | None = None  # the plan's n grown until the measured power reaches the goal (exact_check)
    new_n_exact: int | None = None
    mix_n: int | None = None
    mix_binding: str = ""
    mix_n_exact: int | None = None
    alloc_levels: dict = field(default_factory=dict)  # TV cell -> planned level (weighted Holm; certificate_alloc)
    alloc_n: int | None = None  # the weighted test's n at the planned levels (their equalised n)
    alloc_mix_n: int | None = None  # the mixture test's n at the planned levels
    alloc_mix_binding: str = ""
    alloc_mix_n_exact: int | None = None
    checks: dict = field(default_factory=dict)


def plan_config(pair, label: str, sampling, k: int, *, target_tv: float = TARGET_TV, power: float = 0.99,
                mixture: bool = True, allocation: bool = False):
    """The plans of one configuration (module docstring; ``mixture``: also the sign-mixture test's, minutes per
    cell; ``allocation``: also the planned alpha allocation's, :mod:`verifier.bench.certificate_alloc`).  Returns
    ``(ConfigPlan, laws by cell)``."""
    from verifier.audit.suite_builder import AuditSpec, _laws, plan_audit
    from verifier.stats.identity import identity_samples_needed
    from verifier.stats.pooling import _pool

    plan = plan_audit(AuditSpec(decoder="reference", target="shipped:target", sampling=sampling, num_draft_tokens=k,
                                target_tv=target_tv, power=power), pair=pair)
    law = _laws(pair, plan.prompts, sampling, max(plan.gof_positions), plan.joint_tokens)[0]
    laws = {f"gof@{t}": law.marginals[t] for t in plan.gof_positions}
    if law.joint is not None and plan.joint_tokens >= 2:
        laws[f"joint@1..{plan.joint_tokens}"] = law.joint
    cells = []
    for name, probs in laws.items():
        old = plan.needed.get(f"p0/{name}")
        new = identity_samples_needed(probs, target_tv, alpha=plan.cell_alpha, power=power)
        c = CellPlan(name, old, new)
        if old:
            c.categories_old = _pool(probs, old, 10.0).num_categories
        if new:
            p = _pool(probs, new, 10.0).expected_probs
            c.categories_new = int(p.size)
            c.norm_ratio = float(np.sum(p ** (2 / 3)) ** 1.5 / math.sqrt(p.size))
        cells.append(c)
    known_old = [c for c in cells if c.old_n]
    known_new = [c for c in cells if c.new_n]
    out = ConfigPlan(label, plan.cell_alpha, cells,
                     max((c.old_n for c in known_old), default=None), max((c.new_n for c in known_new), default=None))
    out.old_binding = max(known_old, key=lambda c: c.old_n).cell if known_old else ""
    out.new_binding = max(known_new, key=lambda c: c.new_n).cell if known_new else ""
    if mixture and out.new_n:
        _plan_mixture(out, laws, target_tv, power)
    if allocation and out.new_n:
        from verifier.bench.certificate_alloc import plan_allocation

        plan_allocation(out, laws, target_tv, power, plan.suite.stats.alpha)
    return out, laws


def _plan_mixture(out: ConfigPlan, laws: dict, target_tv: float, power: float) -> None:
    """The mixture test's plan of the cells that can bind (``MIX_PLAN_SHARE``), the others measured at its n."""
    from verifier.stats.identity_mixture import mixture_power, mixture_samples_needed

    later = []
    for c in out.cells:
        if c.new_n and c.new_n >= MIX_PLAN_SHARE * out.new_n:
            c.mix_n = mixture_samples_needed(laws[c.cell], target_tv, alpha=out.cell_alpha, power=power)
        else:
            later.append(c)
    known = [c for c in out.cells if c.mix_n]
    if not known:
        return
    cert = max(c.mix_n for c in known)
    for c in later:
        c.mix_covered = mixture_power(cert, laws[c.cell], target_tv, alpha=out.cell_alpha)[0]
        if c.mix_covered < power:
            c.mix_n, c.mix_covered = mixture_samples_needed(laws[c.cell], target_tv, alpha=out.cell_alpha, power=power), None
    known = [c for c in out.cells if c.mix_n]
    out.mix_binding = max(known, key=lambda c: c.mix_n).cell
    out.mix_n = max(c.mix_n for c in known)


def _interval(k: int, n: int) -> list[float]:
    ci = sps.binomtest(k, n).proportion_ci(confidence_level=CONFIDENCE, method="exact")
    return [float(ci.low), float(ci.high)]


def _rejections(rng, n: int, law: np.ndarray, runs: int, reject) -> int:
    hits = 0
    for start in range(0, runs, _CHUNK):
        hits += int(np.count_nonzero(reject(rng.multinomial(n, law, size=min(_CHUNK, runs - start)))))
    return hits


def alternatives(p: np.ndarray, eps: float, rng: np.random.Generator, runs: int):
    """The alternatives at TV ``eps`` every test is measured against: ``(label, [(law, draws), ...])``.

    * ``fixed gamma``: the planned least favourable laws (one sign split), gamma in 1/2, 2/3, 0.8, 1;
    * ``random gamma``: the same magnitudes ``c p^gamma`` with fair random signs, a new sign vector every
      ``runs / 20`` draws (gamma 0, 1/2, 2/3, 0.75, 0.8, 1, 1.2): what a test tuned to one sign split would miss;
    * ``light +``: mass ``eps`` moved onto the lightest half of the categories; ``light gamma``: random signs on the
      lightest half only (gamma 0 and 1, where those categories can carry the whole TV);
    * ``tail +`` / ``tail -``: mass ``eps`` moved into (out of, where it holds that much) the last pooled category
      (the pooled tail where there is one), proportionally from (to) the others.
    """
    from verifier.stats.identity import ALTERNATIVE_EXPONENTS, least_favourable
    from verifier.stats.identity_mixture import SIGN_GROUPS, random_sign_law

    for gamma in ALTERNATIVE_EXPONENTS:
        yield f"fixed {gamma:.3g}", [(least_favourable(p, eps, gamma), runs)]
    per = max(1, runs // SIGN_GROUPS)
    for gamma in (0.0, 0.5, 2 / 3, 0.75, 0.8, 1.0, 1.2):
        yield f"random {gamma:.3g}", [(random_sign_law(p, eps, gamma, rng), per) for _ in range(SIGN_GROUPS)]
    light = p <= np.median(p)
    mass = float(p[light].sum())
    if light.sum() >= 2:
        q = p * (1 - eps / (1 - mass))  # mass eps moved onto the light half, proportionally to p there
        q[light] = p[light] * (1 + eps / mass)
        yield "light +", [(q, runs)]
    for gamma in (0.0, 1.0):  # random signs on the light half alone, where |delta_i| <= p_i allows the whole TV
        c = 2 * eps / float(np.sum(p[light] ** gamma)) if light.sum() >= 2 else math.inf
        if c * np.max(p[light] ** (gamma - 1), initial=math.inf) < 1:
            laws = []
            for _ in range(SIGN_GROUPS):
                q = p.copy()
                q[light] = random_sign_law(p[light] / mass, eps / mass, gamma, rng) * mass
                laws.append((q, per))
            yield f"light {gamma:.3g}", laws
    for sign in (1.0, -1.0):
        if sign < 0 and p[-1] <= eps:
            continue
        q = p * (1 - sign * eps / (1 - p[-1]))
        q[-1] = p[-1] + sign * eps
        yield f"tail {'+' if sign > 0 else '-'}", [(q, runs)]


def simulate_cell(probs: np.ndarray, n: int, alpha: float, test: str, *, null_runs: int, alt_runs: int, seed: int,
                  target_tv: float = TARGET_TV) -> dict:
    """Measured false-alarm rate and power at TV ``target_tv`` of one cell at ``n`` (module docstring).

    Parameters
    ----------
    probs : np.ndarray, shape (categories,), float64
        The cell's exact law (pooled here at ``n`` as the test pools it).
    n : int
    alpha : float
        The cell's level.
    test : {"pearson", "weighted", "mixture"}
    null_runs, alt_runs : int
        Simulated runs under the null and under each alternative.
    seed : int

    Returns
    -------
    dict
        ``false_alarms``, ``rate``, ``rate_ci``, ``power`` (smallest over :func:`alternatives`), ``power_ci``,
        ``worst`` (its label) and ``power_by_alternative``.

    Raises
    ------
    InvalidArgumentError
        ``test`` unknown.
    """
    import functools

    from verifier.stats.identity import _decision_threshold, identity_statistic
    from verifier.stats.identity_mixture import _key, mixture_statistic
    from verifier.stats.pooling import _pool

    p = _pool(probs, n, 10.0).expected_probs
    if test == "pearson":
        crit = float(sps.chi2.isf(alpha, p.size - 1))

        def reject(x):
            return (((x - n * p) ** 2) / (n * p)).sum(axis=1) >= crit
    elif test == "weighted":
        # identity_test's Besag-Clifford p-value is <= alpha iff fewer than h = 50 of the first ceil(h / alpha) - 1
        # null draws of the cell's stream reach T, i.e. iff T is above their h-th largest
        crit = _decision_threshold(p, n, alpha)

        def reject(x):
            return identity_statistic(x, p) > crit + 1e-9 * max(abs(crit), 1.0)
    elif test == "mixture":  # the same Besag-Clifford decision, on the mixture statistic of the same seeded stream
        stat = functools.partial(mixture_statistic, tune_tv=target_tv)  # tuned to the TV it is measured at
        crit = _decision_threshold(p, n, alpha, stat, _key(target_tv))

        def reject(x):
            return stat(x, p) > crit + 1e-9 * max(abs(crit), 1.0)
    else:
        raise invalid_argument("test", test, "'pearson' | 'weighted' | 'mixture'")
    rng = np.random.default_rng(seed)
    fa = _rejections(rng, n, p, null_runs, reject) if null_runs else 0
    hits, runs = {}, {}
    for label, laws in alternatives(p, target_tv, rng, alt_runs):
        hits[label] = sum(_rejections(rng, n, q, m, reject) for q, m in laws)
        runs[label] = sum(m for _, m in laws)
    worst = min(hits, key=lambda k: hits[k] / runs[k])
    return {"test": test, "n": n, "alpha": alpha, "categories": int(p.size), "null_runs": null_runs,
            "false_alarms": fa, "rate": fa / null_runs if null_runs else math.nan,
            "rate_ci": _interval(fa, null_runs) if null_runs else None, "alt_runs": alt_runs,
            "power": hits[worst] / runs[worst], "power_ci": _interval(hits[worst], runs[worst]), "worst": worst,
            "power_by_alternative": {k: hits[k] / runs[k] for k in hits}}


def exact_check(probs: np.ndarray, n: int, alpha: float, test: str, *, null_runs: int, alt_runs: int, seed: int,
                power: float = 0.99, step: float = 0.02, max_steps: int = 15) -> dict:
    """:func:`simulate_cell` at the planned ``n``, and where the measured power is below ``power``, at n grown by
    ``step`` (2%) until it is not: the certificate's n under the exact law (``n`` in the result; ``planned_n`` the plan's).

    Raises
    ------
    InvalidArgumentError
        ``test`` unknown.
    """
    planned = n
    for _ in range(max_steps):
        probe = simulate_cell(probs, n, alpha, test, null_runs=0, alt_runs=alt_runs, seed=seed)
        if probe["power"] >= power:
            break
        n = int(math.ceil(n * (1 + step)))
    out = simulate_cell(probs, n, alpha, test, null_runs=null_runs, alt_runs=alt_runs, seed=seed + 7)
    return {**out, "planned_n": planned, "probe_power_at_plan": None if n == planned else "below"}


def mixture_np_power(probs: np.ndarray, n: int, alpha: float, gamma: float, *, target_tv: float = TARGET_TV,
                     grid: int = 1 << 17, paired: bool = True) -> float:
    """Power of the Neyman-Pearson test of the null against a random-sign mixture of alternatives at TV ``target_tv``:
    an upper bound on the worst-case power of *any* level-``alpha`` test of this cell at ``n`` (Gaussian limit).

    The pooled categories (at n) are paired by prob; each pair moves ``+-c m`` (``m`` the pair's mean ``p^gamma``,
    ``sum |delta| = 2 target_tv``) with an independent fair sign.  ``paired=False``: every category its own fair sign
    (``delta_i = +-c p_i^gamma``), twice the signs, hence a harder mixture -- but its laws do not sum to one; renormalised
    their TV is 0.029 on average, 0.023 at the 0.5% quantile on the T = 1 joint cell, so it is a bound only for
    alternatives of that spread of TV (reports/benchmarks.md section 25).  With independent standardised counts the
    likelihood ratio is a product over pairs of ``cosh(V) exp(-s^2 / 2)``, ``V ~ N(0, s^2)`` under the null and
    ``N(s^2, s^2)`` under the mixture; the law of ``sum log cosh(V)`` is a convolution of one-dimensional laws
    (FFT on a grid of ``grid`` points).

    Returns
    -------
    float
        The mixture's rejection probability at the null's ``1 - alpha`` quantile of the LR statistic.
    """
    from scipy import signal

    from verifier.stats.pooling import _pool

    p = _pool(probs, n, 10.0).expected_probs
    if paired:
        order = np.argsort(-p, kind="stable")
        m = len(p) // 2
        i, j = order[0:2 * m:2], order[1:2 * m:2]
        mag = 0.5 * (p[i] ** gamma + p[j] ** gamma)
        d = target_tv / mag.sum() * mag
        s2 = n * d * d * (1 / p[i] + 1 / p[j])
    else:
        d = 2 * target_tv / np.sum(p ** gamma) * p ** gamma
        s2 = n * d * d / p
    s = np.sqrt(s2)
    hi = float(s2.sum()) * 1.5 + 50 * math.sqrt(float(np.sum(s2 ** 2)) + 1)
    step = hi / grid
    edges = (np.arange(grid + 1) - 0.5) * step
    a = np.where(edges < 0, 0.0, np.arccosh(np.exp(np.clip(edges, 0, 700))))

    def law(mixture: bool) -> np.ndarray:
        total = None
        for sk in s:
            cdf = (sps.norm.cdf((a - sk * sk) / sk) - sps.norm.cdf((-a - sk * sk) / sk)) if mixture else 2 * sps.norm.cdf(a / sk) - 1
            f = np.diff(cdf)
            f[-1] += 1 - cdf[-1]
            total = f if total is None else signal.fftconvolve(total, f)[:grid].clip(0)
        return total

    f0, f1 = law(False), law(True)
    tail = np.cumsum(f0[::-1])[::-1]
    return float(f1[int(np.argmax(tail <= alpha)):].sum())


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--configs", default="all", metavar="LIST",
                        help="Comma-separated indices 1-4 of " + "; ".join(CONFIGS) + ". Default: all.")
    parser.add_argument("--null-runs", type=int, default=DEFAULT_NULL_RUNS, metavar="N",
                        help=f"Simulated null runs per binding cell (0: plans only). Default: {DEFAULT_NULL_RUNS}.")
    parser.add_argument("--alt-runs", type=int, default=DEFAULT_ALT_RUNS, metavar="N",
                        help=f"Simulated runs per alternative. Default: {DEFAULT_ALT_RUNS}.")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"Seed. Default: {DEFAULT_SEED}.")
    parser.add_argument("--lower-bound", action="store_true",
                        help="Also the Neyman-Pearson bound for any test on the binding cell at 20,000 rows and at half the old n "
                             "(sign per pair of categories, and per category).")
    parser.add_argument("--no-mixture", action="store_true",
                        help="Skip the sign-mixture test (its plan measures power by simulation: minutes per cell).")
    parser.add_argument("--allocation", action="store_true",
                        help="Also the planned alpha allocation (weighted Holm; the mixture test at each TV cell's planned level): "
                             "minutes per configuration.")
    parser.add_argument("--format", choices=("markdown", "json"), default="markdown", help="Output format. Default: markdown.")


def _selected(text: str) -> list[int]:
    if text == "all":
        return list(range(len(CONFIGS)))
    try:
        picks = [int(v) - 1 for v in text.split(",")]
    except ValueError:
        picks = [-1]
    if not picks or any(not 0 <= i < len(CONFIGS) for i in picks):
        raise invalid_argument("--configs", text, f"'all' or comma-separated indices 1-{len(CONFIGS)}")
    return picks


def run(args: argparse.Namespace) -> int:
    picks = _selected(args.configs)
    for name in ("null_runs", "alt_runs"):
        if getattr(args, name) < 0 or (name == "alt_runs" and args.alt_runs < 1):
            raise invalid_argument(f"--{name.replace('_', '-')}", getattr(args, name), "a non-negative integer (alt: >= 1)")
    from verifier.runner.models import load_pair
    from verifier.suite.schema import ModelPair

    t0, c0 = time.perf_counter(), time.process_time()
    pair = load_pair(ModelPair("audit", "shipped:target", "shipped:draft", "cpu", "float32"), ".")
    results = []
    for i in picks:
        label, sampling, k = _configs()[i]
        alloc = getattr(args, "allocation", False)
        plan, laws = plan_config(pair, label, sampling, k, mixture=not getattr(args, "no_mixture", False), allocation=alloc)
        if args.null_runs and plan.old_n and plan.new_n:
            for key, cell, n, test, seed in (("old", plan.old_binding, plan.old_n, "pearson", args.seed + i),
                                             ("new", plan.new_binding, plan.new_n, "weighted", args.seed + 100 + i),
                                             ("mix", plan.mix_binding, plan.mix_n, "mixture", args.seed + 200 + i)):
                if n:
                    plan.checks[key] = exact_check(laws[cell], n, plan.cell_alpha, test, null_runs=args.null_runs,
                                                   alt_runs=args.alt_runs, seed=seed)
            plan.old_n_exact, plan.new_n_exact = plan.checks["old"]["n"], plan.checks["new"]["n"]
            plan.mix_n_exact = plan.checks["mix"]["n"] if "mix" in plan.checks else None
            if alloc:
                from verifier.bench.certificate_alloc import check_allocation

                check_allocation(plan, laws, exact_check=exact_check, simulate_cell=simulate_cell,
                                 null_runs=args.null_runs, alt_runs=args.alt_runs, seed=args.seed + 300 + i)
        if getattr(args, "lower_bound", False) and plan.old_n:
            cell = laws[plan.new_binding or plan.old_binding]
            plan.checks["lower_bound"] = {f"n={m}, {'pairs' if paired else 'categories'}":
                                          {f"{g:g}": round(mixture_np_power(cell, m, plan.cell_alpha, g, paired=paired), 4)
                                           for g in (0.5, 2 / 3, 0.75, 0.8, 1.0)}
                                          for m in (20_000, plan.old_n // 2) for paired in (True, False)}
        results.append(plan)
        print(f"[{label}: old n {plan.old_n}, weighted n {plan.new_n}, mixture n {plan.mix_n}, "
              f"planned levels {plan.alloc_levels}: weighted n {plan.alloc_n}, mixture n {plan.alloc_mix_n}, "
              f"{time.perf_counter() - t0:.0f} s]", file=sys.stderr, flush=True)
    if args.format == "json":
        print(json.dumps([asdict(r) for r in results], indent=1))
    else:
        print(render_markdown(results))
    print(f"_{time.perf_counter() - t0:.0f} s wall, {time.process_time() - c0:.0f} s CPU_", file=sys.stderr)
    return 0


def _fmt_ci(ci) -> str:
    return f"[{ci[0]:.3g}, {ci[1]:.3g}]"


def _measured(check) -> list[str]:
    if not check:
        return ["-", "-", "-"]
    fixed = {k: v for k, v in check["power_by_alternative"].items() if k.startswith("fixed")}
    worst_fixed = min(fixed, key=fixed.get)
    return [f"{check['n']:,}", f"{check['false_alarms']}/{check['null_runs']:,} = {check['rate']:.2g} {_fmt_ci(check['rate_ci'])}",
            f"{check['power']:.4f} {_fmt_ci(check['power_ci'])} ({check['worst']}); planned set only: "
            f"{fixed[worst_fixed]:.4f} ({worst_fixed})"]


def render_markdown(results) -> str:
    """Plans (Pearson, weighted and mixture n side by side), measured calibration and power, per-cell plans and
    the lower bounds."""
    rows, checks = [], []
    for r in results:
        def ratio(n, exact):
            text = f"{n:,} ({n / r.old_n:.3f}x)" if n and r.old_n else ("unreachable" if not n else f"{n:,}")
            return text + (f"; exact {exact:,} ({exact / r.old_n_exact:.3f}x exact)" if exact and r.old_n_exact else "")
        rows.append([r.config, f"{r.cell_alpha:.3g}", f"{r.old_n:,} ({r.old_binding})" if r.old_n else "unreachable",
                     ratio(r.new_n, r.new_n_exact) + f" ({r.new_binding})",
                     (ratio(r.mix_n, r.mix_n_exact) + f" ({r.mix_binding})") if r.mix_n else "-"])
        for key, name in (("old", "Pearson"), ("new", "weighted"), ("mix", "mixture")):
            if key in r.checks:
                checks.append([r.config, name] + _measured(r.checks[key]))
    out = [md_table(["config", "cell alpha", "Pearson n (binding cell)", "weighted n (x Pearson; exact)",
                     "mixture n (x Pearson; exact)"], rows)]
    if checks:
        out.append(md_table(["config", "test", "exact n (grown 2% at a time until the measured power is >= 0.99)",
                             "false alarms at the exact n (95% CI)",
                             "power at TV 0.03, worst of all alternatives (95% CI); worst planned (fixed-sign) one"], checks))
    cell_rows = []
    for r in results:
        for c in r.cells:
            cell_rows.append([r.config, c.cell, f"{c.old_n:,}" if c.old_n else "-", str(c.categories_old or "-"),
                              f"{c.new_n:,}" if c.new_n else "-", str(c.categories_new or "-"),
                              f"{c.new_n / c.old_n:.3f}" if c.old_n and c.new_n else "-",
                              f"{c.norm_ratio:.3f}" if math.isfinite(c.norm_ratio) else "-",
                              f"{c.mix_n:,}" if c.mix_n else (f"power {c.mix_covered:.4f} at the certificate's n"
                                                               if c.mix_covered is not None else "-"),
                              f"{c.mix_n / c.old_n:.3f}" if c.old_n and c.mix_n else "-"])
    out.append(md_table(["config", "cell", "old n", "categories at old n", "new n", "categories at new n", "new / old",
                         "||p||_2/3 / sqrt(K) at new n", "mixture n", "mixture / old"], cell_rows))
    bounds = [[r.config, r.new_binding, n_label, ", ".join(f"gamma {g}: {v}" for g, v in by.items())]
              for r in results for n_label, by in r.checks.get("lower_bound", {}).items()]
    if bounds:
        out.append(md_table(["config", "cell", "rows, signs", "power of the Neyman-Pearson test against the sign mixture"],
                            bounds))
    from verifier.bench.certificate_alloc import render_allocation

    return "\n\n".join(out + render_allocation(results))
