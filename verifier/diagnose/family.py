"""The hypotheses a diagnosis ranks: every known mechanism, pairs of independent defects, and the engine round layout.

Real engines differ from the zoo in two ways the diagnosis must model (issue 26):

* **Defects come in pairs.**  llama.cpp drafts the draft's most probable token *and* subtracts the residual by
  array index.  A *composite* applies two mechanisms that change different parts of the rule -- the draft side
  (``propose``), the acceptance test (``acceptance``), the recovered-token law (``recover``), the round switches
  (``bonus_offset``, ``shared_uniform``) and the processed-probs view (``needs_raw`` / ``target``, or the raw rows
  after a round's first position: ``later_raw``) -- as one chain rule; two mechanisms that change the same part do
  not compose (neither would be what the code does).  Its name is ``"A+B"``.  The field mechanisms (issue 26) enter
  pairs too: ``recovered_one_late`` changes the recovered law (``late_recover``), ``draft_accept_same_uniform`` the
  acceptance test, ``target_processed_first_only`` which target rows a round's later positions read (``later_raw``),
  so the last composes with any acceptance / recovered-law defect (the defect's hooks applied to the raw rows);
  :func:`composite_names` lists the pairs kept out and why.
* **The first token comes from the prefill.**  vLLM, llama.cpp's ``llama-speculative`` and most servers sample
  the first emitted token from the target's prefill forward pass and start drafting after it, so a defect shows
  from token 2 on.  The ``@prefill`` variant of a hypothesis emits ``lead = 1`` plain target sample before its
  first round (:func:`verifier.diagnose.likelihood.log_likelihood`).

The family is fixed before the data are seen (every non-exact mechanism, every compatible pair, each with and
without ``@prefill``; latent mechanisms alone, round layout as given), so the ranking's Ville/Bonferroni
threshold ``log(M / alpha)`` counts all M of them.  :func:`hypothesis` resolves any family name to its
:class:`~verifier.diagnose.mechanisms.Mechanism`.

Glossary: see :mod:`verifier.protocols`.
"""

from __future__ import annotations

import dataclasses
import itertools
from functools import lru_cache

from verifier.diagnose.mechanisms import MECHANISMS, Mechanism
from verifier.errors import invalid_argument

__all__ = ["PREFILL", "COMPOSE_FIELDS", "NOT_WELL_DEFINED", "parts_of", "compose", "with_lead", "hypothesis", "family_names",
           "composite_names", "family_size"]

PREFILL = "@prefill"  # suffix of a hypothesis whose first emitted token is a plain target sample (the prefill step)
COMPOSE_FIELDS = ("propose", "acceptance", "recover", "reject_emit", "bonus_offset", "shared_uniform", "view", "later_raw")
SEPARATOR = "+"
_CANONICAL = MECHANISMS["canonical"]


def _changed(m: Mechanism) -> dict[str, object]:
    """The parts of the rule ``m`` changes, relative to the canonical rule (``view``: raw probs / target row)."""
    out = {}
    for f in ("propose", "acceptance", "recover", "reject_emit", "bonus_offset", "shared_uniform"):
        if getattr(m, f) is not getattr(_CANONICAL, f) and getattr(m, f) != getattr(_CANONICAL, f):
            out[f] = getattr(m, f)
    if m.later_raw:  # the raw target at a round's later positions: the hooks stay, the rows they read change
        out["later_raw"] = True
    elif m.needs_raw or m.target != "p":
        out["view"] = (m.needs_raw, m.target)
    if m.position_acceptance is not None:  # a fixed rate per round position (synthetic_acceptance)
        out["position_acceptance"] = m.position_acceptance
    return out


def _composable(m: Mechanism) -> bool:
    return m.declared != "exact" and not m.latent and not m.keep_suffix and not m.same_as_target and m.composable


@lru_cache(maxsize=1)
def composite_names() -> tuple[str, ...]:
    """Every pair ``"A+B"`` of composable mechanisms (registry order) that change disjoint parts of the rule.

    A part one changes that the other's change makes irrelevant is a conflict too: a rule that never rejects
    (``accept_all``) or draws every recovered token from p has no residual for a recover-side defect to change.

    Pairs of the field mechanisms kept out (:data:`NOT_WELL_DEFINED`): ``draft_accept_same_uniform`` with
    ``greedy_draft`` (an argmax draft draws no uniform for the test to reuse) or with ``shared_uniform`` (both say
    which uniform the acceptance test reads); ``target_processed_first_only`` with ``recovered_one_late`` (its late
    rows would be the *raw* target's after the latent token: the teacher-forced oracles give the processed ones) and
    with another view (``draft_raw_q``, ``target_unprocessed``, ``draft_processors_differ``: two statements of which
    rows the rule reads, whose order no engine fixes); ``q_dtype_mismatch`` enters no pair (``composable = False``).
    """
    names = [n for n, m in MECHANISMS.items() if _composable(m)]
    out = []
    for a, b in itertools.combinations(names, 2):
        ca, cb = set(_changed(MECHANISMS[a])), set(_changed(MECHANISMS[b]))
        if not (ca & cb or _overrides(ca, cb) or _overrides(cb, ca) or frozenset((a, b)) in NOT_WELL_DEFINED):
            out.append(f"{a}{SEPARATOR}{b}")
    return tuple(out)


