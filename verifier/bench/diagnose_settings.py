"""``specverify bench diagnose-settings``: the request-setting laws beside the family -- right, wrong and no names.

:mod:`verifier.diagnose.setting_laws` adds the laws "the request's X ignored" (min-p, penalties, top-k / top-p,
temperature) to every diagnosis.  This bench draws rows from exact laws (:func:`verifier.exact.penalties.penalty_n_token_law`
on trigram3, k = 2, the first 4 emitted tokens) and diagnoses one sample set as a report does
(:mod:`verifier.diagnose.run_dir`: the penalty finding first where a penalty or min-p is on, else the family's ranking,
decision and fit check, then the setting laws), for every law that can be the truth in two settings:

* ``pen``: ``PENALTY_SAMPLING`` (T = 1, repetition 1.5, presence 0.5, frequency 0.5, min-p 0.3) on the penalty prompt:
  the target (null), ``penalties_ignored``, ``min_p_ignored``, the penalty zoo (``penalty_once_per_round``,
  ``penalty_ignored_in_verification``, ``min_p_skipped_on_verified``) and ``target_unprocessed`` (every processor
  dropped);
* ``t07k2``: T = 0.7, top-k 2: the target, ``temperature_ignored``, ``top_k_top_p_ignored``, ``target_unprocessed``.

Per law and n: runs named as the truth (alone, or in a class that holds it), **wrong** (a name without the truth; on the
target's rows any name) and unnamed, with a Clopper-Pearson 95% interval on the wrong rate.  Prints markdown.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

HELP = "Request-setting laws (min-p / penalties / top-k / temperature ignored) beside the family: right, wrong, no names."
N_GRID = (500, 2000)
K, N_TOKENS = 2, 4


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=int, default=50, metavar="R", help="Replicates per law and n. Default: 50.")
    parser.add_argument("--n", type=int, nargs="+", default=list(N_GRID), metavar="N",
                        help=f"Rows per sample set. Default: {' '.join(map(str, N_GRID))}.")
    parser.add_argument("--seed", type=int, default=0, help="Default: 0.")


def settings() -> dict[str, tuple]:
    """name -> (sampling, prompt, {truth: (rule, sampling of its law)})."""
    from verifier.diagnose.setting_laws import candidates, without
    from verifier.exact.penalties import PENALTY_PROMPTS, PENALTY_RULES, PENALTY_SAMPLING
    from verifier.sampling import SamplingConfig

    out = {}
    for name, sampling, prompt in (("pen", PENALTY_SAMPLING, tuple(PENALTY_PROMPTS["trigram3"])),
                                   ("t07k2", SamplingConfig(temperature=0.7, top_k=2), (0, 1))):
        truths = {"target": ("canonical", sampling)}
        truths.update({s: ("canonical", without(sampling, s)) for s in candidates([sampling])})
        if name == "pen":
            truths.update({r: (r, sampling) for r in PENALTY_RULES if r != "canonical"})
        truths["target_unprocessed"] = ("canonical", SamplingConfig())
        out[name] = (sampling, prompt, truths)
    return out


def names_of(tokens: np.ndarray, sampling, prompt, pair, refs) -> list[str]:
    """The names a report gives one sample set of these rows (empty: none)."""
    from verifier.diagnose.penalty import penalty_set_finding
    from verifier.diagnose.sample_set import diagnose_sample_set
    from verifier.diagnose.setting_laws import setting_law_finding

    pen = None
    if sampling.uses_context or sampling.min_p:
        pen = penalty_set_finding(pair.target, pair.draft, prompt, sampling, K, tokens)
        if pen is not None and pen["named"]:
            return [pen["named"]]
    res = diagnose_sample_set(refs[0], refs[1], prompt, sampling, K, tokens, bias_detected=True, with_fits=False)
    ranking, (seqs, inverse) = res["_ranking"], res["_seqs"]
    d = res["decision"]
    found = setting_law_finding([{"seqs": seqs, "inverse": inverse, "tokens": tokens, "sampling": sampling,
                                  "label": "bench"}], ranking, d, rivals=[pen] if pen else None)
    if found is not None and found["named"]:
        return [found["named"]]
    if found is not None and found["class"]:
        return list(found["class"]) if found.get("lead") else list(d["best"]) + [n for n in found["class"] if n not in d["best"]]
    if d["status"] == "consistent" and not (found is not None and found["withdrawn"]):
        return list(d["best"])
    return []


def _draw(law: dict, n: int, rng: np.random.Generator) -> np.ndarray:
    keys = sorted(law)
    p = np.array([float(law[k]) for k in keys])
    return np.array([keys[i] for i in rng.choice(len(keys), size=n, p=p / p.sum())], dtype=np.int64)


def _interval(k: int, n: int) -> str:
    from scipy.stats import beta

    lo = 0.0 if k == 0 else float(beta.ppf(0.025, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(0.975, k + 1, n - k))
    return f"{k}/{n} [{lo:.3f}, {hi:.3f}]"


def run(args: argparse.Namespace) -> int:
    from verifier.bench.diagnose import check_counts
    from verifier.exact import standard_tabular_pairs
    from verifier.exact.penalties import penalty_n_token_law
    from verifier.runner.models import ReferenceModel

    check_counts(args)
    t0, c0 = time.perf_counter(), time.process_time()
    pair = standard_tabular_pairs()["trigram3"]
    refs = (ReferenceModel(pair.target, pair.target.vocab_size, None), ReferenceModel(pair.draft, pair.draft.vocab_size, None))
    rng = np.random.default_rng(args.seed)
    print(f"## Request-setting laws beside the family (`specverify bench diagnose-settings --runs {args.runs} --seed "
          f"{args.seed}`; trigram3, k = {K}, {N_TOKENS} tokens)\n")
    print("| setting | rows from | n | named as the truth | wrong name (95% CI) | no name | wall / CPU s |")
    print("|---|---|---|---|---|---|---|")
    for sname, (sampling, prompt, truths) in settings().items():
        for truth, (rule, law_sampling) in truths.items():
            law = penalty_n_token_law(pair.target, pair.draft, prompt, law_sampling, K, N_TOKENS, rule=rule)
            for n in args.n:
                w0, p0 = time.perf_counter(), time.process_time()
                right = wrong = none = 0
                for _ in range(args.runs):
                    got = names_of(_draw(law, n, rng), sampling, prompt, pair, refs)
                    if not got:
                        none += 1
                    elif truth != "target" and truth in got:
                        right += 1
                    else:
                        wrong += 1
                print(f"| {sname} | {truth} | {n} | {right}/{args.runs} | {_interval(wrong, args.runs)} | {none}/{args.runs} "
                      f"| {time.perf_counter() - w0:.0f} / {time.process_time() - p0:.0f} |", flush=True)
    print(f"\n({time.perf_counter() - t0:.0f} s wall, {time.process_time() - c0:.0f} s CPU; seed {args.seed})")
    return 0
