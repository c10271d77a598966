"""``specverify bench diagnose-vocab``: the diagnosis on drafts whose sampled and reported q differ (issue 26, kind 7).

Setting and method of ``specverify bench diagnose`` (:mod:`verifier.bench.diagnose`: trigram3, prompt (0, 1), k = 2,
3 tokens, rows drawn iid from an exact law in calls of 500, the whole family ranked, the fit check), on:

* **the two new family hypotheses**: ``draft_processors_differ`` at T = 0.7, top_k = 2 (its own law) and at T = 1,
  top_k = 2 (the same law as ``draft_raw_q``: right = the class names it, sharp = named with hypotheses of its law
  only), ``q_dtype_mismatch`` at T = 1 (bfloat16: TV ~3e-4, so "right" is not expected at any n here);
* **the vocabulary mutants the family cannot hold** (their law needs the map or the permutation): rows from
  ``q_permuted`` (reversed order) and ``many_to_one_q_single`` (map (0, 0, 1)), exact laws of
  :mod:`verifier.exact.vocab` at T = 1 -- any "consistent with X" is a wrong diagnosis; "no known mechanism" is right;
* **the old mechanisms with the larger family**: rows of every other non-exact mechanism at n = 2500 in its config;
  wrong = a diagnosis naming hypotheses without it (e.g. the new ones).

Rows per cell: ``--runs`` (default 20).  Prints markdown.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

HELP = "Diagnosis of drafts whose sampled and reported q differ: accuracy, wrong names, and the vocabulary mutants."
N_GRID = (400, 2500)
CI_N = 2500


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=int, default=20, metavar="R", help="Replicates per row and n. Default: 20.")
    parser.add_argument("--n", type=int, nargs="+", default=list(N_GRID), metavar="N",
                        help=f"Sample sizes. Default: {' '.join(map(str, N_GRID))}.")
    parser.add_argument("--no-old", action="store_true", help="Skip the old mechanisms' rows.")
    parser.add_argument("--seed", type=int, default=0, help="Default: 0.")


def _vocab_law(st, mode: str) -> np.ndarray:
    """The exact law of a vocabulary mutant on the setting's outcomes (trigram3, T = 1, k = 2, 3 tokens)."""
    from verifier.exact import standard_tabular_pairs
    from verifier.exact.vocab import default_map_for, map_draft, vocab_n_token_law

    pair = standard_tabular_pairs()["trigram3"]
    law = vocab_n_token_law(pair.target, map_draft(pair.draft, default_map_for(mode, 3)), pair.prefix, 2, 3, mode)
    vec = np.array([float(law.get(tuple(int(v) for v in o), 0)) for o in st.outcomes])
    return vec / vec.sum()


def run(args: argparse.Namespace) -> int:
    from verifier.bench.diagnose import _config, _named, _Setting, check_counts
    from verifier.diagnose.family import family_size
    from verifier.diagnose.mechanisms import MECHANISMS
    from verifier.sampling import SamplingConfig

    check_counts(args)  # before any row is sampled
    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    settings = {"t1": _Setting(SamplingConfig(temperature=1.0)), "t1k2": _Setting(SamplingConfig(temperature=1.0, top_k=2)),
                "t07k2": _Setting(SamplingConfig(temperature=0.7, top_k=2))}
    for mode in ("q_permuted", "many_to_one_q_single"):
        settings["t1"]._laws = getattr(settings["t1"], "_laws", {})
        settings["t1"]._laws[mode] = _vocab_law(settings["t1"], mode)
    print(f"## Diagnosis of drafts whose sampled and reported q differ (trigram3, k = 2, 3 tokens, calls of 500; "
          f"{family_size()} hypotheses; `specverify bench diagnose-vocab --runs {args.runs}`)\n")
    print("| rows from | config | " + " | ".join(f"n={n}: right / wrong / sharp" for n in args.n) + " | last diagnosis |")
    print("|---|---|" + "---|" * (len(args.n) + 1))
    rows = [("draft_processors_differ", "t07k2"), ("draft_processors_differ", "t1k2"), ("q_dtype_mismatch", "t1"),
            ("q_permuted", "t1"), ("many_to_one_q_single", "t1")]
    for mech, cfg in rows:
        st, cols, last = settings[cfg], [], ""
        for n in args.n:
            ok = bad = sh = 0
            for _ in range(args.runs):
                d = st.diagnose(*st.draw(mech, n, rng), True, rng)
                if mech in MECHANISMS:
                    right, wrong, crisp = _named(d, mech)
                else:  # no hypothesis has this law: any name is wrong, "no known mechanism" is right
                    right, wrong, crisp = d["status"] != "consistent", d["status"] == "consistent", False
                ok, bad, sh = ok + right, bad + wrong, sh + crisp
                last = d.get("sentence") or d["status"]
            cols.append(f"{ok}/{args.runs} / {bad} / {sh}")
        print(f"| {mech} | {cfg} | " + " | ".join(cols) + f" | {last[:160]} |", flush=True)
    if not args.no_old:
        print(f"\nOld mechanisms with the larger family (n = {CI_N}, {args.runs} runs each; wrong = named without it):\n")
        print("| mechanism | config | right | wrong | sharp | a new hypothesis named |")
        print("|---|---|---|---|---|---|")
        new = {"draft_processors_differ", "q_dtype_mismatch"}
        for mech, m in MECHANISMS.items():
            if m.declared == "exact" or mech in new:
                continue
            cfg = _config(mech)
            st = settings[cfg]
            ok = bad = sh = with_new = 0
            for _ in range(args.runs):
                d = st.diagnose(*st.draw(mech, CI_N, rng), True, rng)
                right, wrong, crisp = _named(d, mech)
                ok, bad, sh = ok + right, bad + wrong, sh + crisp
                with_new += any(part in new for name in d.get("best") or [] for part in name.split("@")[0].split("+"))
            print(f"| {mech} | {cfg} | {ok}/{args.runs} | {bad} | {sh} | {with_new} |", flush=True)
    print(f"\n({time.perf_counter() - t0:.0f} s)")
    return 0
