"""Exact laws of two independent defects in one rule (issue 26): the exact twin of the diagnosis's composites.

A composite ``"A+B"`` of :mod:`verifier.diagnose.family` applies two rules that change different parts of the
verification rule -- the draft side (``propose``), the acceptance test (``acceptance`` / ``position_acceptance``), the
recovered-token law (``recover`` / ``recover_after``), the round switches (``bonus_offset``, ``shared_uniform``) --
as one rule.  :func:`composite_rule` builds it from the two :class:`~verifier.exact.rules.Rule` values hook by hook,
so :func:`verifier.exact.n_token_law` enumerates its law with the same code as every other rule.
``target_processed_first_only`` changes which target rows a round reads, not a hook: its composite is
:func:`verifier.exact.field_rules.target_processed_first_only` of the unprocessed table with the other part as the
rule it runs (``inner``).

Glossary: see :mod:`verifier.protocols` (target/draft, accepted, rejected position, residual, recovered token, bonus
token, round).
"""

from __future__ import annotations

import dataclasses

from verifier.errors import invalid_argument
from verifier.exact.rules import Rule, _residual_or_target, get_rule
from verifier.exact.tabular import TabularLM

__all__ = ["composite_rule", "HOOKS"]

# the parts of a rule a composite takes from whichever of its two rules changes them (at most one may)
HOOKS = ("propose", "acceptance", "recover", "bonus_offset", "keep_suffix", "shared_uniform", "position_acceptance",
         "recover_after")
PROCESSED_FIRST_ONLY = "target_processed_first_only"  # a rows statement, not a hook: built around the other part


def composite_rule(first: str | Rule, second: str | Rule, target_raw: TabularLM | None = None) -> Rule:
    """The rule with the changes of ``first`` and ``second`` both applied, named ``"first+second"``.

    Parameters
    ----------
    first, second : str or Rule
        Rules of :data:`verifier.exact.RULES` (or values), or ``"target_processed_first_only"`` for one of them.
    target_raw : TabularLM or None, default None
        The unprocessed target table; required when a part is ``target_processed_first_only`` (whose later
        positions read it), ignored otherwise.

    Returns
    -------
    Rule
        Declared ``biased`` (``lossy`` when both parts are lossy); per-position hooks and round switches taken from
        the part that changes each from the canonical rule.

    Raises
    ------
    InvalidArgumentError
        An unknown rule; both parts change the same hook; a part is exact or enumerates whole rounds itself (block
        verification); ``target_processed_first_only`` without ``target_raw``.

    Examples
    --------
    >>> from verifier.exact import n_token_law, standard_tabular_pairs
    >>> pair = standard_tabular_pairs()["trigram3"]
    >>> rule = composite_rule("greedy_draft", "recovered_one_late")
    >>> law = n_token_law(pair.target, pair.draft, pair.prefix, 2, 3, rule)
    >>> sum(law.values()) == 1 and law != n_token_law(pair.target, pair.draft, pair.prefix, 2, 3, "greedy_draft")
    True
    """
    names = [_name(r) for r in (first, second)]
    if PROCESSED_FIRST_ONLY in names:
        from verifier.exact.field_rules import target_processed_first_only

        other = names[1 - names.index(PROCESSED_FIRST_ONLY)]
        if other == PROCESSED_FIRST_ONLY:
            raise invalid_argument("second", other, "another rule than the first part", where="composite_rule")
        if target_raw is None:
            raise invalid_argument("target_raw", None, f"the unprocessed target table ({PROCESSED_FIRST_ONLY} reads it)",
                                   where="composite_rule")
        inner = _part(first if names[0] == other else second, "first" if names[0] == other else "second")
        rule = target_processed_first_only(target_raw, inner=inner)
        return dataclasses.replace(rule, name="+".join(names), description=f"{inner.description}; and {rule.description}")
    a, b = _part(first, "first"), _part(second, "second")
    canonical = get_rule("canonical")
    kw = {}
    for hook in HOOKS:
        changed = [r for r in (a, b) if not _unchanged(hook, getattr(r, hook), canonical)]
        if len(changed) == 2:
            raise invalid_argument("second", b.name, f"a rule that changes another part than {a.name!r} ({hook})",
                                   where="composite_rule")
        if changed:
            kw[hook] = getattr(changed[0], hook)
        elif hook == "recover" and _residual_or_target in (a.recover, b.recover):
            kw[hook] = _residual_or_target  # the residual, and p where it is empty (a rule that rejects when p == q)
    declared = "lossy" if a.declared == b.declared == "lossy" else "biased"
    return dataclasses.replace(canonical, name=f"{a.name}+{b.name}", declared=declared,
                               description=f"{a.description}; and {b.description}", **kw)


def _unchanged(hook: str, value, canonical: Rule) -> bool:
    """``value`` is the canonical rule's ``hook`` (the residual-or-target recovery counts: the same law wherever the
    canonical residual is defined)."""
    return value == getattr(canonical, hook) or hook == "recover" and value is _residual_or_target


def _name(rule: str | Rule) -> str:
    return rule.name if isinstance(rule, Rule) else rule


def _part(rule: str | Rule, argument: str) -> Rule:
    r = get_rule(rule)
    if r.declared == "exact" or r.round_outcomes is not None:
        raise invalid_argument(argument, r.name, "a biased or lossy per-position rule (an exact rule changes nothing; a "
                               "round-level one has no hooks to combine)", where="composite_rule")
    return r
