"""``specverify bench detect --field``: samples to detect the mechanisms the field reports (issue 26).

The three laws of :mod:`verifier.exact.field_rules` (decoders :mod:`verifier.decoders.field_mutants`) move the whole
N-token law, so the method of ``bench detect`` applies unchanged (:func:`verifier.bench.detect._measure`): rows of
N = 3 emitted tokens drawn iid from the mechanism's exact law (k = 2) fed to the ``default`` and ``window``
batteries at family-wise alpha, against the Neyman--Pearson oracle on the two exact laws.

* ``recovered_one_late`` and ``draft_accept_same_uniform`` run at T = 1 (the exact tables);
* ``target_processed_first_only`` is the target at T = 1 without filters, so its case is the pair under processing:
  the request at T = 1/2 with top_k = 2, computed exactly (each target row squared and renormalised, then cut to its
  top 2, ties kept: ``|T=1/2,top_k=2``); the draft samples its own processed rows; the later positions of a round and
  the bonus token read the unprocessed (exact) table.

Rows per (mechanism, case): ``--seeds`` streams per battery (default 100).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Sequence

from verifier.bench._common import check_detect_args, names_from

__all__ = ["FIELD_CASES", "FIELD_MECHANISMS", "PROCESSED_LABEL", "detect_field_rows", "processed_table"]

FIELD_CASES = ("bigram4_eos", "trigram3")
FIELD_MECHANISMS = ("recovered_one_late", "draft_accept_same_uniform", "target_processed_first_only")
K, NUM_TOKENS = 2, 3
TEMPERATURE_POWER, TOP_K = 2, 2  # the processed case: T = 1 / TEMPERATURE_POWER (rows squared: exact), then top-k
PROCESSED_LABEL = f"T=1/{TEMPERATURE_POWER},top_k={TOP_K}"


def processed_table(lm):
    """``lm`` at T = 1/2 with top_k = 2, exactly: each row squared and renormalised, then its top 2 kept (ties kept)."""
    from verifier.exact import TabularLM
    from verifier.exact.vocab import _top_k

    table = {}
    for ctx in lm.contexts:
        w = [v ** TEMPERATURE_POWER for v in lm.probs(ctx)]
        table[ctx] = _top_k(tuple(x / sum(w, Fraction(0)) for x in w), TOP_K)
    return TabularLM(table, lm.vocab_size, lm.context_len, lm.eos_token_id, name=f"{lm.name}|{PROCESSED_LABEL}")


def detect_field_rows(rules: Sequence[str] | None, cases: Sequence[str] | None, *, measure, batteries, seeds: int = 100,
                      alpha: float = 0.01, power: float = 0.99, max_factor: float = 5.0, seed: int = 0,
                      progress=None) -> list:
    """Measure samples to detect each field mechanism on each case.

    Parameters
    ----------
    rules : sequence of str, optional
        Names from :data:`FIELD_MECHANISMS`; default all.
    cases : sequence of str, optional
        Names from :data:`FIELD_CASES`; default both.
    measure, batteries : callable
        :func:`verifier.bench.detect._measure` and :func:`verifier.bench.detect.batteries` (passed in by
        ``bench detect --field``: this module does not import ``detect``, which imports it).
    seeds, alpha, power, max_factor, seed, progress
        As :func:`verifier.bench.detect.detect_rows`.

    Returns
    -------
    list[verifier.bench.detect.DetectRow]
        ``rule`` = the mechanism, ``case`` = the pair (``|T=1/2,top_k=2`` for target_processed_first_only).

    Raises
    ------
    InvalidArgumentError
        Unknown mechanism or case, seeds < 1, alpha/power outside (0, 1), max_factor < 1.
    """
    from verifier.bench._battery import TupleLaw
    from verifier.exact import n_token_law, standard_tabular_pairs, target_law
    from verifier.exact.field_rules import target_processed_first_only

    names = names_from("rules", rules, dict.fromkeys(FIELD_MECHANISMS))
    case_names = names_from("cases", cases, dict.fromkeys(FIELD_CASES))
    check_detect_args(seeds=seeds, alpha=alpha, power=power, max_factor=max_factor)
    pairs = standard_tabular_pairs()
    rows = []
    for ci, cname in enumerate(case_names):
        pair = pairs[cname]
        for ri, name in enumerate(names):
            target, draft, rule, label = pair.target, pair.draft, name, cname
            if name == "target_processed_first_only":
                target, draft = processed_table(pair.target), processed_table(pair.draft)
                rule, label = target_processed_first_only(pair.target), f"{cname}|{PROCESSED_LABEL}"
            tlaw = target_law(target, pair.prefix, NUM_TOKENS)
            law = n_token_law(target, draft, pair.prefix, K, NUM_TOKENS, rule)
            tl = TupleLaw(tlaw, lambda pre, t=target, pr=pair.prefix: t.probs(tuple(pr) + tuple(pre)), target.vocab_size, [law])
            rows += measure(tl, tlaw, law, batteries(NUM_TOKENS, alpha), rule=name, declared="biased", case=label,
                            num_draft_tokens=K, num_tokens=NUM_TOKENS, seeds=seeds, alpha=alpha, power=power,
                            max_factor=max_factor, seed=seed + 80_000 + 1000 * ci + ri, progress=progress)
    return rows
