"""``specverify bench diagnose-boundary``: how often the filter-boundary finding names a threshold flip, per law.

Setting: trigram3, prompt (0, 1) (target probs 0.2 / 0.5 / 0.3: token 0 has p / p_max = 0.4), k = 2, 3 emitted
tokens, requested T = 1 with min-p 0.4 / 1.01 (token 0 kept with a margin of 0.00995 nats).  Rows are drawn iid
(numpy, ``--seed``) from exact laws on the 27 outcomes (:class:`verifier.bench.diagnose._Setting`) and handed to
:func:`verifier.diagnose.boundary.boundary_set_finding` directly -- in a run it is reached only by a BIAS decoder
no mechanism explains, so these rates are its worst case:

* **flips** (what lower precision does): the target's law at min-p 0.4 x 1.01 and 0.4 x 1.02 (token 0 dropped by a
  1-2% error); right = named with ``rounding``;
* **temperature errors** at the requested min-p: T = 0.8, 0.9, 1.25; right = ``rounding`` only while the reported
  99.9% temperature interval holds the true T (the data cannot separate that temperature from rounding, and the report
  says so with the interval and the float32 control); "precision or a logits defect" is truthful either way;
* **the null** (the requested law): wrong = named at all (the band test's alpha is 0.01);
* **every non-latent family mechanism** under the requested setting (the speculative rule's defects): wrong = named.

Columns: named share and rounding share over ``--runs`` replicates, at each n of ``--n``.  Prints markdown.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

HELP = "The filter-boundary finding (threshold flips from lower precision): named and 'rounding' rates per law."
N_GRID = (500, 2500)
MIN_P = 0.4 / 1.01


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=int, default=100, metavar="R", help="Replicates per law and n. Default: 100.")
    parser.add_argument("--n", type=int, nargs="+", default=list(N_GRID), metavar="N",
                        help=f"Sample sizes. Default: {' '.join(map(str, N_GRID))}.")
    parser.add_argument("--seed", type=int, default=0, help="Default: 0.")


def _laws():
    """(group, label, law over the 27 outcomes) of every case; and the requested setting."""
    from dataclasses import replace

    from verifier.bench.diagnose import _Setting
    from verifier.diagnose.mechanisms import MECHANISMS
    from verifier.sampling import SamplingConfig

    requested = SamplingConfig(temperature=1.0, min_p=MIN_P)
    st = _Setting(requested)
    out = [("flip", f"min-p x {f:g}", _Setting(replace(requested, min_p=0.4 * f)).law("canonical"), None)
           for f in (1.01, 1.02)]
    out += [("temperature", f"T = {t:g}", _Setting(replace(requested, temperature=t)).law("canonical"), t)
            for t in (0.8, 0.9, 1.25)]
    out.append(("null", "the requested law", st.law("canonical"), None))
    for name, m in MECHANISMS.items():
        if m.declared != "exact" and not m.latent and not m.same_as_target and not m.needs_raw:
            out.append(("mechanism", name, st.law(name), None))
    return st, requested, out


def run(args: argparse.Namespace) -> int:
    from verifier.bench.diagnose import check_counts
    from verifier.diagnose.boundary import boundary_set_finding

    check_counts(args)
    rng = np.random.default_rng(args.seed)
    t0, c0 = time.perf_counter(), time.process_time()
    st, requested, laws = _laws()
    print(f"\n### Filter-boundary finding (trigram3, prompt (0, 1), T = 1, min-p {MIN_P:.4f}, k = 2, 3 tokens; "
          f"{args.runs} runs per cell; `specverify bench diagnose-boundary --runs {args.runs}`)\n")
    print("| group | rows drawn from | " + " | ".join(f"named / rounding, n = {n}" for n in args.n) + " | right means |")
    print("|---|---|" + "---|" * len(args.n) + "---|")
    wrong = 0
    for group, label, law, true_t in laws:
        cells = []
        for n in args.n:
            named = rounding = excluded = 0
            for _ in range(args.runs):
                idx = rng.choice(len(law), size=n, p=law)
                uniq, counts = np.unique(idx, return_counts=True)
                seqs = st.sp.rows(uniq)
                seqs.weights = counts.astype(np.float64)
                f = boundary_set_finding(seqs, requested, 3)
                named += bool(f["named"])
                rounding += bool(f["rounding"])
                ci = f["temperature"].get("ci") or [0.0, float("inf")]
                excluded += bool(f["rounding"] and true_t is not None and not ci[0] <= true_t <= ci[1])
            cells.append(f"{named / args.runs:.2f} / {rounding / args.runs:.2f}")
            if group in ("null", "mechanism"):
                wrong += named
            elif group == "temperature":
                wrong += excluded
        right = {"flip": "named, rounding", "temperature": "rounding only with the true T in its interval",
                 "null": "never named", "mechanism": "never named"}[group]
        print(f"| {group} | {label} | " + " | ".join(cells) + f" | {right} |")
    print(f"\nWrong findings: {wrong} (null or mechanism named; a temperature error called rounding with the true T "
          f"outside the reported interval). "
          f"{time.perf_counter() - t0:.0f} s wall, {time.process_time() - c0:.0f} s CPU.")
    return 0
