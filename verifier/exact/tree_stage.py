"""The tree exact stage: every tree rule on every tree case, exactly, with the samples a test needs.

Used by ``specverify exact --tree`` and, behind the suite key ``[exact] trees = true``, by the
runner's exact stage.  Findings reuse :class:`~verifier.exact.stage.ExactFinding` (plus the tree) so
:func:`~verifier.exact.stage.rule_verdicts` and the reports summarise them unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence

from verifier.errors import invalid_argument
from verifier.exact.cases import standard_tabular_pairs
from verifier.exact.laws import target_law, total_variation
from verifier.exact.stage import ExactFinding, _samples_needed
from verifier.exact.tabular import TabularLM
from verifier.exact.tree_laws import _tree_n_token_law
from verifier.exact.tree_rules import TREE_RULES, TreeRule, get_tree_rule
from verifier.exact.tree_shape import TreeShape, num_draft_nodes, parse_tree, tree_label

__all__ = ["TreeCase", "TreeFinding", "standard_tree_cases", "run_tree_exact_stage"]

TREE_NUM_TOKENS = 3  # compare the first 3 emitted tokens: one depth-2 round including its last token


@dataclass(frozen=True)
class TreeCase:
    """One tree case: a model pair, a prompt, a static tree and how many emitted tokens to compare.

    Attributes
    ----------
    name : str
    target, draft : TabularLM
    prefix : tuple of int
    tree : nested tuple
        The shape every round drafts (:mod:`verifier.exact.tree_shape`).
    num_tokens : int
        N: the laws compared are those of the first N emitted tokens.
    description : str
    """

    name: str
    target: TabularLM
    draft: TabularLM
    prefix: tuple[int, ...]
    tree: TreeShape
    num_tokens: int
    description: str = field(default="", compare=False)


@dataclass(frozen=True)
class TreeFinding(ExactFinding):
    """An :class:`~verifier.exact.stage.ExactFinding` of a tree rule; ``num_draft_tokens`` counts the tree's draft nodes."""

    tree: str = ""

    def to_json(self) -> dict:
        out = super().to_json()
        out["tree"] = self.tree
        return out


def standard_tree_cases() -> list[TreeCase]:
    """The default cases of :func:`run_tree_exact_stage`.

    ``unigram3/3``: width 3, depth 1 on the context-free pair (every sibling-level mutant shows);
    ``bigram4_eos/1;1``: the chain k = 2 as a tree (with EOS); ``bigram4_eos/2;2,2`` and
    ``trigram3/2;2,2``: width 2, depth 2 on context-dependent pairs (bonus-node and
    child-of-rejected mutants need a target that depends on the path).  N = 3 throughout.

    Returns
    -------
    list[TreeCase]
    """
    pairs = standard_tabular_pairs()
    spec = [("unigram3", "3"), ("bigram4_eos", "1;1"), ("bigram4_eos", "2;2,2"), ("trigram3", "2;2,2")]
    return [TreeCase(f"{pair}/{tree}", pairs[pair].target, pairs[pair].draft, pairs[pair].prefix, parse_tree(tree), TREE_NUM_TOKENS,
                     f"{pairs[pair].description}; tree {tree}") for pair, tree in spec]


def run_tree_exact_stage(rules: Iterable[str | TreeRule] | None = None, cases: Sequence[TreeCase] | None = None) -> list[TreeFinding]:
    """Run every tree rule on every tree case exactly.

    Parameters
    ----------
    rules : iterable of str or TreeRule, optional
        Default: every rule in :data:`~verifier.exact.tree_rules.TREE_RULES`, in registry order.
    cases : sequence of TreeCase, optional
        Default: :func:`standard_tree_cases`.

    Returns
    -------
    list[TreeFinding]
        One per (rule, case), rules outer; ``matches_declared`` is rule-level (exact on every case
        if declared exact, biased on at least one otherwise).

    Raises
    ------
    InvalidArgumentError
        Unknown rule name (the message lists the names), an empty list, or a case that is not a TreeCase.

    Examples
    --------
    >>> [f.verdict for f in run_tree_exact_stage(["iid_multi_draft", "residual_not_updated"], standard_tree_cases()[:1])]
    ['exact', 'biased']
    """
    rule_objs = [get_tree_rule(r) for r in (TREE_RULES if rules is None else rules)]
    case_list = standard_tree_cases() if cases is None else list(cases)
    if not rule_objs or not case_list:
        raise invalid_argument("rules" if not rule_objs else "cases", [], "None or a non-empty list", where="run_tree_exact_stage")
    for c in case_list:
        if not isinstance(c, TreeCase):
            raise invalid_argument("cases", type(c).__name__, "TreeCase items", where="run_tree_exact_stage")
    targets = {id(c): target_law(c.target, c.prefix, c.num_tokens) for c in case_list}
    raw = [(rule, case, _tree_n_token_law(case.target, case.draft, case.prefix, case.tree, case.num_tokens, rule), targets[id(case)])
           for rule in rule_objs for case in case_list]
    biased_somewhere = {rule.name for rule, _, law, tl in raw if law != tl}
    findings = []
    for rule, case, law, tl in raw:
        matches = (rule.name in biased_somewhere) != (rule.declared == "exact")
        verdict = "exact" if law == tl else "biased"
        n, note = _samples_needed(tl, law) if verdict == "biased" else (None, "exact: nothing to detect")
        findings.append(TreeFinding(rule.name, case.name, rule.declared, verdict, matches, total_variation(law, tl), law, tl, n, note,
                                    num_draft_nodes(case.tree), case.num_tokens, tree=tree_label(case.tree)))
    return findings
