"""``specverify bench diagnose``: accuracy of the diagnosis per mechanism, and its false-diagnosis rate.

Setting: the ci suite's trigram3 pair, prompt (0, 1), k = 2, 3 emitted tokens.  Rows are drawn from a
law's exact J = 3 token law (the mechanism's own per-sequence law, which equals the exact enumerator's
and the registered decoder's: tests/diagnose), so one replicate costs a ranking, not a decoder run.

* Null: ``--null-runs`` (default 200) replicates per sampling config drawn from the target's law, at the
  ci n (2500); a false diagnosis = a mechanism named ("consistent with ...").
* Accuracy: for each biased mechanism, in the config where it is visible (T = 1; T = 0.7 with top_k = 2
  for draft_raw_q and target_unprocessed), ``--runs`` replicates at each n of ``--n``: diagnosed as itself
  = status "consistent" with the mechanism in the best group.  The table gives the accuracy at the ci n
  and the smallest n of the grid reaching 95%.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

HELP = "Diagnosis accuracy per mechanism at the ci n, the n reaching 95%, and the false-diagnosis rate under the null."
CI_N = 2500
N_GRID = (100, 200, 400, 800, 1600, 2500, 5000)
PROCESSING_ONLY = ("draft_raw_q", "target_unprocessed")


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=int, default=40, metavar="R", help="Replicates per mechanism and n. Default: 40.")
    parser.add_argument("--null-runs", type=int, default=200, metavar="R", help="Null replicates per sampling config. Default: 200.")
    parser.add_argument("--n", type=int, nargs="+", default=list(N_GRID), metavar="N", help=f"Sample sizes. Default: {' '.join(map(str, N_GRID))}.")
    parser.add_argument("--seed", type=int, default=0, help="Default: 0.")


class _Setting:
    """All 27 emitted outcomes of trigram3 with their teacher-forced probs, under one sampling config."""

    def __init__(self, sampling) -> None:
        from verifier.diagnose.inputs import all_sequences, sequence_probs
        from verifier.exact import standard_tabular_pairs
        from verifier.runner.models import ReferenceModel

        pair = standard_tabular_pairs()["trigram3"]
        self.tr = ReferenceModel(pair.target, 3, None)
        self.dr = ReferenceModel(pair.draft, 3, None)
        self.prompt, self.sampling = pair.prefix, sampling
        self.outcomes = all_sequences(3, 3, None)
        self.sp = sequence_probs(self.tr, self.dr, self.prompt, self.outcomes, sampling)

    def law(self, mechanism: str) -> np.ndarray:
        from verifier.diagnose.likelihood import log_likelihood
        from verifier.diagnose.mechanisms import MECHANISMS

        p = np.exp(log_likelihood(MECHANISMS[mechanism], self.sp, 2))
        return p / p.sum()

    def diagnose(self, counts: np.ndarray, bias: bool, rng) -> dict:
        from verifier.diagnose.rank import decide, rank_mechanisms
        from verifier.diagnose.sample_set import fit_check

        idx = np.flatnonzero(counts)
        sp = self.sp.rows(idx)
        sp.weights = counts[idx].astype(np.float64)
        ranking = rank_mechanisms(sp, 2, per_position=False)
        pre = decide(ranking, bias_detected=bias)
        fit_p = None
        if pre["status"] == "consistent":
            inverse = np.repeat(np.arange(len(idx)), counts[idx])
            fit_p, _, _ = fit_check(pre["best"][0], sp, inverse, self.outcomes[idx][inverse], self.tr, self.dr,
                                    self.prompt, self.sampling, 2, 3, rng)
        return decide(ranking, bias_detected=bias, fit_pvalue=fit_p)


def run(args: argparse.Namespace) -> int:
    from verifier.diagnose.mechanisms import MECHANISMS
    from verifier.sampling import SamplingConfig

    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    settings = {"t1": _Setting(SamplingConfig(temperature=1.0)), "t07k2": _Setting(SamplingConfig(temperature=0.7, top_k=2))}
    print(f"## Diagnosis (trigram3, k = 2, 3 tokens; `specverify bench diagnose --runs {args.runs} --null-runs {args.null_runs}`)\n")
    print("| sampling config | null runs at n = 2500 | mechanism named (false diagnosis) | max log LR over the target (median) |")
    print("|---|---|---|---|")
    for name, st in settings.items():
        law = st.law("canonical")
        named, best = 0, []
        for _ in range(args.null_runs):
            d = st.diagnose(rng.multinomial(CI_N, law), False, rng)
            named += d["status"] == "consistent"
            best.append(d["log_lr"] if isinstance(d["log_lr"], float) else -np.inf)
        print(f"| {name} | {args.null_runs} | {named} ({named / args.null_runs:.3f}) | {np.median(best):.1f} |")
    print("\n| mechanism | config | " + " | ".join(f"n={n}" for n in args.n) + " | n for 95% |")
    print("|---|---|" + "---|" * (len(args.n) + 1))
    for mech, m in MECHANISMS.items():
        if m.declared == "exact":
            continue
        cfg = "t07k2" if mech in PROCESSING_ONLY else "t1"
        st = settings[cfg]
        law = st.law(mech)
        accs = []
        for n in args.n:
            ok = 0
            for _ in range(args.runs):
                d = st.diagnose(rng.multinomial(n, law), True, rng)
                ok += d["status"] == "consistent" and mech in d["best"]
            accs.append(ok / args.runs)
        reach = next((n for n, a in zip(args.n, accs) if a >= 0.95), None)
        print(f"| {mech} | {cfg} | " + " | ".join(f"{a:.2f}" for a in accs) + f" | {reach if reach else '> ' + str(max(args.n))} |")
    print(f"\n({time.perf_counter() - t0:.0f} s)")
    return 0
