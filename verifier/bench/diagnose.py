"""``specverify bench diagnose``: accuracy of the diagnosis per mechanism, and its false-diagnosis rate.

Setting: the ci suite's trigram3 pair, prompt (0, 1), k = 2, 3 emitted tokens, rows in generate calls of
500 (the ci chunk_size).  Rows are drawn from a law's exact J = 3 token law (the mechanism's own law,
which equals the exact enumerator's and the registered decoder's: tests/diagnose), so one replicate
costs a ranking, not a decoder run.  Batch cross-talk's rows are not independent: per call, row 0's
round structure c is drawn with row 0 from their joint law, the other rows from their law given c.

* Null: ``--null-runs`` (default 200) replicates per sampling config drawn from the target's law, at the
  ci n (2500); a false diagnosis = a mechanism named ("consistent with ...").
* Accuracy: for each biased mechanism, in the config where it is visible (T = 1; T = 0.7 with top_k = 2
  for draft_raw_q and target_unprocessed), ``--runs`` replicates at each n of ``--n``: diagnosed as itself
  = status "consistent" with the mechanism in the best group.  The table gives the accuracy at the ci n
  and the smallest n of the grid reaching 95%.
* Shipped (``--shipped-runs``, default 1; 0 skips): every registered decoder mutant, the two zoo rules
  without one (:mod:`verifier.diagnose.zoo_decoders`) and the lossless decoders run end to end on the
  shipped transformers at the ci suite's shipped setting (prompt "def ", n = 3000 in 3 calls of 1000,
  T = 1; T = 0.7 with top_k = 20 for the two processing-only mutants): the diagnosis of each.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

HELP = "Diagnosis accuracy per mechanism at the ci n, the n reaching 95%, and the false-diagnosis rate under the null."
CI_N = 2500
N_GRID = (100, 200, 400, 800, 1600, 2500, 5000)
PROCESSING_ONLY = ("draft_raw_q", "target_unprocessed", "residual_by_index", "draft_processors_differ", "target_processed_first_only")
# pairs of defects and the prefill layout (issue 26): llama.cpp's pair, a pair on one config, a defect from token 2
COMPOSITES = ("greedy_draft+residual_by_index@prefill", "full_p_fallback+greedy_draft", "full_p_fallback@prefill",
              "deterministic_acceptance+residual_by_index")
CONTAMINATION = (0.01, 0.05)  # shares of rows drawn from the target instead
CHUNK = 500  # rows per generate call (suites/ci.toml chunk_size)


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=int, default=40, metavar="R", help="Replicates per mechanism and n. Default: 40.")
    parser.add_argument("--null-runs", type=int, default=200, metavar="R", help="Null replicates per sampling config. Default: 200.")
    parser.add_argument("--n", type=int, nargs="+", default=list(N_GRID), metavar="N", help=f"Sample sizes. Default: {' '.join(map(str, N_GRID))}.")
    parser.add_argument("--shipped-runs", type=int, default=1, metavar="R",
                        help="End-to-end runs per decoder on the shipped transformers (0 skips). Default: 1.")
    parser.add_argument("--seed", type=int, default=0, help="Default: 0.")


class _Setting:
    """All 27 emitted outcomes of trigram3 with their teacher-forced probs, under one sampling config."""

    def __init__(self, sampling) -> None:
        from verifier.diagnose.inputs import all_sequences, sequence_probs
        from verifier.diagnose.latent import _call_tables
        from verifier.exact import standard_tabular_pairs
        from verifier.runner.models import ReferenceModel

        pair = standard_tabular_pairs()["trigram3"]
        self.tr = ReferenceModel(pair.target, 3, None)
        self.dr = ReferenceModel(pair.draft, 3, None)
        self.prompt, self.sampling = pair.prefix, sampling
        self.outcomes = all_sequences(3, 3, None)
        self.sp = sequence_probs(self.tr, self.dr, self.prompt, self.outcomes, sampling)
        first, other, _ = _call_tables(self.sp, 2)
        self.row0, self.given = np.exp(first), np.exp(other)  # (classes, outcomes): P(row 0, c), P(row | c)

    def law(self, mechanism: str) -> np.ndarray:
        from verifier.diagnose.family import hypothesis
        from verifier.diagnose.likelihood import log_likelihood

        p = np.exp(log_likelihood(hypothesis(mechanism), self.sp, 2))
        return p / p.sum()

    def draw(self, mechanism: str, n: int, rng, contamination: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
        """Outcome index of n rows and their generate call (calls of CHUNK rows); a share ``contamination`` of
        the rows (at random) is drawn from the target's law instead."""
        idx, calls = self._draw(mechanism, n, rng)
        if contamination:
            swap = rng.random(n) < contamination
            idx[swap] = self._draw("canonical", int(swap.sum()), rng)[0]
        return idx, calls

    def _draw(self, mechanism: str, n: int, rng) -> tuple[np.ndarray, np.ndarray]:
        sizes = [min(CHUNK, n - lo) for lo in range(0, n, CHUNK)]
        calls = np.repeat(np.arange(len(sizes)), sizes)
        if mechanism != "batch_cross_talk":
            law = self._laws.get(mechanism) if hasattr(self, "_laws") else None
            if law is None:
                self._laws = getattr(self, "_laws", {})
                law = self._laws[mechanism] = self.law(mechanism)
            return rng.choice(len(law), size=n, p=law), calls
        idx = []
        for m in sizes:
            pc = self.row0.sum(axis=1)
            c = rng.choice(len(pc), p=pc / pc.sum())
            first = rng.choice(self.row0.shape[1], p=self.row0[c] / self.row0[c].sum())
            rest = rng.choice(self.given.shape[1], size=m - 1, p=self.given[c] / self.given[c].sum())
            idx.append(np.concatenate([[first], rest]))
        return np.concatenate(idx), calls

    def diagnose(self, idx: np.ndarray, calls: np.ndarray, bias: bool, rng) -> dict:
        from verifier.diagnose.rank import decide, rank_mechanisms
        from verifier.diagnose.sample_set import fit_check

        uniq, inverse, counts = np.unique(idx, return_inverse=True, return_counts=True)
        sp = self.sp.rows(uniq)
        sp.weights = counts.astype(np.float64)
        sp.calls = (calls, inverse)
        ranking = rank_mechanisms(sp, 2, per_position=False)
        pre = decide(ranking, bias_detected=bias)
        fit_p = None
        if pre["status"] == "consistent":
            fit_p, _, _ = fit_check(pre["best"][0], sp, inverse, self.outcomes[idx], self.tr, self.dr,
                                    self.prompt, self.sampling, 2, 3, rng, contamination=pre.get("contamination") or 0.0)
        return decide(ranking, bias_detected=bias, fit_pvalue=fit_p)


