"""``specverify exact``: the exact (rational) verdict of every verification rule.

Per rule: declared status, verdict over the standard cases, worst total-variation distance to the
target, the fewest samples a chi-square GOF test (alpha 0.01, power 0.99) needs to see it, and the
minimal counterexample Hypothesis finds.  Exit code 0 when every verdict matches its declared
status, 1 otherwise, 2 on an unknown rule name.
"""

from __future__ import annotations

import argparse
import json
import sys

from verifier.errors import EXIT_BIAS, EXIT_OK

HELP = "Exact (rational) output law, TV to the target, samples needed and minimal counterexample for each verification rule."


def register(parser: argparse.ArgumentParser) -> None:
    from verifier import progress

    progress.add_arguments(parser)
    parser.add_argument("--rule", action="append", metavar="NAME", dest="rules",
                        help="rule to check (repeatable; '-' and '_' are interchangeable). Default: every rule.")
    parser.add_argument("--format", choices=("table", "json"), default="table", help="output format. Default: table.")
    parser.add_argument("--max-examples", type=int, default=None, metavar="N",
                        help="Hypothesis examples per counterexample search (derandomized). Default: 300.")
    parser.add_argument("--no-search", action="store_true", help="skip the counterexample search.")
    parser.add_argument("--tree", action="store_true",
                        help="tree / multi-draft rules (verifier.exact.tree_rules) on the tree cases instead of the chain rules.")


def run(args: argparse.Namespace) -> int:
    from verifier import progress

    progress.from_args(args)
    from verifier.exact import RULES, get_rule, rule_verdicts, run_exact_stage
    from verifier.exact.counterexample import SEARCH_MAX_EXAMPLES, find_counterexample

    if args.tree:
        from verifier.exact.tree_counterexample import find_tree_counterexample as find_counterexample  # noqa: F811
        from verifier.exact.tree_rules import TREE_RULES as RULES, get_tree_rule as get_rule  # noqa: F811
        from verifier.exact.tree_stage import run_tree_exact_stage as run_exact_stage  # noqa: F811
    names = list(RULES) if not args.rules else [get_rule(r.replace("-", "_") if r.replace("-", "_") in RULES else r).name for r in args.rules]
    findings = []
    with progress.bar(len(names), "exact stage", "rules") as bar:  # rule by rule: same findings, in the same order
        for name in names:
            findings += run_exact_stage([name])
            bar.update(1)
    verdicts = rule_verdicts(findings)
    budget = args.max_examples if args.max_examples is not None else SEARCH_MAX_EXAMPLES
    counterexamples = {}
    with progress.bar(None if args.no_search else len(names), "counterexample search", "rules") as bar:
        for name in names:
            counterexamples[name] = None if args.no_search else find_counterexample(name, budget)
            bar.update(1)
    ok = all(v.matches_declared for v in verdicts.values())
    if args.format == "json":
        json.dump(_as_json(verdicts, findings, counterexamples, ok, budget, args.no_search), sys.stdout, indent=2)
        print()
    else:
        _print_table(verdicts, findings, counterexamples, ok, budget, args.no_search)
    return EXIT_OK if ok else EXIT_BIAS


def _as_json(verdicts, findings, counterexamples, ok, budget, no_search) -> dict:
    rules = []
    for name, v in verdicts.items():
        cx = counterexamples[name]
        at_worst, fewest, case = _worst_and_easiest(name, v, findings)
        rules.append({
            "rule": name, "declared": v.declared, "verdict": v.verdict, "matches_declared": v.matches_declared,
            "max_tv": str(v.max_tv), "max_tv_float": float(v.max_tv), "worst_case": v.worst_case,
            "min_samples_needed": v.min_samples_needed, "min_samples_case": case,
            "worst_case_samples_needed": at_worst,
            "counterexample": None if cx is None else cx.to_json(),
            "search": "skipped" if no_search else f"hypothesis, {budget} examples, derandomized",
        })
    return {"ok": ok, "alpha": 0.01, "power": 0.99, "rules": rules, "findings": [f.to_json() for f in findings]}


def _worst_and_easiest(name: str, v, findings) -> tuple[int | None, int | None, str | None]:
    """(n at the worst case, fewest n over the cases, the case with the fewest n) of one rule.

    The worst case (largest TV) and the case needing the fewest samples are often two different
    cases; a row must not pair one's TV with the other's n (issue 16: deterministic_acceptance
    showed TV 0.595 on trigram3 with n = 20, which is seed_argmax_agree's n; trigram3 needs 80).
    """
    rows = [f for f in findings if f.rule == name and f.samples_needed is not None]
    at_worst = next((f.samples_needed for f in rows if f.case == v.worst_case), None)
    easiest = min(rows, key=lambda f: f.samples_needed, default=None)
    return at_worst, (easiest.samples_needed if easiest else None), (easiest.case if easiest else None)


def _print_table(verdicts, findings, counterexamples, ok, budget, no_search) -> None:
    w = max([26] + [len(n) + 2 for n in verdicts])
    head = (f"{'rule':<{w}}{'declared':<10}{'verdict':<9}{'match':<7}{'max TV':>10}  {'worst case':<20}{'n there':>8}"
            f"  {'fewest n (case)'}")
    print(head)
    print("-" * len(head))
    for name, v in verdicts.items():
        at_worst, fewest, case = _worst_and_easiest(name, v, findings)
        there = "-" if at_worst is None else str(at_worst)
        easy = "-" if fewest is None else f"{fewest} ({case})"
        print(f"{name:<{w}}{v.declared:<10}{v.verdict:<9}{'yes' if v.matches_declared else 'NO':<7}"
              f"{float(v.max_tv):>10.4f}  {v.worst_case or '-':<20}{there:>8}  {easy:<28}".rstrip())
    print("n = samples a chi-square test needs to see the rule's bias (alpha 0.01, power 0.99): 'n there' on the worst case "
          "(largest TV), 'fewest n' on the case that needs the fewest.")
    cases = list(dict.fromkeys(f.case for f in findings))
    print("\nExact TV to the target per case (k, N = draft tokens, compared tokens; n = samples needed at alpha 0.01, power 0.99):")
    width = max(len(c) for c in cases) + 2
    for case in cases:
        row = [f for f in findings if f.case == case]
        cells = "  ".join(f"{f.rule}={_tv(f)}" for f in row if f.verdict == "biased")
        shape = f"tree={row[0].tree}" if getattr(row[0], "tree", "") else f"k={row[0].num_draft_tokens}"
        print(f"  {case:<{width}}{shape} N={row[0].num_tokens}  {cells or 'every rule exact'}")
    print(f"\nMinimal counterexamples (hypothesis.find, {budget} examples, derandomized):" if not no_search else "\nCounterexample search skipped.")
    for name, cx in counterexamples.items():
        if no_search:
            break
        if cx is None:
            print(f"  {name}: none found" + (" (expected: declared exact)" if verdicts[name].declared == "exact" else ""))
        else:
            print(f"  {name}: {cx.describe()}")
    print(f"\n{'OK' if ok else 'FAIL'}: {sum(v.matches_declared for v in verdicts.values())}/{len(verdicts)} rules match their declared status")


def _tv(f) -> str:
    s = str(f.tv)
    tv = s if len(s) <= 9 else f"{float(f.tv):.4g}"
    return f"{tv}(n={f.samples_needed})" if f.samples_needed is not None else tv
