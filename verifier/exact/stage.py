"""The exact stage of a suite: every rule on every case, exactly, with the samples a test needs.

Used by the runner (first stage of a suite: a rule that is wrong is wrong, no sampling needed) and
by ``specverify exact``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Iterable, Sequence

from verifier.errors import InvalidArgumentError, invalid_argument
from verifier.exact.cases import ExactCase, standard_cases
from verifier.exact.laws import _n_token_law, target_law, total_variation
from verifier.exact.rules import RULES, Rule, get_rule

__all__ = ["ExactFinding", "RuleVerdict", "run_exact_stage", "rule_verdicts", "SAMPLES_ALPHA", "SAMPLES_POWER"]

SAMPLES_ALPHA = 0.01  # the chi-square GOF test whose sample size is reported ...
SAMPLES_POWER = 0.99  # ... detects the rule's law with this probability


@dataclass(frozen=True)
class ExactFinding:
    """The exact result of one rule on one case.

    Attributes
    ----------
    rule, case : str
        Names.
    declared : {"exact", "biased", "lossy"}
        The rule's declared status.
    verdict : {"exact", "biased"}
        ``exact`` iff the rule's law of the first ``num_tokens`` emitted tokens equals the target's.
    matches_declared : bool
        Rule-level: over all cases of the run, the rule is exact on every case if declared
        ``exact``, and biased on at least one case otherwise (a round-level mutant need not show on
        a single-step case).
    tv : Fraction
        Exact total-variation distance between the two laws.
    output_law, target_law : dict[tuple[int, ...], Fraction]
        Laws of the first ``num_tokens`` emitted tokens (-1 after EOS).
    samples_needed : int or None
        Samples a Pearson chi-square GOF test at alpha 0.01 needs to detect ``output_law`` against
        ``target_law`` with power 0.99 (categories = the outcomes of both laws), from
        :func:`verifier.stats.power.samples_needed`; ``None`` when the verdict is exact or the
        figure is not available (see ``samples_note``).
    samples_note : str
        Why ``samples_needed`` is None, else "".
    num_draft_tokens, num_tokens : int
        k and N of the case.
    """

    rule: str
    case: str
    declared: str
    verdict: str
    matches_declared: bool
    tv: Fraction
    output_law: dict = field(repr=False)
    target_law: dict = field(repr=False)
    samples_needed: int | None
    samples_note: str
    num_draft_tokens: int
    num_tokens: int

    def to_json(self) -> dict:
        """JSON-ready dict: fractions as strings ``"a/b"``, outcomes as lists, plus ``tv_float``."""
        def law(d):
            return [{"tokens": list(k), "prob": str(v)} for k, v in sorted(d.items())]

        return {
            "rule": self.rule, "case": self.case, "declared": self.declared, "verdict": self.verdict,
            "matches_declared": self.matches_declared, "tv": str(self.tv), "tv_float": float(self.tv),
            "samples_needed": self.samples_needed, "samples_note": self.samples_note,
            "num_draft_tokens": self.num_draft_tokens, "num_tokens": self.num_tokens,
            "output_law": law(self.output_law), "target_law": law(self.target_law),
        }


@dataclass(frozen=True)
class RuleVerdict:
    """Rule-level summary of a run: verdict over all cases, worst TV, fewest samples to detect."""

    rule: str
    declared: str
    verdict: str
    matches_declared: bool
    max_tv: Fraction
    worst_case: str | None
    min_samples_needed: int | None


def run_exact_stage(rules: Iterable[str | Rule] | None = None, cases: Sequence[ExactCase] | None = None) -> list[ExactFinding]:
    """Run every rule on every case exactly.

    Parameters
    ----------
    rules : iterable of str or Rule, optional
        Default: every rule in :data:`~verifier.exact.rules.RULES`, in registry order.
    cases : sequence of ExactCase, optional
        Default: :func:`~verifier.exact.cases.standard_cases`.

    Returns
    -------
    list[ExactFinding]
        One per (rule, case), rules outer.

    Raises
    ------
    InvalidArgumentError
        An unknown rule name (the message lists the allowed names), an empty rule or case list,
        or a case that is not an :class:`ExactCase`.

    Notes
    -----
    Per finding the cost is one N-token enumeration (``vocab ** (N + k)`` paths) plus one
    ``samples_needed`` search; the default run takes about a second.

    Examples
    --------
    >>> [f.verdict for f in run_exact_stage(["canonical", "full_p_fallback"], standard_cases()[1:2])]
    ['exact', 'biased']
    """
    rule_objs, case_list = _run_exact_stage_iv(rules, cases)
    targets = {id(c): target_law(c.target, c.prefix, c.num_tokens) for c in case_list}
    raw = []
    for rule in rule_objs:
        for case in case_list:
            law = _n_token_law(case.target, case.draft, case.prefix, case.num_draft_tokens, case.num_tokens, rule)
            raw.append((rule, case, law, targets[id(case)]))
    biased_somewhere = {rule.name for rule, _, law, tl in raw if law != tl}
    findings = []
    for rule, case, law, tl in raw:
        rule_biased = rule.name in biased_somewhere
        matches = rule_biased != (rule.declared == "exact")
        verdict = "exact" if law == tl else "biased"
        n, note = _samples_needed(tl, law) if verdict == "biased" else (None, "exact: nothing to detect")
        findings.append(ExactFinding(rule.name, case.name, rule.declared, verdict, matches, total_variation(law, tl),
                                     law, tl, n, note, case.num_draft_tokens, case.num_tokens))
    return findings


def rule_verdicts(findings: Iterable[ExactFinding]) -> dict[str, RuleVerdict]:
    """Summarise findings per rule (registry order of first appearance)."""
    grouped: dict[str, list[ExactFinding]] = {}
    for f in findings:
        grouped.setdefault(f.rule, []).append(f)
    out = {}
    for name, fs in grouped.items():
        worst = max(fs, key=lambda f: f.tv)
        ns = [f.samples_needed for f in fs if f.samples_needed is not None]
        biased = any(f.verdict == "biased" for f in fs)
        out[name] = RuleVerdict(name, fs[0].declared, "biased" if biased else "exact", fs[0].matches_declared,
                                worst.tv, worst.case if worst.tv else None, min(ns) if ns else None)
    return out


def _samples_needed(null_law: dict, alt_law: dict) -> tuple[int | None, str]:
    try:
        from verifier.stats.power import samples_needed
    except ImportError:  # the statistics package is optional for the exact stage
        return None, "verifier.stats.power not available"
    outcomes = sorted(set(null_law) | set(alt_law))
    null = [float(null_law.get(o, 0)) for o in outcomes]
    alt = [float(alt_law.get(o, 0)) for o in outcomes]
    try:
        return samples_needed(null, alt, alpha=SAMPLES_ALPHA, power=SAMPLES_POWER), ""
    except InvalidArgumentError as exc:  # e.g. more than the statistics module's sample cap
        return None, str(exc)


def _run_exact_stage_iv(rules, cases) -> tuple[list[Rule], list[ExactCase]]:
    rule_objs = [get_rule(r) for r in (RULES if rules is None else rules)]
    if not rule_objs:
        raise invalid_argument("rules", rules, "None or a non-empty list of rule names", where="run_exact_stage")
    case_list = standard_cases() if cases is None else list(cases)
    if not case_list:
        raise invalid_argument("cases", cases, "None or a non-empty list of ExactCase", where="run_exact_stage")
    for c in case_list:
        if not isinstance(c, ExactCase):
            raise invalid_argument("cases", type(c).__name__, "ExactCase items", where="run_exact_stage")
    return rule_objs, case_list
