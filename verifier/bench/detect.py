"""``specverify bench detect``: samples to detect each mutant, against the Neyman–Pearson oracle.

Method.  For every biased rule of :data:`verifier.exact.RULES` on every standard case where its
exact law differs from the target's (:func:`verifier.exact.standard_cases`: the seeds' single
steps with k = 1, N = 1, and the tabular pairs with k = 2, N = 3), rows of N emitted tokens are
drawn iid from the rule's exact law (:func:`verifier.exact.n_token_law`) -- cheap, no decoder --
and fed to the harness's test battery (:mod:`verifier.bench._battery`) at family-wise alpha 0.01:

* **fixed-n**: the runner's cells (gof@t, joint, randomized-PIT KS; gate = Holm + Cauchy) run
  as one pre-registered test at each n (every n up to 40, then a 5% grid); its power curve
  ``power(n) = P(reject at n)`` over the seeds is the sample-size function, and "samples at which it
  rejects" has quantiles ``n_q = min{n : power(n) >= q}`` (median q = .5, p90 q = .9; no optional
  stopping: each n is a separate fixed-n test on a prefix of the seed's stream);
* **sequential**: Dirichlet-multinomial e-processes on the count cells, union bound over cells,
  stopped at the first row where one crosses ``m / alpha`` (anytime-valid).

Two batteries: ``default`` = the suite defaults (gof@1,2 + joint@1..2 + surprisal@1..2 + pit) and
``window`` = every position of the compared window, as ``suites/ci.toml`` configures its tabular sets
(gof@1..N + joint@1..N + surprisal@1..N + pit); its sequential form adds an e-process on the whole
N-token tuple.  Count cells use :func:`verifier.stats.gof_test`'s small-sample regime (finer pooling
with Monte Carlo p-values) exactly as the runner does.  Over ``--seeds`` streams (default 100) the
median and 90th percentile are reported next to the oracle n: the smallest n at which the most powerful (likelihood-ratio)
test of the target law against the rule's law reaches power 0.99 at alpha 0.01
(:mod:`verifier.bench._oracle`, exact enumeration or saddlepoint).  Ratio = median / oracle n (the
issue's figure); ``n99 / oracle`` compares like with like (the battery's own power-0.99 n, from
the seeds, against the oracle's).  "Oracle n at cell level" is a diagnostic: the oracle's n at the
battery's strictest per-cell level ``alpha / (2 m)`` (m cells), i.e. had the oracle paid the
battery's multiplicity; where the oracle needs a handful of samples that price alone is most of
a 1.5x budget.  Streams are ``--max-factor`` x the oracle n long; a quantile
not reached within them shows as ``>max``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any, Sequence

from verifier.bench._battery import BatterySpec, TupleLaw, first_rejections
from verifier.bench._common import check_detect_args, fmt_n, fmt_ratio, md_table, names_from, row_json, write_out
from verifier.bench._oracle import np_oracle_samples
from verifier.runner.verdict import cell_level

__all__ = ["HELP", "DetectRow", "GOAL_RATIO", "detect_rows", "detect_decoder_rows", "detect_penalty_rows", "register", "run",
           "render_markdown"]

HELP = "Samples to detect each mutant rule (median/p90 over seeds) vs the Neyman-Pearson oracle n."
GOAL_RATIO = 1.5  # issue 7: median samples to detect <= 1.5 x the oracle n, for every mutant
DEFAULT_SEEDS = 100
DEFAULT_ALPHA = 0.01
DEFAULT_POWER = 0.99
DEFAULT_MAX_FACTOR = 5.0
MIN_STREAM = 200  # rows per stream at least, whatever the oracle says


@dataclass
class DetectRow:
    """One (rule, case, battery) measurement; sample sizes in rows of ``num_tokens`` emitted tokens."""

    rule: str
    declared: str
    case: str
    battery: str
    cells: str
    num_draft_tokens: int
    num_tokens: int
    tv: float
    oracle_n: int
    oracle_method: str
    fixed_median: float
    fixed_p90: float
    fixed_p99: float
    seq_median: float
    seq_p90: float
    seq_p99: float
    max_n: int
    seeds: int
    seconds: float
    oracle_n_cell: int = 0  # oracle n at the battery's strictest per-cell level alpha / (2 m) (diagnostic)

    @property
    def fixed_ratio(self) -> float:
        return self.fixed_median / self.oracle_n

    @property
    def seq_ratio(self) -> float:
        return self.seq_median / self.oracle_n

    @property
    def best_ratio(self) -> float:
        return min(self.fixed_ratio, self.seq_ratio)

    def to_json(self) -> dict[str, Any]:
        return row_json(self, fixed_ratio=self.fixed_ratio, seq_ratio=self.seq_ratio)


def batteries(num_tokens: int, alpha: float) -> dict[str, BatterySpec]:
    """The two batteries measured on a case comparing ``num_tokens`` emitted tokens.

    ``default``: the suite defaults (gof@1,2, joint@1..2, surprisal@1..2, pit).  ``window``: every
    position of the compared window (gof@1..N, joint@1..N when N >= 2, surprisal@1..N, pit), as
    ``suites/ci.toml`` sets its tabular sample sets, and for the sequential form an e-process on
    the whole N-token tuple as well.
    """
    default = BatterySpec(gof_positions=(1, 2), joint_tokens=2, surprisal=True, pit=True, alpha=alpha)
    window = BatterySpec(gof_positions=tuple(range(1, num_tokens + 1)), joint_tokens=num_tokens if num_tokens >= 2 else 0,
                         surprisal=True, pit=True, alpha=alpha, tuple_e_process=num_tokens >= 2)
    return {"default": default, "window": window}


def detect_rows(rules: Sequence[str] | None = None, cases: Sequence[str] | None = None, *, seeds: int = DEFAULT_SEEDS,
                alpha: float = DEFAULT_ALPHA, power: float = DEFAULT_POWER, max_factor: float = DEFAULT_MAX_FACTOR,
                seed: int = 0, progress=None) -> list[DetectRow]:
    """Measure samples to detect for every (biased rule, case where it is biased, battery).

    Parameters
    ----------
    rules, cases : sequence of str, optional
        Names from :data:`verifier.exact.RULES` / :func:`verifier.exact.standard_cases`; default all
        (rules declared ``exact`` have nothing to detect and are skipped).
    seeds : int, default 100
        Independent simulated streams per (rule, case).
    alpha, power : float
        Family-wise level of the batteries and of the oracle; oracle power.
    max_factor : float, default 5
        Stream length = ``max(MIN_STREAM, max_factor * oracle n)`` rows.
    seed : int
        Base seed (stream ``s`` of a row uses ``numpy.random.default_rng([seed + row index, s])``).
    progress : callable(str) or None

    Returns
    -------
    list[DetectRow]

    Raises
    ------
    InvalidArgumentError
        Unknown rule or case name, seeds < 1, alpha/power outside (0, 1), max_factor < 1.
    """
    from verifier.exact import RULES, n_token_law, standard_cases, target_law

    all_cases = {c.name: c for c in standard_cases()}
    rule_names = names_from("rules", rules, RULES)
    case_names = names_from("cases", cases, all_cases)
    check_detect_args(seeds=seeds, alpha=alpha, power=power, max_factor=max_factor)

    rows: list[DetectRow] = []
    for ci, cname in enumerate(case_names):
        case = all_cases[cname]
        tlaw = target_law(case.target, case.prefix, case.num_tokens)
        laws = {}
        for r in rule_names:
            if RULES[r].declared == "exact":
                continue
            law = n_token_law(case.target, case.draft, case.prefix, case.num_draft_tokens, case.num_tokens, r)
            if law != tlaw:
                laws[r] = law
        if not laws:
            continue
        tl = TupleLaw(tlaw, lambda pre, c=case: c.target.probs(tuple(c.prefix) + tuple(pre)), case.target.vocab_size,
                      list(laws.values()))
        for ri, (r, law) in enumerate(laws.items()):
            rows += _measure(tl, tlaw, law, batteries(case.num_tokens, alpha), rule=r, declared=RULES[r].declared,
                             case=cname, num_draft_tokens=case.num_draft_tokens, num_tokens=case.num_tokens,
                             seeds=seeds, alpha=alpha, power=power, max_factor=max_factor, seed=seed + 1000 * ci + ri,
                             progress=progress)
    return rows


def _measure(tl: TupleLaw, tlaw: dict, law: dict, specs: dict[str, BatterySpec], *, rule: str, declared: str, case: str,
             num_draft_tokens: int, num_tokens: int, seeds: int, alpha: float, power: float, max_factor: float,
             seed: int, progress) -> list[DetectRow]:
    from verifier.exact import total_variation

    oracle = np_oracle_samples(tlaw, law, alpha=alpha, power=power)
    max_n = int(max(MIN_STREAM, math.ceil(max_factor * oracle.n)))
    rows = []
    for bname, spec in specs.items():
        t0 = time.perf_counter()
        fr = first_rejections(tl, tl.vector(law), spec, seeds=seeds, max_n=max_n, seed=seed)
        level = cell_level(alpha, len(fr.cells), "gate")
        oracle_cell = np_oracle_samples(tlaw, law, alpha=level, power=power).n
        row = DetectRow(
            rule=rule, declared=declared, case=case, battery=bname,
            cells=" + ".join(fr.cells) + " | seq: " + " + ".join(fr.sequential_cells),
            num_draft_tokens=num_draft_tokens, num_tokens=num_tokens,
            tv=float(total_variation(law, tlaw)), oracle_n=oracle.n, oracle_method=oracle.method,
            fixed_median=fr.fixed_n_quantile(0.5), fixed_p90=fr.fixed_n_quantile(0.9),
            fixed_p99=fr.fixed_n_quantile(0.99), seq_median=fr.sequential_quantile(0.5),
            seq_p90=fr.sequential_quantile(0.9), seq_p99=fr.sequential_quantile(0.99),
            max_n=max_n, seeds=seeds, seconds=time.perf_counter() - t0, oracle_n_cell=oracle_cell,
        )
        rows.append(row)
        if progress:
            progress(f"  {rule:<26} {case:<22} {bname:<8} oracle {oracle.n:>5}  fixed-n median "
                     f"{fmt_n(row.fixed_median, max_n):>6} ({fmt_ratio(row.fixed_ratio)})  e-process "
                     f"{fmt_n(row.seq_median, max_n):>6} ({fmt_ratio(row.seq_ratio)})  [{row.seconds:.1f}s]")
    return rows


def detect_decoder_rows(suite_path: str = "suites/ci.toml", *, seeds: int = DEFAULT_SEEDS, alpha: float = DEFAULT_ALPHA,
                        power: float = DEFAULT_POWER, max_factor: float = DEFAULT_MAX_FACTOR, seed: int = 0,
                        progress=None) -> tuple[list[DetectRow], list[tuple[str, str, str]]]:
    """Decoder-level rows: each ``detect`` decoder of the suite on each of its tabular sample sets whose
    exact law is known (:mod:`verifier.bench._decoder_laws`), with the suite's own cells as the battery
    (``suite``; the ``accepted`` cell left out, see :mod:`verifier.bench._battery`).

    Returns
    -------
    rows : list[DetectRow]
        ``rule`` is the decoder name, ``case`` the sample set.
    skipped : list of (decoder, sample set, reason)
    """
    from verifier.bench._decoder_laws import suite_decoder_cases

    check_detect_args(seeds=seeds, alpha=alpha, power=power, max_factor=max_factor)
    rows: list[DetectRow] = []
    skipped = []
    for i, c in enumerate(suite_decoder_cases(suite_path)):
        if c.law is None:
            skipped.append((c.decoder, c.set_label, c.note))
            continue
        tl = TupleLaw(c.target_law, lambda pre, t=c.target, pr=c.prefix: t.probs(pr + tuple(pre)), c.target.vocab_size, [c.law])
        jt = c.joint_tokens if "joint" in c.tests and c.num_tokens >= c.joint_tokens else 0
        spec = BatterySpec(gof_positions=tuple(t for t in c.gof_positions if t <= c.num_tokens) if "gof" in c.tests else (),
                           joint_tokens=jt, surprisal="surprisal" in c.tests, pit="pit" in c.tests, alpha=alpha,
                           tuple_e_process=True)
        rows += _measure(tl, c.target_law, c.law, {"suite": spec}, rule=c.decoder, declared="decoder", case=c.set_label,
                         num_draft_tokens=c.num_draft_tokens, num_tokens=c.num_tokens, seeds=seeds, alpha=alpha,
                         power=power, max_factor=max_factor, seed=seed + 50_000 + i, progress=progress)
    return rows, skipped


def detect_penalty_rows(mutants: Sequence[str] | None = None, cases: Sequence[str] | None = None, *,
                        seeds: int = DEFAULT_SEEDS, alpha: float = DEFAULT_ALPHA, power: float = DEFAULT_POWER,
                        max_factor: float = DEFAULT_MAX_FACTOR, seed: int = 0, progress=None) -> list[DetectRow]:
    """``bench detect --penalties``: the penalty zoo's cases (:func:`verifier.bench.detect_penalty.penalty_cases`,
    k = 2, N = 4, strong / mild settings) through both batteries, as :func:`detect_rows` measures the rule zoo.

    Parameters and errors as :func:`detect_rows`; ``mutants`` / ``cases`` name the penalty zoo's mutants and the
    standard pairs.  Rows have ``case = "PAIR/SETTING"``, ``declared = "biased"``.
    """
    from verifier.bench.detect_penalty import K, N, penalty_cases

    check_detect_args(seeds=seeds, alpha=alpha, power=power, max_factor=max_factor)
    rows: list[DetectRow] = []
    for ci, case in enumerate(penalty_cases(mutants, cases)):
        for mi, (m, law) in enumerate(case.laws.items()):
            rows += _measure(case.tuple_law, case.target_law, law, batteries(N, alpha), rule=m, declared="biased",
                             case=case.label, num_draft_tokens=K, num_tokens=N, seeds=seeds, alpha=alpha, power=power,
                             max_factor=max_factor, seed=seed + 80_000 + 100 * ci + mi, progress=progress)
    return rows


def per_mutant_summary(rows: Sequence[DetectRow], battery: str) -> list[dict[str, Any]]:
    """Per rule: the worst case (largest fixed-n median / oracle) and the best case, for one battery."""
    by_rule: dict[str, list[DetectRow]] = {}
    for row in rows:
        by_rule.setdefault(row.rule, [])
    for row in rows:
        if row.battery == battery:
            by_rule[row.rule].append(row)
    out = []
    for rule, rs in by_rule.items():
        if not rs:
            continue
        worst = max(rs, key=lambda r: r.fixed_ratio)
        best = min(rs, key=lambda r: r.best_ratio)
        out.append({"rule": rule, "declared": rs[0].declared, "cases": len(rs), "worst": worst, "best": best,
                    "meets_goal_everywhere": all(r.fixed_ratio <= GOAL_RATIO for r in rs)})
    return out


def render_markdown(rows: Sequence[DetectRow]) -> str:
    """Tables: per-mutant summary (both batteries), then every (rule, case, battery) row."""
    if not rows:
        return "_no biased (rule, case) pair selected_\n"
    seeds = rows[0].seeds
    out = []
    for battery in dict.fromkeys(r.battery for r in rows):  # batteries present, in order
        summary = per_mutant_summary(rows, battery)
        if not summary:
            continue
        out.append(f"**Per mutant, `{battery}` battery** (worst case = largest fixed-n median / oracle; goal "
                   f"<= {GOAL_RATIO}x everywhere):\n")
        table = []
        for s in summary:
            w, b = s["worst"], s["best"]
            table.append([s["rule"], s["cases"], f"{w.case}: {fmt_n(w.fixed_median, w.max_n)} / {w.oracle_n} = "
                          f"{fmt_ratio(w.fixed_ratio)}", f"{b.case}: {fmt_ratio(b.best_ratio)}",
                          "yes" if s["meets_goal_everywhere"] else "**no**"])
        out.append(md_table(["mutant rule", "cases", "worst case: fixed-n median / oracle", "best case (best of fixed/seq)",
                             "<= 1.5x on every case"], table))
        out.append("")
    out.append(f"**Every (rule, case, battery)** -- sample sizes in rows of N emitted tokens; {seeds} seeds; "
               "`>M`: not rejected within the M rows simulated:\n")
    table = []
    for r in rows:
        table.append([r.rule, r.case, r.battery, f"{r.tv:.3f}", f"{r.oracle_n} ({r.oracle_method})", r.oracle_n_cell,
                      fmt_n(r.fixed_median, r.max_n), fmt_n(r.fixed_p90, r.max_n), fmt_ratio(r.fixed_ratio),
                      fmt_ratio(r.fixed_p99 / r.oracle_n),
                      fmt_n(r.seq_median, r.max_n), fmt_n(r.seq_p90, r.max_n), fmt_ratio(r.seq_ratio),
                      fmt_ratio(r.seq_p99 / r.oracle_n)])
    out.append(md_table(["rule", "case", "battery", "TV", "oracle n (method)", "oracle n at cell level", "fixed-n median", "fixed-n p90",
                         "median / oracle", "n99 / oracle", "e-process median", "e-process p90", "median / oracle",
                         "n99 / oracle"], table))
    return "\n".join(out) + "\n"


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rule", action="append", dest="rules", metavar="NAME",
                        help="Mutant rule from verifier.exact.RULES (repeatable). Default: every biased rule.")
    parser.add_argument("--case", action="append", dest="cases", metavar="NAME",
                        help="Standard case (repeatable). Default: every standard case.")
    parser.add_argument("--seeds", type=int, default=DEFAULT_SEEDS, metavar="N",
                        help=f"Simulated streams per (rule, case). Default: {DEFAULT_SEEDS}.")
    parser.add_argument("--alpha", type=float, default=DEFAULT_ALPHA, help=f"Family-wise alpha. Default: {DEFAULT_ALPHA}.")
    parser.add_argument("--max-factor", type=float, default=DEFAULT_MAX_FACTOR, metavar="X",
                        help=f"Simulate up to X times the oracle n per stream. Default: {DEFAULT_MAX_FACTOR}.")
    parser.add_argument("--streams", action="store_true",
                        help="Measure the randomness zoo instead (shared_stream, serial_stream: rows each exact, not "
                             "independent; verifier.bench.detect_streams); --rule / --case then name those mutants / "
                             "bigram4_eos, trigram3.")
    parser.add_argument("--stop", action="store_true",
                        help="Measure the stop-rule zoo instead (stop_mid_block, max_tokens_overshoot: the stop-rule "
                             "cell; deterministic_acceptance: the stop-position cell; verifier.bench.detect_stop); "
                             "--rule / --case then name those mutants / bigram4_eos, trigram3.")
    parser.add_argument("--logprob", action="store_true",
                        help="Measure the logprob zoo instead (logprobs_zero, logprobs_first_only, logprobs_draft_row: "
                             "the logprob cell; verifier.bench.detect_logprob); --rule / --case then name those "
                             "mutants / bigram4_eos, trigram3.")
    parser.add_argument("--vocab", action="store_true",
                        help="Measure drafts in another vocabulary instead (many_to_one_q_single, q_permuted, "
                             "q_dtype_mismatch, draft_processors_differ; verifier.bench.detect_vocab); --rule / --case "
                             "then name those mutants / bigram4_eos, trigram3.")
    parser.add_argument("--recurrent", action="store_true",
                        help="Measure the recurrent-state zoo instead (state_not_rolled_back, state_checkpoint_stale on "
                             "the parity3 recurrent target; verifier.bench.detect_recurrent); --rule then names its "
                             "scenarios.")
    parser.add_argument("--batch", action="store_true",
                        help="Measure the batch-shape zoo instead (corrupt_batch_gt2 and prompt_length_leak per "
                             "rows-per-call level 1, 2, 4, 16, prompt_length_leak also at a mixed-prompts level: gof@1 + "
                             "joint@1..2 vs the Neyman-Pearson oracle; verifier.bench.detect_batch); "
                             "--rule / --case then name those mutants / bigram4_eos, trigram3.")
    parser.add_argument("--penalties", action="store_true",
                        help="Measure the penalty zoo instead (penalty_once_per_round, penalty_ignored_in_verification, "
                             "min_p_skipped_on_verified on their exact laws with penalties and min-p; "
                             "verifier.bench.detect_penalty); --rule / --case then name those mutants / unigram3, "
                             "bigram4_eos, trigram3.")
    parser.add_argument("--field", action="store_true",
                        help="Measure the mechanisms the field reports instead (recovered_one_late, "
                             "draft_accept_same_uniform at T = 1; target_processed_first_only at T = 1/2 with top_k = 2; "
                             "verifier.bench.detect_field); --rule / --case then name those mechanisms / bigram4_eos, "
                             "trigram3.")
    parser.add_argument("--format", choices=("markdown", "json"), default="markdown", help="Output format. Default: markdown.")
    parser.add_argument("--out", metavar="PATH", help="Also write the output to PATH.")


ZOO_FLAGS = ("streams", "stop", "logprob", "vocab", "recurrent", "batch", "penalties", "field")  # bench detect's other zoos: at most one per run


def run(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    progress = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    zoos = [z for z in ZOO_FLAGS if getattr(args, z, False)]
    if len(zoos) > 1:
        from verifier.errors import invalid_argument

        raise invalid_argument(" / ".join(f"--{z}" for z in ZOO_FLAGS), " ".join(f"--{z}" for z in zoos),
                               "one of them (one zoo per run)")
    if getattr(args, "logprob", False):
        from verifier.bench.detect_logprob import detect_logprob_rows, render_logprob_markdown
        from verifier.errors import invalid_argument

        for flag, value, default in (("--alpha", args.alpha, DEFAULT_ALPHA), ("--max-factor", args.max_factor,
                                                                              DEFAULT_MAX_FACTOR)):
            if value != default:  # the cell is deterministic (no alpha); each stream runs until its wrong values appear
                raise invalid_argument(flag, value, f"the default {default:g}: the logprob zoo's cell is deterministic "
                                       "and its streams run until the wrong values appear, so --alpha and --max-factor "
                                       "do not apply to --logprob")

        rows = detect_logprob_rows(args.rules, args.cases, seeds=args.seeds, progress=progress)
        render = render_logprob_markdown
    elif getattr(args, "vocab", False):
        from verifier.bench.detect_vocab import detect_vocab_rows, render_oracle_only

        rows, oracle_only = detect_vocab_rows(args.rules, args.cases, measure=_measure, batteries=batteries,
                                              seeds=args.seeds, alpha=args.alpha, max_factor=args.max_factor,
                                              progress=progress)
        render = lambda r: (render_markdown(r) if r else "") + "\n" + render_oracle_only(oracle_only)  # noqa: E731
    elif getattr(args, "field", False):
        from verifier.bench.detect_field import detect_field_rows

        rows = detect_field_rows(args.rules, args.cases, measure=_measure, batteries=batteries, seeds=args.seeds,
                                 alpha=args.alpha, max_factor=args.max_factor, progress=progress)
        render = render_markdown
    elif getattr(args, "recurrent", False):
        from verifier.bench.detect_recurrent import detect_recurrent_rows, render_recurrent_markdown

        rows = detect_recurrent_rows(args.rules, seeds=args.seeds, alpha=args.alpha, progress=progress)
        render = render_recurrent_markdown
    elif getattr(args, "batch", False):
        from verifier.bench.detect_batch import detect_batch_rows, render_batch_markdown

        rows = detect_batch_rows(args.rules, args.cases, seeds=args.seeds, alpha=args.alpha, progress=progress)
        render = render_batch_markdown
    elif getattr(args, "penalties", False):
        rows = detect_penalty_rows(args.rules, args.cases, seeds=args.seeds, alpha=args.alpha, max_factor=args.max_factor,
                                   progress=progress)
        render = render_markdown
    elif getattr(args, "stop", False):
        from verifier.bench.detect_stop import detect_stop_rows, render_stop_markdown

        rows = detect_stop_rows(args.rules, args.cases, seeds=args.seeds, alpha=args.alpha, progress=progress)
        render = render_stop_markdown
    elif getattr(args, "streams", False):
        from verifier.bench.detect_streams import detect_stream_rows, render_stream_markdown

        rows = detect_stream_rows(args.rules, args.cases, seeds=args.seeds, alpha=args.alpha, progress=progress)
        render = render_stream_markdown
    else:
        rows = detect_rows(args.rules, args.cases, seeds=args.seeds, alpha=args.alpha, max_factor=args.max_factor,
                           progress=progress)
        render = render_markdown
    extra = [dict(asdict(o), oracle_only=True) for o in oracle_only] if getattr(args, "vocab", False) else []
    text = (json.dumps([r.to_json() for r in rows] + extra, indent=1) if args.format == "json"
            else render(rows) + f"\n_{time.perf_counter() - t0:.0f} s_\n")
    print(text)
    if args.out:
        write_out(args.out, text)
    return 0
