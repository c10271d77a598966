"""``specverify bench detect --vocab``: samples to detect drafts in another vocabulary (issue 29, bug kind 7).

The mutants of :mod:`verifier.exact.vocab` (decoders :mod:`verifier.decoders.vocab_mutants`) change what the draft
samples from or what the verifier divides by, so their whole N-token law moves and the method of ``bench detect``
applies unchanged (:func:`verifier.bench.detect._measure`): rows of N = 3 emitted tokens drawn iid from the mode's
exact law (:func:`verifier.exact.vocab.vocab_n_token_law`, k = 2, the decoders' default maps
(:func:`verifier.exact.vocab.default_map_for`: ``(0, 0, 1, ..., V - 2)`` with an equal split for many_to_one_q_single,
the identity for the others), the reversed permutation, bfloat16, top-k 2), fed to the ``default`` and ``window`` batteries at
family-wise alpha, against the Neyman--Pearson oracle on the two exact laws.  ``draft_processors_differ`` is visible
only when the request filters: its case is the pair at T = 1 with top_k = 2 (target rows cut to their top 2 exactly,
the draft sampling its own top 2, q reported unfiltered); the other modes run at T = 1.

A mode whose oracle n exceeds :data:`MAX_SIMULATED` (``q_dtype_mismatch``: bfloat16 moves q by at most 2^-9
relative, TV ~1e-4) is reported with its oracle n only: no battery can do better than the oracle, and simulating
5x that many rows per seed is not affordable.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

from verifier.bench._common import check_detect_args, fmt_n, md_table, names_from

__all__ = ["VOCAB_CASES", "VOCAB_MUTANTS", "MAX_SIMULATED", "OracleOnly", "detect_vocab_rows", "render_oracle_only"]

VOCAB_CASES = ("bigram4_eos", "trigram3")
VOCAB_MUTANTS = ("many_to_one_q_single", "q_permuted", "q_dtype_mismatch", "draft_processors_differ")
K, NUM_TOKENS, TOP_K = 2, 3, 2
MAX_SIMULATED = 200_000  # oracle n above which only the oracle is reported (streams of 5x that per seed)


@dataclass(frozen=True)
class OracleOnly:
    """A (mode, case) whose oracle n is beyond :data:`MAX_SIMULATED`: the Neyman--Pearson n alone."""

    rule: str
    case: str
    tv: float
    oracle_n: int
    oracle_method: str


def _top_k_table(lm, k: int):
    from verifier.exact import TabularLM
    from verifier.exact.vocab import _top_k

    return TabularLM({ctx: _top_k(lm.probs(ctx), k) for ctx in lm.contexts}, lm.vocab_size, lm.context_len,
                     lm.eos_token_id, name=f"{lm.name}|top_k={k}")


def detect_vocab_rows(rules: Sequence[str] | None, cases: Sequence[str] | None, *, measure, batteries, seeds: int = 100,
                      alpha: float = 0.01, power: float = 0.99, max_factor: float = 5.0, seed: int = 0,
                      progress=None) -> tuple[list, list[OracleOnly]]:
    """Measure samples to detect each vocabulary mutant on each case where its law differs from the target's.

    Parameters
    ----------
    rules : sequence of str, optional
        Names from :data:`VOCAB_MUTANTS`; default all.
    cases : sequence of str, optional
        Names from :data:`VOCAB_CASES`; default both.
    measure, batteries : callable
        :func:`verifier.bench.detect._measure` and :func:`verifier.bench.detect.batteries` (passed in by
        ``bench detect --vocab``: this module does not import ``detect``, which imports it).
    seeds, alpha, power, max_factor, seed, progress
        As :func:`verifier.bench.detect.detect_rows`.

    Returns
    -------
    rows : list[verifier.bench.detect.DetectRow]
        ``rule`` = the mode, ``case`` = the pair (``|top_k=2`` for draft_processors_differ).
    oracle_only : list[OracleOnly]
        Modes whose oracle n is beyond :data:`MAX_SIMULATED`.

    Raises
    ------
    InvalidArgumentError
        Unknown mode or case, seeds < 1, alpha/power outside (0, 1), max_factor < 1.
    """
    from verifier.bench._battery import TupleLaw
    from verifier.bench._oracle import np_oracle_samples
    from verifier.exact import standard_tabular_pairs, target_law, total_variation
    from verifier.exact.vocab import default_map_for, map_draft, vocab_n_token_law, vocab_view

    names = names_from("rules", rules, dict.fromkeys(VOCAB_MUTANTS))
    case_names = names_from("cases", cases, dict.fromkeys(VOCAB_CASES))
    check_detect_args(seeds=seeds, alpha=alpha, power=power, max_factor=max_factor)
    pairs = standard_tabular_pairs()
    rows, oracle_only = [], []
    for ci, cname in enumerate(case_names):
        pair = pairs[cname]
        for ri, mode in enumerate(names):
            draft = map_draft(pair.draft, default_map_for(mode, pair.target.vocab_size))
            target, label = pair.target, cname
            if mode == "draft_processors_differ":
                target, label = _top_k_table(pair.target, TOP_K), f"{cname}|top_k={TOP_K}"
            view = vocab_view(mode, vocab_size=target.vocab_size, top_k=TOP_K)
            tlaw = target_law(target, pair.prefix, NUM_TOKENS)
            law = vocab_n_token_law(target, draft, pair.prefix, K, NUM_TOKENS, view)
            if law == tlaw:
                continue
            oracle = np_oracle_samples(tlaw, law, alpha=alpha, power=power)
            if oracle.n > MAX_SIMULATED:
                oracle_only.append(OracleOnly(mode, label, float(total_variation(law, tlaw)), oracle.n, oracle.method))
                if progress:
                    progress(f"  {mode:<26} {label:<22} oracle {oracle.n} > {MAX_SIMULATED}: not simulated")
                continue
            tl = TupleLaw(tlaw, lambda pre, t=target, pr=pair.prefix: t.probs(tuple(pr) + tuple(pre)), target.vocab_size, [law])
            rows += measure(tl, tlaw, law, batteries(NUM_TOKENS, alpha), rule=mode, declared="biased", case=label,
                             num_draft_tokens=K, num_tokens=NUM_TOKENS, seeds=seeds, alpha=alpha, power=power,
                             max_factor=max_factor, seed=seed + 70_000 + 1000 * ci + ri, progress=progress)
    return rows, oracle_only


def render_oracle_only(oracle_only: Sequence[OracleOnly]) -> str:
    """The oracle-only modes as a markdown table ('' when none)."""
    if not oracle_only:
        return ""
    return "\n".join([f"**Oracle only** (oracle n > {MAX_SIMULATED}: not simulated):\n",
                      md_table(["rule", "case", "TV", "oracle n (method)"],
                               [[o.rule, o.case, f"{o.tv:.2e}", f"{fmt_n(o.oracle_n)} ({o.oracle_method})"]
                                for o in oracle_only])]) + "\n"
