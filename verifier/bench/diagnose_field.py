"""``specverify bench diagnose-field``: the diagnosis of the mechanisms the field reports (issue 26).

Setting and method of ``specverify bench diagnose`` (:mod:`verifier.bench.diagnose`: trigram3, prompt (0, 1), k = 2,
3 tokens, rows drawn iid from a hypothesis's exact law in calls of 500, the whole family ranked, the fit check):

* **accuracy**: rows of ``recovered_one_late`` and ``draft_accept_same_uniform`` at T = 1 and of
  ``target_processed_first_only`` at T = 0.7 with top_k = 2 (at T = 1 it is the target), ``--runs`` replicates at
  each n of ``--n``: right = "consistent" with the mechanism named, wrong = a name without it, sharp = named alone;
* **pairs** (issue 26: a field mechanism beside another defect, :data:`FIELD_PAIRS`): rows of each composite's law
  at each n of ``--n``; right = the pair named (or "not excluded" beside its named part), wrong = a name without it;
* **target_processed_first_only at T = 1**: its rows are the target's: any name is wrong ("indistinguishable");
* **null**: ``--null-runs`` replicates of the target's rows at each config and the largest n: a false diagnosis is
  any name (a field mechanism named on them is counted apart);
* **old mechanisms with the larger family** (unless ``--no-old``): rows of every other non-exact mechanism at the
  largest n in its config; wrong = a diagnosis naming hypotheses without it (e.g. a field mechanism);
* **cost**: seconds per ranking of the whole family, and the ``recovered_one_late`` likelihood's forward rows, token
  positions and entries (:func:`verifier.diagnose.late.late_recover_cost`) and its wall / CPU seconds (then its 13
  pairs / ``@prefill`` variants, which share its memoised rows) on the 27 trigram3 outcomes and on the shipped
  transformers' setting (vocab 384, rows of the reference decoder at T = 1, ``--shipped-rows``, 0 skips).

Prints markdown.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

HELP = "Diagnosis of the mechanisms the field reports: accuracy per n, null and wrong names, the latent likelihood's cost."
N_GRID = (100, 300, 1000)
SLICE_ROWS = 20  # rows whose recovered_one_late likelihood is timed where the whole one is not computed (above the budget)
FIELD_CONFIGS = (("recovered_one_late", "t1"), ("draft_accept_same_uniform", "t1"), ("target_processed_first_only", "t07k2"))
# a field mechanism with another defect, each where both parts show (the processed config when a part needs processing;
# deterministic_acceptance+target_processed_first_only is left out: on trigram3 at T = 0.7, top_k 2 its law is
# deterministic_acceptance's, so its part is named by design)
FIELD_PAIRS = (("greedy_draft+recovered_one_late", "t1"), ("recovered_one_late+draft_accept_same_uniform", "t1"),
               ("full_p_fallback+draft_accept_same_uniform", "t1"), ("residual_by_index+target_processed_first_only", "t07k2"))


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=int, default=20, metavar="R", help="Replicates per row and n. Default: 20.")
    parser.add_argument("--null-runs", type=int, default=50, metavar="R", help="Null replicates per config. Default: 50.")
    parser.add_argument("--n", type=int, nargs="+", default=list(N_GRID), metavar="N",
                        help=f"Sample sizes. Default: {' '.join(map(str, N_GRID))}.")
    parser.add_argument("--no-old", action="store_true", help="Skip the old mechanisms' rows.")
    parser.add_argument("--shipped-rows", type=int, default=3000, metavar="N",
                        help="Rows of the shipped-transformers cost line (0 skips). Default: 3000.")
    parser.add_argument("--seed", type=int, default=0, help="Default: 0.")


def _cell(st, mech: str, n: int, runs: int, rng, bias: bool = True) -> tuple[int, int, int, float, str]:
    """(right, wrong, sharp, seconds per diagnosis, last sentence) over ``runs`` replicates of ``mech``'s rows."""
    from verifier.bench.diagnose import _named

    ok = bad = sh = 0
    secs, last = 0.0, ""
    for _ in range(runs):
        idx, calls = st.draw(mech, n, rng)
        t0 = time.perf_counter()
        d = st.diagnose(idx, calls, bias, rng)
        secs += time.perf_counter() - t0
        right, wrong, crisp = _named(d, mech)
        ok, bad, sh = ok + right, bad + wrong, sh + crisp
        last = d.get("sentence") or d["status"]
    return ok, bad, sh, secs / max(runs, 1), last