def _config(name: str) -> str:
    from verifier.diagnose.family import parts_of

    return "t07k2" if set(parts_of(name)[0]) & set(PROCESSING_ONLY) else "t1"


def _named(d: dict, mech: str) -> tuple[bool, bool, bool]:
    """(right: consistent with mech among the named, wrong: consistent and mech not named, sharp: right and
    every other named hypothesis has mech's law on the data)."""
    consistent = d["status"] == "consistent"
    right = consistent and (mech in d["best"] or mech in [x["name"] for x in d.get("not_excluded") or []])
    sharp = right and len(d["best"]) == 1 + len(d.get("equivalent") or [])
    return right, consistent and not right, sharp


def check_counts(args: argparse.Namespace) -> None:
    """``--runs`` and every ``--n`` an integer >= 1, ``--seed`` one >= 0 (InvalidArgumentError, exit 2), checked
    before any row runs."""
    from verifier.errors import invalid_argument
    from verifier.stats._validate import check_positive_int

    check_positive_int(args.runs, "--runs")
    for n in args.n:
        check_positive_int(n, "--n")
    if getattr(args, "seed", 0) < 0:  # numpy's generators take seeds >= 0 only (a traceback from default_rng)
        raise invalid_argument("--seed", args.seed, "an integer >= 0")


def run(args: argparse.Namespace) -> int:
    from verifier.diagnose.family import family_size
    from verifier.diagnose.mechanisms import MECHANISMS
    from verifier.sampling import SamplingConfig

    check_counts(args)  # before any row is sampled
    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    settings = {"t1": _Setting(SamplingConfig(temperature=1.0)), "t07k2": _Setting(SamplingConfig(temperature=0.7, top_k=2))}
    print(f"## Diagnosis (trigram3, k = 2, 3 tokens, calls of {CHUNK} rows; {family_size()} hypotheses; "
          f"`specverify bench diagnose --runs {args.runs} --null-runs {args.null_runs}`)\n")
    print("| sampling config | null runs at n = 2500 | mechanism named (false diagnosis) | max log LR over the target (median) |")
    print("|---|---|---|---|")
    for name, st in settings.items():
        named, best = 0, []
        for _ in range(args.null_runs):
            d = st.diagnose(*st.draw("canonical", CI_N, rng), False, rng)
            named += d["status"] == "consistent"
            best.append(d["log_lr"] if isinstance(d["log_lr"], float) else -np.inf)
        print(f"| {name} | {args.null_runs} | {named} ({named / args.null_runs:.3f}) | {np.median(best):.1f} |", flush=True)
    print("\nAccuracy = runs with the mechanism among the named hypotheses (or, for a pair of defects, said \"not excluded\" beside its named part); wrong = a diagnosis that names hypotheses "
          "without it; sharp = the mechanism named alone (or only with hypotheses of the same law on the data).\n")
    print("| mechanism | config | " + " | ".join(f"n={n}" for n in args.n) + " | n for 95% | wrong (all n) | sharp at n=2500 |")
    print("|---|---|" + "---|" * (len(args.n) + 3))
    mechs = [m for m, v in MECHANISMS.items() if v.declared != "exact"] + list(COMPOSITES)
    total_wrong = 0
    for mech in mechs:
        cfg = _config(mech)
        st = settings[cfg]
        accs, wrong, sharp = [], 0, None
        for n in args.n:
            ok = sh = 0
            for _ in range(args.runs):
                right, bad, crisp = _named(st.diagnose(*st.draw(mech, n, rng), True, rng), mech)
                ok, wrong, sh = ok + right, wrong + bad, sh + crisp
            accs.append(ok / args.runs)
            if n == CI_N:
                sharp = sh / args.runs
        total_wrong += wrong
        reach = next((n for n, a in zip(args.n, accs) if a >= 0.95), None)
        print(f"| {mech} | {cfg} | " + " | ".join(f"{a:.2f}" for a in accs) + f" | {reach if reach else '> ' + str(max(args.n))} | "
              f"{wrong} | {'-' if sharp is None else f'{sharp:.2f}'} |", flush=True)
    print(f"\nWrong diagnoses over every mechanism and n: {total_wrong} of {len(mechs) * len(args.n) * args.runs} runs.")
    print(f"\n### Contaminated samples (n = {CI_N}; a share of rows drawn from the target instead)\n")
    print("| mechanism | config | " + " | ".join(f"{c:.0%} target rows: accuracy (wrong)" for c in CONTAMINATION) + " |")
    print("|---|---|" + "---|" * len(CONTAMINATION))
    for mech in mechs:
        if mech == "batch_cross_talk":  # a likelihood per call: no row-level contamination model
            continue
        st = settings[_config(mech)]
        cols = []
        for share in CONTAMINATION:
            ok = bad = 0
            for _ in range(args.runs):
                right, wrong_, _ = _named(st.diagnose(*st.draw(mech, CI_N, rng, share), True, rng), mech)
                ok, bad = ok + right, bad + wrong_
            cols.append(f"{ok / args.runs:.2f} ({bad})")
        print(f"| {mech} | {_config(mech)} | " + " | ".join(cols) + " |", flush=True)
    if args.shipped_runs:
        _shipped(args.shipped_runs, args.seed)
    print(f"\n({time.perf_counter() - t0:.0f} s)")
    return 0


