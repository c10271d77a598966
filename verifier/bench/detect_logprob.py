"""``specverify bench detect --logprob``: rows to detect the logprob zoo against an oracle (issue 29, bug kind 4).

The zoo (``logprobs_zero``, ``logprobs_first_only``, ``logprobs_draft_row``, :mod:`verifier.decoders.logprob_mutants`)
samples exactly as the reference and reports a wrong logprob at some tokens.  A wrong value is impossible under the
null (a correct decoder reports the target's log p), and a row whose values are all right is at most as likely under
the mutant as under the null (same token law, and only part of it keeps every value right), so the likelihood ratio
is infinite on a row with a wrong value and at most 1 elsewhere: the Neyman--Pearson test rejects iff such a row
appeared, which is what the deterministic ``logprob`` cell (:mod:`verifier.runner.logprob`) does -- the cell *is* the
oracle.  Rows to detect are geometric in the exact probability ``pi`` that a row's first N tokens hold a wrong value
(:attr:`verifier.exact.LogprobDefectLaw.row_wrong`): the oracle's median ``ceil(log 0.5 / log(1 - pi))`` and its n at
power 0.99 ``ceil(log 0.01 / log(1 - pi))``.  The per-token share (expected wrong tokens / emitted tokens) is beside.

Measured: the real decoder (tabular torch models) with ``return_logprobs=True`` in calls of :data:`LOGPROB_CHUNK` rows,
each row's values against the teacher-forced scorer (:class:`verifier.decoders.scorer.TargetScorer`, tolerance
:data:`verifier.runner.logprob.LOGPROB_TOL` float64), one stream of independent rows until ``--seeds`` rows with a
wrong value appeared; by memorylessness the gaps between them (the first from the start) are ``--seeds`` iid "rows to
the first wrong value", whose median and p90 stand beside the geometric ones (a check that the decoder's rate is the
exact ``pi``).  Cases: ``bigram4_eos`` (prompt (0,), EOS 3) and ``trigram3`` (prompt (0, 1)), k = 3, N = 6, T = 1.
"""

from __future__ import annotations

import math
import time
from typing import Sequence

import numpy as np

from verifier.bench._common import fmt_n, fmt_ratio, md_table, names_from
from verifier.bench.detect_stop import StopDetectRow, _geometric_n

__all__ = ["LOGPROB_CHUNK", "LOGPROB_CASES", "LOGPROB_MUTANTS", "detect_logprob_rows", "render_logprob_markdown"]

LOGPROB_CHUNK = 200  # rows per generate call
LOGPROB_CASES = {"bigram4_eos": (0,), "trigram3": (0, 1)}  # pair -> prompt
WIDTH, K = 6, 3
LOGPROB_MUTANTS = {"logprobs_zero": "zero", "logprobs_first_only": "first_only", "logprobs_draft_row": "draft_row"}
MAX_ROWS = 20_000  # rows per measured stream and seed (censored beyond: `>M`)