def run(args: argparse.Namespace) -> int:
    from verifier.bench.diagnose import _config, _named, _Setting, check_counts
    from verifier.diagnose.family import family_size
    from verifier.diagnose.mechanisms import MECHANISMS
    from verifier.sampling import SamplingConfig
    from verifier.stats._validate import check_positive_int

    check_counts(args)  # before any row is sampled
    check_positive_int(args.null_runs, "--null-runs")
    if args.shipped_rows < 0:  # checked before the tables: the shipped cost is timed last, after minutes of rows
        from verifier.errors import invalid_argument

        raise invalid_argument("--shipped-rows", args.shipped_rows, "an integer >= 0 (0 skips the shipped pair)")
    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    settings = {"t1": _Setting(SamplingConfig(temperature=1.0)), "t07k2": _Setting(SamplingConfig(temperature=0.7, top_k=2))}
    field = {m for m, _ in FIELD_CONFIGS}
    print(f"## Diagnosis of the mechanisms the field reports (trigram3, k = 2, 3 tokens, calls of 500; {family_size()} "
          f"hypotheses; `specverify bench diagnose-field --runs {args.runs} --null-runs {args.null_runs} --n "
          f"{' '.join(map(str, args.n))}`)\n")
    print("| rows from | config | " + " | ".join(f"n={n}: right / wrong / sharp" for n in args.n) +
          " | s per diagnosis | last diagnosis |")
    print("|---|---|" + "---|" * (len(args.n) + 2))
    for mech, cfg in FIELD_CONFIGS + FIELD_PAIRS + (("target_processed_first_only", "t1"),):
        st, cols, secs, last = settings[cfg], [], [], ""
        for n in args.n:
            indistinguishable = cfg == "t1" and mech == "target_processed_first_only"  # the target's law: no name is right
            ok, bad, sh, s, last = _cell(st, mech, n, args.runs, rng)
            if indistinguishable:
                ok, bad, sh = args.runs - (ok + bad), ok + bad, 0
            cols.append(f"{ok}/{args.runs} / {bad} / {sh}")
            secs.append(s)
        print(f"| {mech} | {cfg} | " + " | ".join(cols) + f" | {np.mean(secs):.2f} | {last[:140]} |", flush=True)
    big = max(args.n)
    print(f"\nNull: rows of the target at n = {big} (false diagnosis = any mechanism named; a field mechanism among the "
          "named, alone or in a pair, counted apart):\n")
    print("| config | runs | named (false diagnosis) | a field mechanism named |")
    print("|---|---|---|---|")
    for cfg, st in settings.items():
        named = with_field = 0
        for _ in range(args.null_runs):
            d = st.diagnose(*st.draw("canonical", big, rng), False, rng)
            named += d["status"] == "consistent"
            with_field += d["status"] == "consistent" and _with_field(d, field)
        print(f"| {cfg} | {args.null_runs} | {named} | {with_field} |", flush=True)
    if not args.no_old:
        print(f"\nOld mechanisms with the larger family (n = {big}, {args.runs} runs each; wrong = named without it):\n")
        print("| mechanism | config | right | wrong | sharp | a field mechanism named |")
        print("|---|---|---|---|---|---|")
        for mech, m in MECHANISMS.items():
            if m.declared == "exact" or mech in field:
                continue
            st = settings[_config(mech)]
            ok = bad = sh = with_field = 0
            for _ in range(args.runs):
                d = st.diagnose(*st.draw(mech, big, rng), True, rng)
                right, wrong, crisp = _named(d, mech)
                ok, bad, sh = ok + right, bad + wrong, sh + crisp
                with_field += d["status"] == "consistent" and _with_field(d, field)
            print(f"| {mech} | {_config(mech)} | {ok}/{args.runs} | {bad} | {sh} | {with_field} |", flush=True)
    _cost(settings["t1"], args.shipped_rows, args.seed)
    print(f"\n({time.perf_counter() - t0:.0f} s)")
    return 0


