"""Verification rules as values: the canonical rule of speculative sampling and the rule zoo.

A :class:`Rule` says, for one position of a round, how the draft token is proposed, with what
probability it is accepted, what the recovered token is drawn from at the rejected position, and
three round-level switches (where the bonus token comes from, whether the draft suffix survives a
rejection, whether one uniform is shared by every position).  The enumerators in
:mod:`verifier.exact.laws` run one algorithm parametrised by the rule, so every rule -- correct or
mutant -- gets its exact law from the same code.

Glossary: see :mod:`verifier.protocols` (target/draft, accepted, rejected position, residual,
recovered token, bonus token, emitted tokens, round, mutant).

Exactness.  Everything is :class:`fractions.Fraction`.  Two rules need ``exp``:

* typical acceptance compares ``p(x)`` with ``delta * exp(-H(p))``.  With ``p_i = n_i / D`` this is
  decided exactly: ``p(x) > delta * prod_i p_i ** p_i``  iff
  ``(p(x) / delta) ** D > prod_i p_i ** n_i`` (integer powers of rationals), so no float enters.
  For ``D > 10_000`` (e.g. rows read from long decimals) the powers are too large and 60-digit
  :mod:`decimal` logarithms decide instead; a gap below 1e-50 is an error, never a guess.
* the softmax-residual mutant emits ``softmax(max(0, p - q))``, whose entries are irrational.  Each
  ``exp`` is computed with :mod:`decimal` to :data:`SOFTMAX_DIGITS` significant digits, converted
  exactly to a Fraction and the vector renormalised to sum to exactly 1: every entry is within a
  relative ``1e-48`` of the true softmax.  This is the only float-like step in the exact stage; it
  cannot turn a biased law into an exact one (the bias is many orders of magnitude larger).

References
----------
Leviathan, Kalman, Matias (2023), "Fast Inference from Transformers via Speculative Decoding",
Algorithm 1 and Appendix A.1.  Chen et al. (2023), "Accelerating Large Language Model Decoding with
Speculative Sampling", Algorithm 2.  Sun et al. (2024), "Block Verification Accelerates Speculative
Decoding", arXiv:2403.10444, Algorithm 2 (``block_verification``).  Cai et al. (2024), "Medusa", section 2.3.1 (typical acceptance).
vLLM 0.32.0 ``vllm/v1/sample/rejection_sampler.py`` (``rejection_sample_method = "synthetic"``, issue 29 kind 6:
``synthetic_acceptance``).
"""

from __future__ import annotations

import decimal
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable, Sequence

from verifier.errors import invalid_argument
from verifier.exact.block import block_round_outcomes

__all__ = [
    "Rule",
    "RULES",
    "get_rule",
    "residual",
    "TYPICAL_EPSILON",
    "TYPICAL_DELTA",
    "SOFTMAX_DIGITS",
    "DECLARED_STATUSES",
    "SYNTHETIC_RATES",
    "synthetic_acceptance",
]

Probs = Sequence[Fraction]

DECLARED_STATUSES = ("exact", "biased", "lossy")  # lossy: biased on purpose (an approximation that says so)
TYPICAL_EPSILON = Fraction(9, 100)  # Medusa's default posterior_threshold
TYPICAL_DELTA = Fraction(3, 10)  # Medusa's default posterior_alpha
SOFTMAX_DIGITS = 50  # significant digits of each exp() in the softmax-residual mutant
BY_INDEX_TOLERANCE = Fraction(1, 10**9)  # residual_by_index: deficits <= this are 0 (= diagnose.mechanisms', kernels')
TYPICAL_MAX_EXACT_DENOMINATOR = 10_000  # above: (p/delta)**D is too big to form; 60-digit logarithms decide instead
# synthetic_acceptance's default conditional acceptance per draft position (1, 2, then the last repeats): a decaying
# schedule as vLLM's synthetic mode draws (its decay factor >= 0.85 per position); any values work, see synthetic_acceptance
SYNTHETIC_RATES = (Fraction(4, 5), Fraction(3, 5))