# pairs of parts that touch different hooks but whose composition is not well defined (composite_names says why)
NOT_WELL_DEFINED = frozenset(frozenset(pair) for pair in [
    ("draft_accept_same_uniform", "greedy_draft"), ("draft_accept_same_uniform", "shared_uniform"),
    ("target_processed_first_only", "recovered_one_late"), ("target_processed_first_only", "draft_raw_q"),
    ("target_processed_first_only", "target_unprocessed"), ("target_processed_first_only", "draft_processors_differ")])


def _overrides(ca: set[str], cb: set[str]) -> bool:
    """A's change makes a part B changes irrelevant: another processed view replaces B's acceptance / recovered law,
    and a shared uniform only couples acceptances whose rejection follows the residual rule (not one that replaces
    both the acceptance and the recovered law, nor fixed per-position rates, which need a fresh uniform each)."""
    return ("view" in ca and bool({"acceptance", "recover"} & cb) or {"acceptance", "recover"} <= ca and "shared_uniform" in cb
            or "position_acceptance" in ca and "shared_uniform" in cb)


def compose(a: Mechanism, b: Mechanism) -> Mechanism:
    """The chain rule with ``a``'s and ``b``'s changes both applied (they change disjoint parts).

    Raises
    ------
    InvalidArgumentError
        If the two change the same part of the rule, or either is exact, latent or keeps a draft suffix.
    """
    name = f"{a.name}{SEPARATOR}{b.name}"
    if name not in composite_names():
        raise invalid_argument("mechanisms", name, f"a pair of {', '.join(composite_names())}")
    kw: dict[str, object] = {}
    for m in (a, b):
        for f, v in _changed(m).items():
            if f == "view":
                kw["needs_raw"], kw["target"] = v
            elif f == "later_raw":
                kw["needs_raw"], kw["target"], kw["later_raw"] = True, m.target, True
            else:
                kw[f] = v
        if m.late_recover:  # recovered_one_late: the recover hook (p) is the k = 1 rule; the round reads the next rows
            kw["late_recover"] = True
    declared = "lossy" if "lossy" in (a.declared, b.declared) and "biased" not in (a.declared, b.declared) else "biased"
    return dataclasses.replace(_CANONICAL, name=name, declared=declared,
                               description=f"{a.description}; and {b.description}", aliases=(), **kw)


def with_lead(m: Mechanism, lead: int = 1) -> Mechanism:
    """``m`` after ``lead`` plain target samples (the prefill step): its first round starts at token ``lead + 1``."""
    if m.latent:
        raise invalid_argument("mechanism", m.name, "a mechanism that is not latent (a latent law has its own layout)")
    return dataclasses.replace(m, name=m.name + PREFILL, lead=lead, aliases=(),
                               description=f"{m.description} (the first token is a plain target sample: the prefill)")


def parts_of(name: str) -> tuple[tuple[str, ...], bool]:
    """``("greedy_draft", "residual_by_index"), True`` for ``"greedy_draft+residual_by_index@prefill"``."""
    prefill = name.endswith(PREFILL)
    core = name[: -len(PREFILL)] if prefill else name
    return tuple(core.split(SEPARATOR)), prefill


def hypothesis(name: str) -> Mechanism:
    """The :class:`Mechanism` of a family name (a mechanism, a composite ``A+B``, either with ``@prefill``).

    Raises
    ------
    InvalidArgumentError
        If ``name`` is not in the family (not a string; a pair of mechanisms that :func:`composite_names` leaves out
        is named as such).
    """
    if not isinstance(name, str):
        raise invalid_argument("mechanism", name, "a mechanism name (a string), a composite A+B of two, either with @prefill")
    return _hypothesis(name)


@lru_cache(maxsize=None)
def _hypothesis(name: str) -> Mechanism:
    if name in MECHANISMS:
        return MECHANISMS[name]
    parts, prefill = parts_of(name)
    core = SEPARATOR.join(parts)
    if len(parts) == 1 and core in MECHANISMS:
        m = MECHANISMS[core]
    elif len(parts) == 2 and (core in composite_names() or SEPARATOR.join(parts[::-1]) in composite_names()):
        a, b = parts if core in composite_names() else parts[::-1]  # the registry order names it
        m = compose(MECHANISMS[a], MECHANISMS[b])
    elif len(parts) == 2 and all(part in MECHANISMS for part in parts) and parts[0] != parts[1]:
        raise invalid_argument("mechanism", name, "a composite A+B of composite_names(): these two mechanisms make no "
                               "composite (an exact, latent or non-composable part, two changes of one part of the rule, "
                               "or a pair whose composition is not well defined)")
    else:
        raise invalid_argument("mechanism", name, "a mechanism, a composite A+B of two, either with @prefill")
    if prefill:
        if not _prefillable(m):
            raise invalid_argument("mechanism", name, "@prefill only on a non-latent, non-exact hypothesis")
        return with_lead(m)
    return m


def _prefillable(m: Mechanism) -> bool:
    """A hypothesis with an ``@prefill`` variant: its law depends on where the rounds start (not exact, not latent)."""
    return not m.latent and m.declared != "exact"


@lru_cache(maxsize=1)
def family_names() -> tuple[str, ...]:
    """Every hypothesis the diagnosis ranks, exact mechanisms first (the null: never named), in a fixed order."""
    singles = list(MECHANISMS)
    pairs = list(composite_names())
    prefill = [n + PREFILL for n in singles + pairs if _prefillable(hypothesis(n))]
    return tuple(singles + pairs + prefill)


def family_size(exact: bool = False) -> int:
    """M of the threshold: the hypotheses that can be named (``exact=True`` counts the exact ones too)."""
    return sum(1 for n in family_names() if exact or hypothesis(n).declared != "exact")