def _with_field(d: dict, field: set[str]) -> bool:
    """A named hypothesis of ``d`` has a field mechanism among its parts (alone or in a pair, either layout)."""
    from verifier.diagnose.family import parts_of

    return any(set(parts_of(p)[0]) & field for p in d.get("best") or [])


def _cost(st, shipped_rows: int, seed: int) -> None:
    """The recovered_one_late likelihood's cost on the tabular setting and on the shipped transformers' rows: wall and
    CPU seconds of recovered_one_late alone (its forward rows), then of its 13 pairs / @prefill variants after it
    (memoised columns, plus the rows their weights add), beside the canonical likelihood."""
    from verifier.diagnose.family import family_names, hypothesis
    from verifier.diagnose.late import late_recover_cost
    from verifier.diagnose.likelihood import log_likelihood
    from verifier.diagnose.rank import MAX_LATE_ENTRIES, MAX_LATE_POSITIONS

    late = [n for n in family_names() if hypothesis(n).late_recover]
    print("\nCost of the recovered_one_late likelihood (forward rows = distinct prefixes x vocab x 2 models, of token "
          f"positions = rows x context length; entries of its memoised columns; computed when <= {MAX_LATE_POSITIONS} "
          f"positions and <= {MAX_LATE_ENTRIES} entries; seconds wall / CPU):\n")
    print(f"| setting | rows | forward rows | token positions | entries | computed | recovered_one_late | the other "
          f"{len(late) - 1} late hypotheses | canonical |")
    print("|---|---|---|---|---|---|---|---|---|")
    lines = [("trigram3, all 27 outcomes, T = 1", st.sp)]
    if shipped_rows:
        lines.append(('shipped transformers, prompt "def ", reference decoder, T = 1 (distinct rows)',
                      _shipped_rows(shipped_rows, seed)))
    for label, sp in lines:
        cost = late_recover_cost(sp)
        ok = cost.positions <= MAX_LATE_POSITIONS and cost.entries <= MAX_LATE_ENTRIES
        times, cpu = [], []
        if not ok:  # measure it on a slice of the rows and scale by the token positions: what computing it would cost
            sp = sp.rows(slice(0, SLICE_ROWS))
        for names in (late[:1], late[1:], ["canonical"]):
            t0, c0 = time.perf_counter(), time.process_time()
            for name in names:
                log_likelihood(hypothesis(name), sp, 2)
            cpu.append(time.process_time() - c0)
            times.append(f"{time.perf_counter() - t0:.2f} / {cpu[-1]:.2f}")
        if not ok:
            part = late_recover_cost(sp).positions
            times[0] += f" on the first {len(sp.tokens)} rows ({part} positions): ~{cpu[0] * cost.positions / part:.0f} s CPU for all"
        print(f"| {label} | {len(sp.tokens)} | {cost.rows} | {cost.positions} | {cost.entries} | {'yes' if ok else 'no (noted)'} | "
              f"{' | '.join(times)} |", flush=True)


def _shipped_rows(n: int, seed: int):
    """Distinct rows of n reference-decoder samples on the shipped transformers (k = 2, 3 tokens, T = 1) with their probs."""
    import torch

    from verifier.decoders.mutants import make_decoder
    from verifier.diagnose.inputs import sequence_probs
    from verifier.diagnose.likelihood import unique_rows
    from verifier.models import load_model, load_tokenizer, shipped_checkpoint
    from verifier.runner.models import ReferenceModel
    from verifier.sampling import SamplingConfig

    torch.set_num_threads(1)
    target, draft = load_model(shipped_checkpoint("target")), load_model(shipped_checkpoint("draft"))
    prompt = tuple(load_tokenizer(shipped_checkpoint("target"))("def ", add_special_tokens=False)["input_ids"])
    vocab, eos = target.config.vocab_size, target.config.eos_token_id
    rows = make_decoder("reference", target, draft, 2).generate(prompt, n, 3, SamplingConfig(), seed)
    uniq, _ = unique_rows(rows)
    return sequence_probs(ReferenceModel(target, vocab, eos), ReferenceModel(draft, vocab, eos), prompt, uniq, SamplingConfig())