def _row(mutant: str, case: str, *, seeds: int, seed: int) -> StopDetectRow:
    from verifier.decoders import make_decoder
    from verifier.decoders.scorer import TargetScorer
    from verifier.exact import logprob_defect_law, standard_tabular_pairs
    from verifier.models import TabularCausalLM
    from verifier.runner.logprob import LOGPROB_TOL, wrong_tokens
    from verifier.sampling import SamplingConfig

    t0 = time.perf_counter()
    pair, prompt = standard_tabular_pairs()[case], LOGPROB_CASES[case]
    law = logprob_defect_law(pair.target, pair.draft, prompt, K, WIDTH, LOGPROB_MUTANTS[mutant])
    pi = float(law.row_wrong)
    target = TabularCausalLM(pair.target)
    decoder = make_decoder(mutant, target, TabularCausalLM(pair.draft), K)
    scorer, sampling = TargetScorer(target, batch_size=LOGPROB_CHUNK), SamplingConfig(temperature=1.0)
    firsts, done, last = [], 0, 0
    while len(firsts) < seeds and done < MAX_ROWS * seeds:
        tokens, reported = decoder.generate(list(prompt), LOGPROB_CHUNK, WIDTH, sampling, seed * 1_000_003 + done,
                                            return_logprobs=True)
        probs = next(scorer.score(list(prompt), tokens, sampling)).probs
        with np.errstate(divide="ignore"):
            ref = np.log(np.take_along_axis(probs, np.clip(tokens, 0, None)[..., None], -1)[..., 0])
        for i in np.flatnonzero(wrong_tokens(tokens, reported, ref, LOGPROB_TOL["float64"]).any(axis=1)):
            firsts.append(done + int(i) + 1 - last)
            last = done + int(i) + 1
        done += LOGPROB_CHUNK
    firsts = (firsts + [math.inf] * seeds)[:seeds]  # censored where the stream ran out of rows
    med, p90 = (float(np.quantile(np.array(firsts), q, method="higher")) for q in (0.5, 0.9))
    return StopDetectRow(mutant=mutant, case=case, cell="logprob",
                         effect=f"rows pi = {pi:.4g}; tokens {float(law.token_share):.3g}",
                         oracle_median=_geometric_n(pi, 0.5) if pi < 1 else 1, oracle_n=_geometric_n(pi, 0.99) if pi < 1 else 1,
                         oracle_method="exact pi; NP test = the cell", median=med, p90=p90, max_n=MAX_ROWS, seeds=seeds,
                         seconds=time.perf_counter() - t0)


def detect_logprob_rows(mutants: Sequence[str] | None = None, cases: Sequence[str] | None = None, *, seeds: int = 100,
                        seed: int = 0, progress=None) -> list[StopDetectRow]:
    """Rows to detect each logprob mutant on each case (module docstring).

    Parameters
    ----------
    mutants : sequence of str, optional
        Names from :data:`LOGPROB_MUTANTS`; default all three.
    cases : sequence of str, optional
        Tabular pairs from :data:`LOGPROB_CASES`; default both.
    seeds : int, default 100
        Rows with a wrong value to wait for per (mutant, case).
    seed : int
        Base of every stream's seed.

    Returns
    -------
    list[StopDetectRow]
        ``cell = "logprob"``; sample sizes in rows of N = 6 tokens.

    Raises
    ------
    InvalidArgumentError
        Unknown mutant or case, seeds < 1.
    """
    from verifier.bench._common import check_detect_args

    names = names_from("mutants", mutants, LOGPROB_MUTANTS)
    case_names = names_from("cases", cases, LOGPROB_CASES)
    check_detect_args(seeds=seeds, alpha=0.01, power=0.99, max_factor=1.0)
    out = []
    for i, (mutant, case) in enumerate((m, c) for m in names for c in case_names):
        row = _row(mutant, case, seeds=seeds, seed=seed + 80_000 + i)
        out.append(row)
        if progress:
            progress(f"  {mutant:<24} {case:<12} oracle median {row.oracle_median:>6g}  measured median "
                     f"{fmt_n(row.median, row.max_n):>6} ({fmt_ratio(row.ratio)})  [{row.seconds:.1f}s]")
    return out


def render_logprob_markdown(rows: Sequence[StopDetectRow]) -> str:
    """One table: every (mutant, case) with its effect, oracle and measured rows to detect."""
    if not rows:
        return "_no logprob mutant selected_\n"
    table = [[r.mutant, r.case, r.effect, f"{r.oracle_median:g}", f"{r.oracle_n} ({r.oracle_method})",
              fmt_n(r.median, r.max_n), fmt_n(r.p90, r.max_n), fmt_ratio(r.ratio)] for r in rows]
    head = (f"Rows of N = {WIDTH} tokens, k = {K}, T = 1; {rows[0].seeds} seeds; rows to detect with the logprob cell "
            "(median / p90 over the seeds); `>M`: not detected within M rows.\n\n")
    return head + md_table(["mutant", "case", "effect (P(row has a wrong value); share of wrong tokens)",
                            "oracle median", "oracle n at power 0.99 (method)", "median", "p90", "median / oracle"],
                           table) + "\n"