@dataclass(frozen=True)
class Rule:
    """One verification rule: per-position hooks plus round-level switches.

    Attributes
    ----------
    name : str
        Registry key in :data:`RULES`.
    declared : {"exact", "biased", "lossy"}
        What the rule claims: ``exact`` rules must preserve the target law; mutants are ``biased``;
        ``lossy`` marks an approximation that is biased on purpose.
    description : str
        One line for reports.
    propose : callable (draft_probs) -> probs
        Law of the draft token given the draft probs q (canonical: q itself).
    acceptance : callable (target_probs, draft_probs, x) -> Fraction in [0, 1]
        The draft token x is accepted iff ``U < acceptance`` for a uniform U; canonical
        ``min(1, p(x) / q(x))``.
    recover : callable (target_probs, draft_probs, x) -> probs
        Law of the recovered token at the rejected position (canonical: the residual).  Only
        called when a rejection has positive probability.
    bonus_offset : int, default 0
        The bonus token is drawn from the target at position ``k + 1 + bonus_offset``; ``-1`` is the
        off-by-one mutant.
    keep_suffix : bool, default False
        After the recovered token, also emit the draft tokens proposed after the rejected position.
    shared_uniform : bool, default False
        One uniform U for every position of a round instead of a fresh one per position.
    round_outcomes : callable or None, default None
        A round-level rule (one whose decision at a position depends on later positions, e.g.
        block verification, :mod:`verifier.exact.block`): ``(target, draft, prefix, k, rule) ->``
        iterator of ``(emitted tokens, accepted drafts, probability)`` replacing the per-position
        enumerator for whole rounds.  The per-position hooks then describe the rule at ``k = 1``
        (what :func:`verifier.exact.step_law` and the kernel audit use).
    position_acceptance : tuple of Fraction or None, default None
        A rule whose acceptance ignores p, q and the draft token (``synthetic_acceptance``): the draft at round
        position j (1-based) is accepted with probability ``position_acceptance[j - 1]`` (positions beyond the
        tuple take its last entry), replacing ``acceptance`` in the round enumerators; ``acceptance`` is then the
        position-1 entry (the rule at ``k = 1``).
    recover_after : callable or None, default None
        A recovered-token law read from the models *after* the rejected draft token (``recovered_one_late``,
        :mod:`verifier.exact.field_rules`): ``(target, draft, context + (x,), last) -> probs`` with ``last`` True at
        the round's last draft position; replaces ``recover`` in the round enumerators (``recover`` is then the
        rule at ``k = 1`` on a context-free pair).
    """

    name: str
    declared: str
    description: str
    propose: Callable[[Probs], Probs]
    acceptance: Callable[[Probs, Probs, int], Fraction]
    recover: Callable[[Probs, Probs, int], Probs]
    bonus_offset: int = 0
    keep_suffix: bool = False
    shared_uniform: bool = False
    round_outcomes: Callable | None = None
    position_acceptance: tuple[Fraction, ...] | None = None
    recover_after: Callable | None = None

    def __post_init__(self) -> None:
        assert self.declared in DECLARED_STATUSES, self.declared
        assert self.bonus_offset in (0, -1), self.bonus_offset

    def acceptance_at(self, position: int, target_probs: Probs, draft_probs: Probs, x: int) -> Fraction:
        """Acceptance threshold of draft token ``x`` at round position ``position`` (1-based): accept iff ``U <`` it."""
        rates = self.position_acceptance
        if rates is None:
            return self.acceptance(target_probs, draft_probs, x)
        return rates[min(position, len(rates)) - 1]


# -- per-position building blocks -------------------------------------------------------------


def _argmax(probs: Probs) -> int:
    """First index of the largest entry (ties go to the lowest token id, as ``torch.argmax``)."""
    return max(range(len(probs)), key=lambda i: (probs[i], -i))


def _one_hot(index: int, size: int) -> tuple[Fraction, ...]:
    return tuple(Fraction(int(i == index)) for i in range(size))


def residual(target_probs: Probs, draft_probs: Probs) -> tuple[Fraction, ...] | None:
    """The residual ``max(0, p - q) / sum(max(0, p - q))``, or ``None`` when ``p == q``.

    The denominator equals the rejection probability ``1 - sum(min(p, q))``, so it is 0 exactly
    when nothing can be rejected; then there is no residual rather than a division by zero.

    >>> from fractions import Fraction as F
    >>> residual([F(2, 10), F(5, 10), F(3, 10)], [F(5, 10), F(3, 10), F(2, 10)])
    (Fraction(0, 1), Fraction(2, 3), Fraction(1, 3))
    """
    deficit = [max(Fraction(0), p - q) for p, q in zip(target_probs, draft_probs)]
    total = sum(deficit, Fraction(0))
    if total == 0:
        return None
    return tuple(d / total for d in deficit)


