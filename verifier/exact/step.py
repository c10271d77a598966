"""The single-step law of a verification rule: one draft token, one verification, exactly.

Glossary: see :mod:`verifier.protocols`.  All values are :class:`fractions.Fraction`.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

from verifier.errors import InvalidArgumentError, invalid_argument
from verifier.exact.rules import Rule, get_rule
from verifier.exact.tabular import as_fraction_probs

__all__ = ["StepLaw", "step_law"]


@dataclass(frozen=True)
class StepLaw:
    """Exact law of one verification step.

    Attributes
    ----------
    rule : str
        Name of the rule.
    target_probs, draft_probs : tuple of Fraction, shape (vocab,)
        The inputs, as fractions.
    acceptance_probs : tuple of Fraction, shape (vocab,)
        Probability that draft token x is accepted once proposed (canonical ``min(1, p(x)/q(x))``;
        0 for a token the rule never proposes).
    accepted_mass : tuple of Fraction, shape (vocab,)
        Probability that x is proposed *and* accepted (canonical ``min(p(x), q(x))``).
    rejection_prob : Fraction
        ``1 - sum(accepted_mass)``.
    residual : tuple of Fraction, shape (vocab,), or None
        Law of the recovered token given a rejection (canonical: ``max(0, p-q) / sum(...)``);
        ``None`` when ``rejection_prob == 0`` -- there is nothing to recover, never a division by 0.
    output_law : tuple of Fraction, shape (vocab,)
        ``accepted_mass + rejection_prob * residual``; equals ``target_probs`` for an exact rule.
    """

    rule: str
    target_probs: tuple[Fraction, ...]
    draft_probs: tuple[Fraction, ...]
    acceptance_probs: tuple[Fraction, ...]
    accepted_mass: tuple[Fraction, ...]
    rejection_prob: Fraction
    residual: tuple[Fraction, ...] | None
    output_law: tuple[Fraction, ...]

    @property
    def acceptance_prob(self) -> Fraction:
        """Probability that the proposed draft token is accepted (``sum(accepted_mass)``)."""
        return 1 - self.rejection_prob

    @property
    def is_exact(self) -> bool:
        """True iff the output law equals the target probs."""
        return self.output_law == self.target_probs


def step_law(target_probs: Sequence, draft_probs: Sequence, rule: str | Rule = "canonical") -> StepLaw:
    """Exact law of one speculative-sampling step under a verification rule.

    Parameters
    ----------
    target_probs : sequence of Fraction/int/str/float, shape (vocab,)
        Processed target probs p at the position.  Floats are read through their decimal string
        (``0.1 -> 1/10``).
    draft_probs : sequence, shape (vocab,)
        Processed draft probs q the draft token is proposed from.
    rule : str or Rule, default "canonical"
        A name in :data:`~verifier.exact.rules.RULES` or a :class:`~verifier.exact.rules.Rule`.

    Returns
    -------
    StepLaw
        Acceptance probabilities, accepted mass, rejection probability, residual (or None) and the
        output law, all exact.

    Raises
    ------
    InvalidArgumentError
        Unknown rule; a vector that is empty, has a negative or non-numeric entry, or does not sum
        to exactly 1; vectors of different lengths.  The message names the argument, the value and
        the rule.

    Notes
    -----
    Round-level switches of a rule (bonus position, suffix kept, shared uniform) do not act in a
    single step; use :func:`verifier.exact.round_law` to see them.

    References
    ----------
    Leviathan et al. (2023), Algorithm 1 and Appendix A.1 (the output law equals p).

    Examples
    --------
    >>> law = step_law([0.2, 0.5, 0.3], [0.5, 0.3, 0.2])
    >>> [str(v) for v in law.accepted_mass], str(law.rejection_prob), [str(v) for v in law.residual]
    (['1/5', '3/10', '1/5'], '3/10', ['0', '2/3', '1/3'])
    >>> [str(v) for v in step_law([0.2, 0.5, 0.3], [0.5, 0.3, 0.2], "full_p_fallback").output_law]
    ['13/50', '9/20', '29/100']
    """
    rule_obj, p, q = _step_law_iv(target_probs, draft_probs, rule)
    return _step_law(p, q, rule_obj)


def _step_law_iv(target_probs, draft_probs, rule) -> tuple[Rule, tuple[Fraction, ...], tuple[Fraction, ...]]:
    rule_obj = get_rule(rule)
    where = f"step_law(rule={rule_obj.name!r})"
    p = probs_iv(target_probs, "target_probs", where)
    q = probs_iv(draft_probs, "draft_probs", where)
    if len(p) != len(q):
        raise invalid_argument("len(draft_probs)", len(q), f"len(target_probs)={len(p)}", where=where)
    return rule_obj, p, q


def probs_iv(values, name: str, where: str) -> tuple[Fraction, ...]:
    """:func:`as_fraction_probs` with the calling function and rule in the error message."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise invalid_argument(name, values, "a sequence of probabilities", where=where)
    try:
        return as_fraction_probs(list(values), name=name)
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(f"{where}: {exc}") from None


def _step_law(p: tuple[Fraction, ...], q: tuple[Fraction, ...], rule: Rule) -> StepLaw:
    vocab = range(len(p))
    proposal = rule.propose(q)
    acceptance = tuple(rule.acceptance(p, q, x) if proposal[x] else Fraction(0) for x in vocab)
    accepted_mass = tuple(proposal[x] * acceptance[x] for x in vocab)
    rejection_prob = 1 - sum(accepted_mass)
    recovered: tuple[Fraction, ...] | None = None
    if rejection_prob:
        # mixture over the proposed token of the recovered-token law (independent of x for the canonical rule)
        mix = [Fraction(0)] * len(p)
        for x in vocab:
            weight = proposal[x] * (1 - acceptance[x])
            if weight:
                for y, r in enumerate(rule.recover(p, q, x)):
                    mix[y] += weight * r
        recovered = tuple(m / rejection_prob for m in mix)
    output = tuple(accepted_mass[y] + (rejection_prob * recovered[y] if recovered else 0) for y in vocab)
    assert sum(output) == 1, "a step law must be a distribution"
    return StepLaw(rule.name, p, q, acceptance, accepted_mass, rejection_prob, recovered, output)