def _shipped(runs: int, seed: int) -> None:
    """Every decoder mutant, the zoo rules without one and the lossless decoders end to end on the shipped models."""
    import torch

    from verifier.decoders.mutants import DECODER_REGISTRY, make_decoder
    from verifier.diagnose.mechanisms import mechanism_for_decoder
    from verifier.diagnose.sample_set import diagnose_sample_set
    from verifier.diagnose.zoo_decoders import ZOO_RULE_KERNELS, zoo_rule_decoder
    from verifier.models import load_model, load_tokenizer, shipped_checkpoint
    from verifier.runner.models import ReferenceModel
    from verifier.sampling import SamplingConfig

    torch.set_num_threads(1)
    target, draft = load_model(shipped_checkpoint("target")), load_model(shipped_checkpoint("draft"))
    prompt = tuple(load_tokenizer(shipped_checkpoint("target"))("def ", add_special_tokens=False)["input_ids"])
    vocab, eos = target.config.vocab_size, target.config.eos_token_id
    tr, dr = ReferenceModel(target, vocab, eos), ReferenceModel(draft, vocab, eos)
    n, chunk, k = 3000, 1000, 2
    cases = [(name, "mutant") for name, spec in DECODER_REGISTRY.items()
             if spec.declared != "exact" and mechanism_for_decoder(name) != "canonical"]
    cases += [(rule, "rule") for rule in ZOO_RULE_KERNELS] + [(name, "lossless") for name in ("reference", "fresh_target_match", "block_verification")]
    print(f"\n### Shipped transformers (vocab 384, prompt \"def \", k = 2, 3 tokens, n = {n} in calls of {chunk}; {runs} run(s) each)\n")
    print("| decoder | expected | config | diagnosed as expected | last diagnosis | seconds per run (generate + diagnose) |")
    print("|---|---|---|---|---|---|")
    for name, kind in cases:
        cfg = SamplingConfig(temperature=0.7, top_k=20) if name in PROCESSING_ONLY else SamplingConfig(temperature=1.0)
        expected = None if kind == "lossless" else (name if kind == "rule" else mechanism_for_decoder(name))
        ok, secs, sentence = 0, 0.0, ""
        for r in range(runs):
            t0 = time.perf_counter()
            dec = zoo_rule_decoder(name, target, draft, k) if kind == "rule" else make_decoder(name, target, draft, k)
            rows = np.concatenate([dec.generate(prompt, chunk, 3, cfg, (seed + r) * 100 + i) for i in range(n // chunk)])
            d = diagnose_sample_set(tr, dr, prompt, cfg, k, rows, bias_detected=kind != "lossless", with_fits=False,
                                    calls=np.repeat(np.arange(n // chunk), chunk))["decision"]
            secs += time.perf_counter() - t0
            sentence = d["sentence"]
            ok += (d["status"] == "none preferred") if expected is None else (d["status"] == "consistent" and expected in d["best"])
        print(f"| {name} | {expected or 'none preferred'} | {'t07k20' if name in PROCESSING_ONLY else 't1'} | {ok}/{runs} | "
              f"{sentence} | {secs / runs:.1f} |", flush=True)