def _sample_draft(draft_probs: Probs) -> Probs:
    return draft_probs


def _greedy_draft(draft_probs: Probs) -> Probs:
    return _one_hot(_argmax(draft_probs), len(draft_probs))


def _ratio(target_probs: Probs, draft_probs: Probs, x: int) -> Fraction:
    # x was proposed, so q(x) > 0 for every rule that samples from q; a greedy draft may pick a
    # token with q(x) > 0 as well (the argmax), so the ratio is always defined.
    return min(Fraction(1), target_probs[x] / draft_probs[x])


def _canonical_recover(target_probs: Probs, draft_probs: Probs, x: int) -> Probs:
    res = residual(target_probs, draft_probs)
    assert res is not None, "a rejection happened although p == q"
    return res


def _full_target(target_probs: Probs, draft_probs: Probs, x: int) -> Probs:
    return target_probs


def _softmax_residual(target_probs: Probs, draft_probs: Probs, x: int) -> Probs:
    deficit = [max(Fraction(0), p - q) for p, q in zip(target_probs, draft_probs)]
    with decimal.localcontext() as ctx:
        ctx.prec = SOFTMAX_DIGITS
        weights = [Fraction((decimal.Decimal(d.numerator) / decimal.Decimal(d.denominator)).exp()) for d in deficit]
    total = sum(weights, Fraction(0))
    return tuple(w / total for w in weights)


def _accept_always(target_probs: Probs, draft_probs: Probs, x: int) -> Fraction:
    return Fraction(1)


def _residual_by_index(target_probs: Probs, draft_probs: Probs, x: int) -> Probs:
    """llama.cpp's residual (``examples/speculative/speculative.cpp`` at 0c1e570): both candidate arrays hold
    the tokens with a non-zero prob, sorted by id, and the draft prob at the same *array index* is
    subtracted: ``max(0, p(t_i) - q(d_i))`` with t_i / d_i the i-th target / draft candidate.  Without
    truncation (every prob > 0) index = id and this is the residual; once top-k / top-p keep different token
    sets, another token's draft prob is subtracted.  Deficits at or below ``BY_INDEX_TOLERANCE`` (1e-9) count as 0, as
    in the float64 hook and the kernel (two models' equal probs differ in the last bits there).  An all-zero result
    falls back to p."""
    drafts = [v for v in draft_probs if v > 0]
    deficit, i = [], 0
    for p in target_probs:
        if p > 0:
            d = p - (drafts[i] if i < len(drafts) else Fraction(0))
            deficit.append(d if d > BY_INDEX_TOLERANCE else Fraction(0))
            i += 1
        else:
            deficit.append(Fraction(0))
    total = sum(deficit, Fraction(0))
    return tuple(d / total for d in deficit) if total else tuple(target_probs)


def _residual_or_target(target_probs: Probs, draft_probs: Probs, x: int) -> Probs:
    """The residual, or p itself when ``p == q`` (a rule that rejects regardless of p and q can reject there)."""
    res = residual(target_probs, draft_probs)
    return tuple(target_probs) if res is None else res


def synthetic_acceptance(rates: Sequence = SYNTHETIC_RATES) -> Rule:
    """The declared-lossy "synthetic acceptance" rule with conditional acceptance ``rates`` per draft position.

    Benchmarking modes of serving engines accept each draft with a configured probability, whatever p and q are
    (vLLM ``speculative_config = {"rejection_sample_method": "synthetic", "synthetic_acceptance_rates": [...]}``:
    ``rejection_sampler.py`` accepts position i iff ``u < c_i``, the conditional rate ``c_i = a_i / a_(i-1)`` of
    its unconditional rates a; SGLang's acceptance thresholds likewise).  On rejection the recovered token is drawn
    from the residual (vLLM's recovered-token kernel; p where ``p == q``, where the residual is empty), the bonus
    token from the target at k + 1.  The emitted law is ``c q + (1 - c) residual`` at a position: biased unless
    ``c`` happens to be the canonical acceptance on every row.  A mode left on in production looks like this.

    Parameters
    ----------
    rates : sequence of numbers in [0, 1], default :data:`SYNTHETIC_RATES` (4/5, 3/5)
        ``rates[j - 1]`` = P(draft j accepted | drafts 1..j-1 accepted); positions beyond the sequence take its
        last entry.  Ints, Fractions, decimal strings and floats (converted exactly, ``Fraction(x)``).

    Returns
    -------
    Rule
        Named ``synthetic_acceptance``, declared ``lossy``, with ``position_acceptance = rates`` as Fractions.

    Raises
    ------
    InvalidArgumentError
        If ``rates`` is empty, not a sequence, or holds a value that is not a number in [0, 1] (NaN, a bool).

    Examples
    --------
    >>> from verifier.exact import step_law
    >>> [str(v) for v in step_law([0.2, 0.5, 0.3], [0.5, 0.3, 0.2], synthetic_acceptance([0.5])).output_law]
    ['1/4', '29/60', '4/15']
    """
    rates_t = _rates_iv(rates)
    return Rule("synthetic_acceptance", "lossy",
                "synthetic acceptance (a benchmarking mode left on): draft j accepted with a fixed probability "
                f"({', '.join(str(r) for r in rates_t)}, then the last) whatever p and q are; recovered token ~ residual",
                _sample_draft, lambda p, q, x: rates_t[0], _residual_or_target, position_acceptance=rates_t)


