"""``specverify bench detect --penalties``: samples to detect the penalty zoo against the oracle (issue 29, bug kind 3).

The three mutants of :mod:`verifier.decoders.penalty_mutants` (``penalty_once_per_round``,
``penalty_ignored_in_verification``, ``min_p_skipped_on_verified``) have exact laws of their first N emitted tokens
(:func:`verifier.exact.penalties.penalty_n_token_law`), so they are measured as ``bench detect`` measures the rule zoo
(``verifier.bench.detect.detect_penalty_rows`` runs ``detect._measure`` on :func:`penalty_cases`): rows of N = k + 2 tokens drawn iid from the mutant's exact law, fed to the
``default`` battery (gof@1,2 + joint@1..2 + surprisal@1..2 + pit) and the ``window`` battery (every position of the
window, as ``tests/runner/suites/penalties.toml``), fixed-n and sequential, against the Neyman--Pearson oracle on the
two N-token laws.  The PIT reads the target's processed law after each prefix (penalties counted over it).

Cases: each standard pair with its prompt of repeated tokens (:data:`verifier.exact.penalties.PENALTY_PROMPTS`), k = 2,
N = 4, under two settings (:data:`SETTINGS`): ``strong`` = ``PENALTY_SAMPLING`` (the suite's: repetition 1.5, presence
0.5, frequency 0.5, min-p 0.3) and ``mild`` (repetition 1.2, presence 0.2, frequency 0.2, min-p 0.15).  A (mutant, case)
whose exact law equals the target's is skipped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from verifier.bench._battery import TupleLaw
from verifier.bench._common import names_from
from verifier.sampling import SamplingConfig

__all__ = ["PENALTY_MUTANTS", "SETTINGS", "K", "N", "PenaltyCase", "penalty_cases"]

PENALTY_MUTANTS = ("penalty_once_per_round", "penalty_ignored_in_verification", "min_p_skipped_on_verified")
SETTINGS = {
    "strong": SamplingConfig(repetition_penalty=1.5, presence_penalty=0.5, frequency_penalty=0.5, min_p=0.3),
    "mild": SamplingConfig(repetition_penalty=1.2, presence_penalty=0.2, frequency_penalty=0.2, min_p=0.15),
}
K, N = 2, 4  # rounds of two drafts; N = k + 2 tokens reach the second round


@dataclass
class PenaltyCase:
    """One (pair, setting): the target's exact N-token law, the mutants' laws that differ from it, the PIT's law."""

    label: str  # "PAIR/SETTING"
    target_law: dict
    laws: dict  # mutant -> exact law
    tuple_law: TupleLaw


def penalty_cases(mutants: Sequence[str] | None = None, cases: Sequence[str] | None = None) -> list[PenaltyCase]:
    """The cases ``specverify bench detect --penalties`` measures (module docstring); a (mutant, case) whose exact law
    equals the target's is left out, a case with no mutant left is skipped.

    Parameters
    ----------
    mutants : sequence of str, optional
        Names from :data:`PENALTY_MUTANTS`; default all three.
    cases : sequence of str, optional
        Pairs from :data:`verifier.exact.penalties.PENALTY_PROMPTS` (each under both settings); default all three.

    Returns
    -------
    list[PenaltyCase]

    Raises
    ------
    InvalidArgumentError
        Unknown mutant or case.
    """
    from verifier.exact import standard_tabular_pairs
    from verifier.exact.penalties import PENALTY_PROMPTS, HistoryProcessedLM, penalty_n_token_law, penalty_target_law

    names = names_from("mutants", mutants, PENALTY_MUTANTS)
    pairs = names_from("cases", cases, PENALTY_PROMPTS)
    out = []
    for pname, sname in ((p, s) for p in pairs for s in SETTINGS):
        pair, prompt, sampling = standard_tabular_pairs()[pname], PENALTY_PROMPTS[pname], SETTINGS[sname]
        tlaw = penalty_target_law(pair.target, prompt, sampling, N)
        laws = {m: law for m in names
                if (law := penalty_n_token_law(pair.target, pair.draft, prompt, sampling, K, N, rule=m)) != tlaw}
        if not laws:
            continue
        view = HistoryProcessedLM(pair.target, sampling, len(prompt))
        tl = TupleLaw(tlaw, lambda pre, v=view, pr=prompt: v.probs(pr + tuple(pre)), pair.target.vocab_size,
                      list(laws.values()))
        out.append(PenaltyCase(f"{pname}/{sname}", tlaw, laws, tl))
    return out
