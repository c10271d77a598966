"""``specverify bench trees``: tree mutants' samples to detect vs the oracle; tree acceptance vs the chain.

Two measurements (issue 18 part 4):

**detect** -- the method of ``specverify bench detect`` (:mod:`verifier.bench.detect`) on trees: for
every biased or lossy rule of :data:`verifier.exact.tree_rules.TREE_RULES` on every standard tree
case where its exact law differs from the target's (:func:`verifier.exact.tree_stage.standard_tree_cases`,
N = 3 tokens), rows are drawn iid from the rule's exact law (:func:`~verifier.exact.tree_laws.tree_n_token_law`)
and fed to the harness's battery at family-wise alpha 0.01 (fixed-n median / p90 over ``--seeds``
streams, and the e-process), next to the Neyman-Pearson oracle n (likelihood-ratio test of the
target law against the rule's law, power 0.99).  The two decoder-level tree mutants
(``tree_mask_sees_sibling``, ``tree_cache_kept_rejected``) have no exact law -- the enumerator models
no attention and no cache -- so their law on trigram3 with the tree ``2;2,2`` is *estimated*: the
empirical law of ``--decoder-rows`` rows of the real decoder (plug-in; the oracle n and TV are then
estimates too, marked so).

**acceptance** -- the efficiency case for trees: mean emitted tokens per round (accepted draft tokens
+ 1, capped at EOS) of each lossless tree rule on static trees of several shapes against the chain
(``iid_multi_draft`` on the chain shape = the canonical chain rule) at **equal draft budget**
(draft tokens per round = tree nodes), measured with :class:`verifier.decoders.TreeDecoder` on the
shipped transformers at T = 1; 99% interval from the per-row means (rows are independent).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Any, Sequence

import numpy as np

from verifier.bench._common import check_detect_args, fmt_n, fmt_ratio, md_table, names_from, write_out
from verifier.bench.detect import DEFAULT_ALPHA, DEFAULT_MAX_FACTOR, DEFAULT_POWER, DetectRow, _measure, batteries
from verifier.errors import invalid_argument

__all__ = ["HELP", "AcceptanceRow", "SHAPES", "detect_tree_rows", "detect_decoder_mutant_rows", "acceptance_rows", "register", "run"]

HELP = "Tree mutants: samples to detect vs the Neyman-Pearson oracle; lossless tree rules: tokens per round vs the chain at equal draft budget."
DEFAULT_SEEDS = 100
DEFAULT_DECODER_ROWS = 200_000  # rows of the real decoder behind an estimated (plug-in) mutant law
LOSSLESS = ("iid_multi_draft", "wor_recursive_rejection", "topk_target_only")
SHAPES = {  # draft budget (draft tokens per round) -> tree shapes; the first is the chain
    2: ("1;1", "2"),
    3: ("1;1;1", "3", "2;1"),
    4: ("1;1;1;1", "4", "2;1,1", "3;1"),
    6: ("1;1;1;1;1;1", "6", "2;2,2", "3;1,1,1", "3;1;1;1"),
}
DEFAULT_PROMPTS = ("def ", "class ", "import ")
Z99 = 2.5758293035489004  # two-sided 99% normal quantile


# -- detect -----------------------------------------------------------------------------------------

def _check_battery(which: str) -> None:
    if which not in ("window", "default", "both"):
        raise invalid_argument("battery", which, "window | default | both")


def _batteries(num_tokens: int, alpha: float, which: str) -> dict:
    specs = batteries(num_tokens, alpha)
    return specs if which == "both" else {which: specs[which]}


def detect_tree_rows(rules: Sequence[str] | None = None, cases: Sequence[str] | None = None, *, seeds: int = DEFAULT_SEEDS,
                     alpha: float = DEFAULT_ALPHA, power: float = DEFAULT_POWER, max_factor: float = DEFAULT_MAX_FACTOR,
                     seed: int = 0, battery: str = "window", largest_tv_only: bool = True, progress=None) -> list[DetectRow]:
    """Samples to detect every (tree mutant rule, standard tree case where it is biased, battery).

    Parameters
    ----------
    rules, cases : sequence of str, optional
        Names from :data:`~verifier.exact.tree_rules.TREE_RULES` / ``standard_tree_cases()``; default
        all (rules declared ``exact`` are skipped).
    seeds, alpha, power, max_factor, seed, progress
        As :func:`verifier.bench.detect.detect_rows`.
    battery : {"window", "default", "both"}, default "window"
        The cells (``verifier.bench.detect.batteries``): "window" = gof@1..N + joint@1..N +
        surprisal + PIT, as ``suites/tree.toml`` sets its tabular sample sets.
    largest_tv_only : bool, default True
        Per rule only the case where its exact TV is largest (the case a suite would run it on).

    Returns
    -------
    list[DetectRow]
        ``num_draft_tokens`` is the tree's depth; the case name carries the tree.

    Raises
    ------
    InvalidArgumentError
        Unknown rule or case name, seeds < 1.
    """
    from verifier.bench._battery import TupleLaw
    from verifier.exact import target_law
    from verifier.exact.tree_laws import tree_n_token_law
    from verifier.exact.tree_rules import TREE_RULES
    from verifier.exact.tree_shape import tree_depth
    from verifier.exact.tree_stage import standard_tree_cases

    all_cases = {c.name: c for c in standard_tree_cases()}
    rule_names = names_from("rules", rules, TREE_RULES)
    case_names = names_from("cases", cases, all_cases)
    check_detect_args(seeds=seeds, alpha=alpha, power=power, max_factor=max_factor)
    _check_battery(battery)
    from verifier.exact import total_variation

    found: dict[str, dict] = {}  # case -> rule -> law
    best: dict[str, tuple] = {}  # rule -> (tv, case)
    for cname in case_names:
        case = all_cases[cname]
        tlaw = target_law(case.target, case.prefix, case.num_tokens)
        for r in rule_names:
            if TREE_RULES[r].declared != "exact":
                law = tree_n_token_law(case.target, case.draft, case.prefix, case.tree, case.num_tokens, r)
                if law != tlaw:
                    found.setdefault(cname, {})[r] = law
                    tv = total_variation(law, tlaw)
                    if r not in best or tv > best[r][0]:
                        best[r] = (tv, cname)
    rows: list[DetectRow] = []
    for ci, cname in enumerate(case_names):
        case = all_cases[cname]
        tlaw = target_law(case.target, case.prefix, case.num_tokens)
        laws = {r: law for r, law in found.get(cname, {}).items() if not largest_tv_only or best[r][1] == cname}
        if not laws:
            continue
        tl = TupleLaw(tlaw, lambda pre, c=case: c.target.probs(tuple(c.prefix) + tuple(pre)), case.target.vocab_size, list(laws.values()))
        for ri, (r, law) in enumerate(laws.items()):
            rows += _measure(tl, tlaw, law, _batteries(case.num_tokens, alpha, battery), rule=r, declared=TREE_RULES[r].declared, case=cname,
                             num_draft_tokens=tree_depth(case.tree), num_tokens=case.num_tokens, seeds=seeds, alpha=alpha,
                             power=power, max_factor=max_factor, seed=seed + 1000 * ci + ri, progress=progress)
    return rows


def _empirical_law(decoder_name: str, pair_name: str, tree: str, num_tokens: int, num_rows: int, seed: int) -> dict:
    from verifier.decoders import make_decoder
    from verifier.exact import standard_tabular_pairs
    from verifier.exact.tree_shape import parse_tree, tree_depth
    from verifier.models import TabularCausalLM
    from verifier.sampling import SamplingConfig

    pair = standard_tabular_pairs()[pair_name]
    dec = make_decoder(decoder_name, TabularCausalLM(pair.target), TabularCausalLM(pair.draft), tree_depth(parse_tree(tree)), tree=tree)
    out = np.concatenate([dec.generate(list(pair.prefix), min(20_000, num_rows - s), num_tokens, SamplingConfig(), seed + s)
                          for s in range(0, num_rows, 20_000)])
    values, counts = np.unique(out, axis=0, return_counts=True)
    return {tuple(int(t) for t in v): Fraction(int(c), num_rows) for v, c in zip(values, counts)}


def detect_decoder_mutant_rows(names: Sequence[str] = ("tree_mask_sees_sibling", "tree_cache_kept_rejected"), *, pair: str = "trigram3",
                               tree: str = "2;2,2", num_tokens: int = 3, decoder_rows: int = DEFAULT_DECODER_ROWS,
                               seeds: int = DEFAULT_SEEDS, alpha: float = DEFAULT_ALPHA, power: float = DEFAULT_POWER,
                               max_factor: float = DEFAULT_MAX_FACTOR, seed: int = 0, battery: str = "window",
                               progress=None) -> list[DetectRow]:
    """The decoder-level tree mutants, against their *empirical* law (``decoder_rows`` real decoder rows).

    The case is labelled ``"<pair>/<tree> (estimated law, n=<rows>)"`` and ``declared`` is
    ``"decoder (estimated)"``: the oracle n and the TV are plug-in estimates, not exact.
    """
    from verifier.bench._battery import TupleLaw
    from verifier.exact import standard_tabular_pairs, target_law
    from verifier.exact.tree_shape import parse_tree, tree_depth

    check_detect_args(seeds=seeds, alpha=alpha, power=power, max_factor=max_factor)
    _check_battery(battery)
    p = standard_tabular_pairs()[pair]
    tlaw = target_law(p.target, p.prefix, num_tokens)
    rows: list[DetectRow] = []
    for i, name in enumerate(names):
        t0 = time.perf_counter()
        law = _empirical_law(name, pair, tree, num_tokens, decoder_rows, seed=seed + 7919 * (i + 1))
        if progress:
            progress(f"  {name}: {decoder_rows} decoder rows in {time.perf_counter() - t0:.0f} s")
        tl = TupleLaw(tlaw, lambda pre: p.target.probs(tuple(p.prefix) + tuple(pre)), p.target.vocab_size, [law])
        rows += _measure(tl, tlaw, law, _batteries(num_tokens, alpha, battery), rule=name, declared="decoder (estimated)",
                         case=f"{pair}/{tree} (estimated law, n={decoder_rows})", num_draft_tokens=tree_depth(parse_tree(tree)),
                         num_tokens=num_tokens, seeds=seeds, alpha=alpha, power=power, max_factor=max_factor,
                         seed=seed + 90_000 + i, progress=progress)
    return rows


# -- acceptance -------------------------------------------------------------------------------------

@dataclass
class AcceptanceRow:
    """Mean emitted tokens per round of one (rule, tree) on the shipped models; intervals at 99%."""

    budget: int
    tree: str
    rule: str
    depth: int
    tokens_per_round: float
    ci_low: float
    ci_high: float
    chain_tokens_per_round: float
    rows: int
    rounds: int
    seconds: float

    @property
    def gain(self) -> float:
        """Tokens per round relative to the chain at the same budget."""
        return self.tokens_per_round / self.chain_tokens_per_round

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["gain"] = self.gain
        return d


def _tokens_per_round(decoder, prompts: Sequence[list[int]], num_samples: int, max_new_tokens: int, seed: int):
    """(mean tokens per round, its standard error, rounds): ratio estimator over independent rows."""
    from verifier.sampling import SamplingConfig

    tokens, rounds = [], []
    for j, prompt in enumerate(prompts):
        decoder.generate(prompt, num_samples, max_new_tokens, SamplingConfig(), seed + j)
        tokens.append(decoder.last_stats.extra["row_tokens_per_round_sum"])
        rounds.append(decoder.last_stats.extra["row_rounds"])
    a, r = np.concatenate(tokens).astype(np.float64), np.concatenate(rounds).astype(np.float64)
    mean = a.sum() / r.sum()
    se = float(np.std(a - mean * r, ddof=1) / (math.sqrt(len(r)) * r.mean()))  # delta method for sum(a) / sum(r)
    return float(mean), se, int(r.sum())


def acceptance_rows(budgets: Sequence[int] = tuple(SHAPES), rules: Sequence[str] = LOSSLESS, *, num_samples: int = 100,
                    max_new_tokens: int = 32, prompts: Sequence[str] = DEFAULT_PROMPTS, seed: int = 0, progress=None) -> list[AcceptanceRow]:
    """Tokens per round of each lossless tree rule on each shape of :data:`SHAPES`, on the shipped models.

    Parameters
    ----------
    budgets : sequence of int, default (2, 3, 4, 6)
        Draft tokens per round; keys of :data:`SHAPES`.
    rules : sequence of str, default the three lossless tree rules
    num_samples : int, default 100
        Rows per prompt.
    max_new_tokens : int, default 32
    prompts : sequence of str
        Texts, tokenized with the shipped tokenizer.
    seed : int, default 0

    Returns
    -------
    list[AcceptanceRow]
        The chain row of each budget (``iid_multi_draft`` on the chain shape) first.

    Raises
    ------
    InvalidArgumentError
        A budget not in :data:`SHAPES` or a rule that is not lossless.
    """
    import torch

    from verifier.decoders.tree_decoder import TreeDecoder
    from verifier.exact.tree_shape import tree_depth, parse_tree
    from verifier.models import load_model, load_tokenizer, shipped_checkpoint

    for b in budgets:
        if b not in SHAPES:
            raise invalid_argument("budgets", b, sorted(SHAPES))
    for r in rules:
        if r not in LOSSLESS:
            raise invalid_argument("rules", r, list(LOSSLESS))
    target, draft = load_model("shipped:target"), load_model("shipped:draft")
    tok = load_tokenizer(shipped_checkpoint("target"))
    ids = [list(tok(p)["input_ids"]) for p in prompts]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    out: list[AcceptanceRow] = []
    try:
        for b in budgets:
            chain = SHAPES[b][0]
            configs = [(chain, "iid_multi_draft")] + [(s, r) for s in SHAPES[b][1:] for r in rules]
            chain_mean = math.nan
            for tree, rule in configs:
                t0 = time.perf_counter()
                dec = TreeDecoder(target, draft, tree, rule=rule)
                mean, se, rounds = _tokens_per_round(dec, ids, num_samples, max_new_tokens, seed)
                if tree == chain:
                    chain_mean = mean
                row = AcceptanceRow(b, tree, "chain (canonical)" if tree == chain else rule, tree_depth(parse_tree(tree)), mean,
                                    mean - Z99 * se, mean + Z99 * se, chain_mean, num_samples * len(ids), rounds,
                                    time.perf_counter() - t0)
                out.append(row)
                if progress:
                    progress(f"  budget {b}  {tree:<12} {row.rule:<24} {mean:.3f} tokens/round ({row.gain:.2f}x chain)  "
                             f"[{row.seconds:.0f}s]")
    finally:
        torch.set_num_threads(threads)
    return out


# -- output -----------------------------------------------------------------------------------------

def render_detect(rows: Sequence[DetectRow]) -> str:
    if not rows:
        return "_no biased (rule, case) pair selected_\n"
    table = [[r.rule, r.case, r.battery, f"{r.tv:.3f}", f"{r.oracle_n} ({r.oracle_method})", fmt_n(r.fixed_median, r.max_n),
              fmt_n(r.fixed_p90, r.max_n), fmt_ratio(r.fixed_ratio), fmt_n(r.seq_median, r.max_n), fmt_ratio(r.seq_ratio)]
             for r in rows]
    return md_table(["tree mutant", "case (pair/tree)", "battery", "TV", "oracle n (method)", "fixed-n median", "fixed-n p90",
                     "median / oracle", "e-process median", "median / oracle"], table) + "\n"


def render_acceptance(rows: Sequence[AcceptanceRow]) -> str:
    if not rows:
        return "_no acceptance rows_\n"
    table = [[r.budget, r.tree, r.depth, r.rule, f"{r.tokens_per_round:.3f} [{r.ci_low:.3f}, {r.ci_high:.3f}]", f"{r.gain:.2f}x",
              r.rounds] for r in rows]
    return md_table(["draft budget", "tree", "depth", "rule", "tokens per round [99% CI]", "vs chain", "rounds"], table) + "\n"


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--part", choices=("detect", "acceptance", "all"), default="all", help="What to measure. Default: all.")
    parser.add_argument("--rule", action="append", dest="rules", metavar="NAME",
                        help="Tree mutant rule (repeatable; detect). Default: every biased or lossy tree rule.")
    parser.add_argument("--case", action="append", dest="cases", metavar="NAME",
                        help="Standard tree case (repeatable; detect). Default: every standard tree case.")
    parser.add_argument("--seeds", type=int, default=DEFAULT_SEEDS, metavar="N", help=f"Simulated streams per row (detect). Default: {DEFAULT_SEEDS}.")
    parser.add_argument("--battery", choices=("window", "default", "both"), default="window",
                        help="Cells (detect): window = gof@1..3 + joint + surprisal + PIT as suites/tree.toml; default = the suite defaults. Default: window.")
    parser.add_argument("--all-cases", action="store_true",
                        help="Detect: every standard tree case where a rule is biased (default: only the case of its largest exact TV).")
    parser.add_argument("--decoder-rows", type=int, default=DEFAULT_DECODER_ROWS, metavar="N",
                        help=f"Real decoder rows behind the estimated law of each decoder-level mutant; 0 skips them. Default: {DEFAULT_DECODER_ROWS}.")
    parser.add_argument("--max-factor", type=float, default=DEFAULT_MAX_FACTOR, metavar="X",
                        help=f"Simulate up to X times the oracle n per stream. Default: {DEFAULT_MAX_FACTOR}.")
    parser.add_argument("--budget", action="append", type=int, dest="budgets", metavar="K",
                        help=f"Draft budget (acceptance; repeatable): one of {sorted(SHAPES)}. Default: all.")
    parser.add_argument("--num-samples", type=int, default=100, metavar="N", help="Rows per prompt (acceptance). Default: 100.")
    parser.add_argument("--max-new-tokens", type=int, default=32, metavar="T", help="Tokens per row (acceptance). Default: 32.")
    parser.add_argument("--format", choices=("markdown", "json"), default="markdown", help="Output format. Default: markdown.")
    parser.add_argument("--out", metavar="PATH", help="Also write the output to PATH.")


def run(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    detect: list[DetectRow] = []
    accept: list[AcceptanceRow] = []
    if args.part in ("detect", "all"):
        detect = detect_tree_rows(args.rules, args.cases, seeds=args.seeds, max_factor=args.max_factor, battery=args.battery,
                                  largest_tv_only=not args.all_cases, progress=log)
        if args.decoder_rows and args.rules is None and args.cases is None:
            detect += detect_decoder_mutant_rows(decoder_rows=args.decoder_rows, seeds=args.seeds, max_factor=args.max_factor,
                                                 battery=args.battery, progress=log)
    if args.part in ("acceptance", "all"):
        accept = acceptance_rows(args.budgets or tuple(SHAPES), num_samples=args.num_samples, max_new_tokens=args.max_new_tokens,
                                 progress=log)
    if args.format == "json":
        text = json.dumps({"detect": [r.to_json() for r in detect], "acceptance": [r.to_json() for r in accept]}, indent=1)
    else:
        parts = []
        if args.part in ("detect", "all"):
            parts += [f"**Tree mutants: samples to detect vs the Neyman-Pearson oracle** ({args.seeds} seeds, alpha "
                      f"{DEFAULT_ALPHA}, N = 3 tokens, `{args.battery}` battery):\n", render_detect(detect)]
        if args.part in ("acceptance", "all"):
            parts += ["**Lossless tree rules: mean emitted tokens per round vs the chain at equal draft budget** (shipped "
                      f"models, T = 1, {args.num_samples} rows x {len(DEFAULT_PROMPTS)} prompts x {args.max_new_tokens} tokens):\n",
                      render_acceptance(accept)]
        text = "\n".join(parts) + f"\n_{time.perf_counter() - t0:.0f} s_\n"
    print(text)
    if args.out:
        write_out(args.out, text)
    return 0