def _rates_iv(rates) -> tuple[Fraction, ...]:
    allowed = "a non-empty sequence of probabilities in [0, 1] (conditional acceptance per draft position)"
    if isinstance(rates, (str, bytes)) or not hasattr(rates, "__iter__"):
        raise invalid_argument("rates", rates, allowed, where="synthetic_acceptance")
    values = list(rates)
    out = []
    for r in values:
        try:
            if isinstance(r, bool):
                raise TypeError
            f = Fraction(r)
        except (TypeError, ValueError, OverflowError):
            raise invalid_argument("rates", values, allowed, where="synthetic_acceptance") from None
        if not 0 <= f <= 1:
            raise invalid_argument("rates", values, allowed, where="synthetic_acceptance")
        out.append(f)
    if not out:
        raise invalid_argument("rates", values, allowed, where="synthetic_acceptance")
    return tuple(out)


def _accept_iff_target_ge_draft(target_probs: Probs, draft_probs: Probs, x: int) -> Fraction:
    return Fraction(int(target_probs[x] >= draft_probs[x]))


def _accept_iff_target_argmax(target_probs: Probs, draft_probs: Probs, x: int) -> Fraction:
    return Fraction(int(x == _argmax(target_probs)))


def _exceeds_typical_threshold(target_probs: Probs, x: int, epsilon: Fraction, delta: Fraction) -> bool:
    """Exactly decide ``p(x) > min(epsilon, delta * exp(-H(p)))`` (Medusa's typical acceptance).

    ``exp(-H(p)) = prod_i p_i ** p_i`` (with ``0 ** 0 = 1``).  Writing ``p_i = n_i / D`` with
    integer ``n_i`` and ``D`` the common denominator, raising both (positive) sides to the power
    ``D`` gives the integer-power comparison ``(p(x) / delta) ** D > prod_i p_i ** n_i``.
    """
    px = target_probs[x]
    if px > epsilon:
        return True
    if px == 0:
        return False  # the right-hand side is > 0
    denom = math.lcm(*(p.denominator for p in target_probs))
    if denom > TYPICAL_MAX_EXACT_DENOMINATOR:
        return _exceeds_by_logarithms(target_probs, px, delta)
    lhs = (px / delta) ** denom
    rhs = Fraction(1)
    for p in target_probs:
        if p:
            rhs *= p ** int(p * denom)
    return lhs > rhs


def _exceeds_by_logarithms(target_probs: Probs, px: Fraction, delta: Fraction) -> bool:
    """``log(p(x) / delta) > sum_i p_i log p_i`` with 60-digit logarithms (huge denominators).

    Each side is within ~1e-55 of its true value, so a gap above 1e-50 decides the comparison
    rigorously; a smaller gap (a tie in all practical senses) is reported instead of guessed.
    """
    def ln(f: Fraction) -> decimal.Decimal:
        return (decimal.Decimal(f.numerator) / decimal.Decimal(f.denominator)).ln()

    with decimal.localcontext() as ctx:
        ctx.prec = 60
        gap = ln(px / delta) - sum((ln(p) * (decimal.Decimal(p.numerator) / decimal.Decimal(p.denominator)) for p in target_probs if p),
                                   decimal.Decimal(0))
    if abs(gap) <= decimal.Decimal("1e-50"):
        raise invalid_argument("target_probs", [str(p) for p in target_probs][:8],
                               "rows whose typical-acceptance threshold is not within 1e-50 of a token's probability "
                               f"(denominators above {TYPICAL_MAX_EXACT_DENOMINATOR} are compared with 60-digit logarithms)",
                               where="rule 'typical_acceptance'")
    return gap > 0


