"""Mechanisms the field reports (issue 26): exact laws of three defects of serving engines, on tabular pairs.

Each is one statement about which rows or which uniform a step of the round reads:

* ``recovered_one_late`` -- on a rejection at round position j (0-based), the recovered token is drawn from the
  residual of the *next* position's rows ``p[j + 1], q[j + 1]``: the rows the target and the draft computed with the
  rejected draft token in the prefix (an off-by-one index into the (k + 1)-row verify output).  At the round's last
  draft position j = k - 1 the next row is the bonus row ``p[k]``, for which the draft computed no q: the recovered
  token is then drawn from ``p[k]`` itself (the residual of ``p[k]`` against an all-zero q).  Where ``p[j + 1] ==
  q[j + 1]`` the residual is empty and ``p[j + 1]`` is drawn (as the kernels' ``residual_or_target``).
* ``draft_accept_same_uniform`` -- the draft token and the acceptance test share one uniform: ``x`` is drawn by
  inverse CDF from q in **token-id order** (``x`` = the first id with ``u < F_q(x)``, ``F_q(x) = q(0) + ... + q(x)``)
  and accepted iff ``u < p(x) / q(x)``; the recovered token comes from an independent uniform (the residual).  Given
  ``x``, ``u`` is uniform on ``[F_q(x - 1), F_q(x))``, so ``x`` is proposed *and* accepted with probability
  ``max(0, min(F_q(x), p(x) / q(x)) - F_q(x - 1))`` (the measure of the u's below the ratio in x's interval),
  instead of ``min(p(x), q(x))``: low-id tokens are accepted more, high-id tokens less.
* ``target_processed_first_only`` -- the request's temperature / top-k / top-p (the processed target probs) are
  applied at the first position of each round only; the later positions' acceptance tests and residuals and the
  bonus token use the unprocessed target probs (T = 1, no filter).  At T = 1 without filters the two are equal and
  the rule is the canonical one (exact): the defect needs processing to show.  The exact stage's cases hold one
  table per model (no sampling config), on which the rule is exact, so it is not in
  :data:`verifier.exact.rules.RULES`: :func:`target_processed_first_only` builds it for a given unprocessed table
  (``n_token_law(processed, draft, prefix, k, N, target_processed_first_only(raw))``; the processed table from
  ``verifier.models.processed_tabular``), as the decoder-level ``target_unprocessed`` mutant has no exact rule.

:data:`FIELD_RULES` (the first two) is merged into :data:`verifier.exact.rules.RULES`, so ``specverify exact --rule
NAME`` enumerates them on the standard cases.  The decoder mutants with these defects are in
:mod:`verifier.decoders.field_mutants`; the diagnosis's float64 twins in :mod:`verifier.diagnose.mechanisms`.

Glossary: see :mod:`verifier.protocols` (target/draft, processed probs, accepted, rejected position, residual,
recovered token, bonus token, emitted tokens, round, num_draft_tokens).

References
----------
Leviathan, Kalman, Matias (2023), "Fast Inference from Transformers via Speculative Decoding", Algorithm 1 (the
canonical rule these three depart from).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Sequence

from verifier.errors import invalid_argument
from verifier.exact.rules import Rule, _full_target, _ratio, _residual_or_target, _sample_draft
from verifier.exact.tabular import TabularLM

__all__ = ["FIELD_RULES", "late_recovered_law", "same_uniform_acceptance", "target_processed_first_only"]

Probs = Sequence[Fraction]


def late_recovered_law(target, draft, context: tuple[int, ...], last: bool) -> tuple[Fraction, ...]:
    """Law of ``recovered_one_late``'s recovered token after draft token ``context[-1]`` was rejected.

    Parameters
    ----------
    target, draft : TabularLM
    context : tuple of int
        The round's context up to and including the rejected draft token x.
    last : bool
        x was the round's last draft (position k - 1): the next row is the bonus row, with no draft row.

    Returns
    -------
    tuple of Fraction, shape (vocab,)
        ``p(context)`` when ``last``, else ``residual(p(context), q(context))`` (``p(context)`` where that is empty).

    Examples
    --------
    >>> from verifier.exact import standard_tabular_pairs
    >>> pair = standard_tabular_pairs()["unigram3"]
    >>> [str(v) for v in late_recovered_law(pair.target, pair.draft, (0,), True)] == [str(v) for v in pair.target.probs(())]
    True
    """
    p = target.probs(context)
    return tuple(p) if last else _residual_or_target(p, draft.probs(context), 0)


def same_uniform_acceptance(target_probs: Probs, draft_probs: Probs, x: int) -> Fraction:
    """P(draft token ``x`` accepted | proposed) when its inverse-CDF uniform is reused by the acceptance test.

    ``u`` is uniform on ``[F(x - 1), F(x))`` (``F`` the CDF of q in token-id order) and ``x`` is accepted iff
    ``u < p(x) / q(x)``: the accepted share of the interval, ``max(0, min(F(x), p(x) / q(x)) - F(x - 1)) / q(x)``.

    Examples
    --------
    >>> from fractions import Fraction as F
    >>> p, q = [F(5, 10), F(3, 10), F(2, 10)], [F(2, 10), F(3, 10), F(5, 10)]
    >>> [str(same_uniform_acceptance(p, q, x)) for x in range(3)]  # canonical min(1, p/q): 1, 1, 2/5
    ['1', '1', '0']
    """
    qx = draft_probs[x]
    below = sum(draft_probs[:x], Fraction(0))  # F(x - 1)
    ratio = target_probs[x] / qx
    return max(Fraction(0), min(below + qx, ratio) - below) / qx


def target_processed_first_only(target_raw: TabularLM, inner: Rule | str = "canonical") -> Rule:
    """The ``target_processed_first_only`` rule for the unprocessed target table ``target_raw``.

    The rule is applied to the *processed* target (the table the request's sampling config gives, whose law the
    output should have): the first position of each round is verified against it; the later positions (acceptance
    test and residual) and the bonus token against ``target_raw``.

    Parameters
    ----------
    target_raw : TabularLM
        The unprocessed target (T = 1, no filter), same vocabulary and EOS as the processed one.
    inner : Rule or str, default "canonical"
        The per-position rule the round runs on those rows (another defect of the same engine: the composite
        ``inner+target_processed_first_only``, :func:`verifier.exact.composite.composite_rule`).

    Returns
    -------
    Rule
        Named ``target_processed_first_only``, declared ``biased``; per-position hooks ``inner``'s (one step verifies
        the first position), ``round_outcomes`` the round law above.  With ``target_raw`` equal to the processed table
        the law is ``inner``'s (the target's for the canonical rule: T = 1 without filters is exact).

    Raises
    ------
    InvalidArgumentError
        ``target_raw`` is not a TabularLM; ``inner`` is no rule or enumerates whole rounds itself; at enumeration,
        another vocabulary size or EOS than the processed target.

    Examples
    --------
    >>> from verifier.exact import n_token_law, standard_tabular_pairs, target_law
    >>> pair = standard_tabular_pairs()["trigram3"]
    >>> rule = target_processed_first_only(pair.target)  # no processing: the canonical law
    >>> n_token_law(pair.target, pair.draft, pair.prefix, 2, 3, rule) == target_law(pair.target, pair.prefix, 3)
    True
    """
    if not isinstance(target_raw, TabularLM):
        raise invalid_argument("target_raw", type(target_raw).__name__, "a verifier.exact.TabularLM (the unprocessed target)",
                               where="target_processed_first_only")
    from verifier.exact.rules import get_rule

    inner_rule = get_rule(inner)
    if inner_rule.round_outcomes is not None:
        raise invalid_argument("inner", inner_rule.name, "a per-position rule (not one that enumerates whole rounds)",
                               where="target_processed_first_only")

    def round_outcomes(target, draft, prefix, k, rule):
        from verifier.exact.laws import _round_outcomes

        for name, value, want in (("target_raw.vocab_size", target_raw.vocab_size, target.vocab_size),
                                  ("target_raw.eos_token_id", target_raw.eos_token_id, target.eos_token_id)):
            if value != want:
                raise invalid_argument(name, value, f"the processed target's ({want})", where="target_processed_first_only")
        yield from _round_outcomes(_FirstContextOnly(target, target_raw, tuple(prefix)), draft, prefix, k, inner_rule)

    hooks = {h: getattr(inner_rule, h) for h in ("propose", "acceptance", "recover", "bonus_offset", "shared_uniform",
                                                  "keep_suffix", "position_acceptance", "recover_after")}
    return Rule("target_processed_first_only", "biased",
                "the request's temperature / top-k / top-p (processed target probs) applied at the first position of "
                "each round only; later acceptance tests, residuals and the bonus token use the unprocessed target",
                round_outcomes=round_outcomes, **hooks)


class _FirstContextOnly:
    """A target whose rows are the processed table's at the round's first context and the raw table's elsewhere
    (every later position of the round, and the bonus position, has a longer context)."""

    def __init__(self, processed: TabularLM, raw: TabularLM, first: tuple[int, ...]) -> None:
        self.processed, self.raw, self.first = processed, raw, first
        self.eos_token_id = processed.eos_token_id

    def probs(self, prefix: Sequence[int]) -> tuple[Fraction, ...]:
        return self.processed.probs(prefix) if tuple(prefix) == self.first else self.raw.probs(prefix)


def _rule(name: str, description: str, **hooks) -> Rule:
    return Rule(name, "biased", description, hooks.pop("propose", _sample_draft), hooks.pop("acceptance", _ratio),
                hooks.pop("recover", _residual_or_target), **hooks)


FIELD_RULES: dict[str, Rule] = {r.name: r for r in [
    _rule("recovered_one_late", "on rejection at position j the recovered token is drawn from the residual of the next "
          "position's rows p[j+1], q[j+1] (computed with the rejected draft in the prefix); at the last position from "
          "the bonus row p[k]", recover=_full_target, recover_after=late_recovered_law),
    _rule("draft_accept_same_uniform", "the draft token is drawn by inverse CDF (token-id order) with a uniform u and "
          "the acceptance test u < p(x)/q(x) reuses the same u; recovered token ~ residual (independent uniform)",
          acceptance=same_uniform_acceptance),
]}