def _typical_acceptance(target_probs: Probs, draft_probs: Probs, x: int) -> Fraction:
    return Fraction(int(_exceeds_typical_threshold(target_probs, x, TYPICAL_EPSILON, TYPICAL_DELTA)))


def _fresh_target_sample(target_probs: Probs, draft_probs: Probs, x: int) -> Fraction:
    # a fresh y ~ p equals x with probability p(x)
    return target_probs[x]


def _fresh_sample_given_mismatch(target_probs: Probs, draft_probs: Probs, x: int) -> Probs:
    # rejected means the fresh sample y ~ p differed from x: emit y, i.e. p conditioned on y != x
    rest = 1 - target_probs[x]
    return tuple(Fraction(0) if y == x else p / rest for y, p in enumerate(target_probs))


# -- the registry ------------------------------------------------------------------------------


def _rule(name, declared, description, *, propose=_sample_draft, acceptance=_ratio, recover=_canonical_recover, **round_switches):
    return Rule(name, declared, description, propose, acceptance, recover, **round_switches)


RULES: dict[str, Rule] = {
    r.name: r
    for r in [
        _rule("canonical", "exact", "draft x ~ q, accept with min(1, p(x)/q(x)), recovered token ~ residual, bonus ~ p at k+1"),
        _rule("fresh_target_match", "exact", "accept iff x equals a fresh target sample y ~ p; on mismatch emit y (correct but unusual)",
              acceptance=_fresh_target_sample, recover=_fresh_sample_given_mismatch),
        _rule("block_verification", "exact", "Sun et al. 2024 block verification: the draft block is verified jointly "
              "(keep the last position whose coin accepts a running weight); accepts at least as much as token-wise",
              round_outcomes=block_round_outcomes),
        _rule("full_p_fallback", "biased", "recovered token resampled from the full target p instead of the residual",
              recover=_full_target),
        _rule("greedy_draft", "biased", "draft token is argmax q while the acceptance ratio uses the softmax q",
              propose=_greedy_draft),
        _rule("softmax_residual", "biased", "residual put through a softmax instead of divided by its sum",
              recover=_softmax_residual),
        _rule("deterministic_acceptance", "biased", "accept iff p(x) >= q(x) (no uniform), recovered token ~ residual",
              acceptance=_accept_iff_target_ge_draft),
        _rule("greedy_acceptance", "biased", "accept iff x == argmax p although T > 0, else sample p",
              acceptance=_accept_iff_target_argmax, recover=_full_target),
        _rule("bonus_wrong_position", "biased", "bonus token drawn from the target at position k instead of k+1",
              bonus_offset=-1),
        _rule("draft_suffix_kept", "biased", "after the recovered token the unverified draft tokens after the rejected position are emitted too",
              keep_suffix=True),
        _rule("shared_uniform", "biased", "one uniform reused for the acceptance test of every position of a round",
              shared_uniform=True),
        _rule("typical_acceptance", "lossy", "Medusa typical acceptance: accept iff p(x) > min(0.09, 0.3*exp(-H(p))), else sample p",
              acceptance=_typical_acceptance, recover=_full_target),
        _rule("accept_all", "biased", "every draft token is accepted (no acceptance test: a uniform stuck at 0, a "
              "skipped check); the bonus token ~ p at k+1", acceptance=_accept_always, recover=_full_target),
        _rule("residual_by_index", "biased", "the residual subtracts the draft prob at the same index of the id-sorted "
              "candidate arrays (another token's, once top-k/top-p keep different token sets; llama.cpp)",
              recover=_residual_by_index),
        synthetic_acceptance(),
    ]
}


def get_rule(rule: str | Rule) -> Rule:
    """Return the :class:`Rule` for a registry name (or the rule itself).

    Raises
    ------
    InvalidArgumentError
        If ``rule`` is neither a :class:`Rule` nor a name in :data:`RULES`; the message lists the names.
    """
    if isinstance(rule, Rule):
        return rule
    if isinstance(rule, str) and rule in RULES:
        return RULES[rule]
    raise invalid_argument("rule", rule, "one of " + ", ".join(RULES))
