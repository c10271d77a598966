"""Tree (multi-draft) verification rules as values: the lossless rules, Medusa's lossy one, the tree bug zoo.

One round of tree speculative decoding: the draft proposes a static tree of tokens
(:mod:`verifier.exact.tree_shape`) below the context; the target scores every node in one pass;
verification starts at the root and, at the current node, tries its children (*siblings*) in
order.  An accepted child is emitted and becomes the current node; when every child of the
current node is rejected (or it has none) one last token is drawn from the current node's
working target law -- the *recovered token* (after rejections) or the *bonus token* (at a leaf).

A :class:`TreeRule` names how the children are proposed and how siblings are verified, plus the
switches of the mutants; :mod:`verifier.exact.tree_laws` runs one enumeration parametrised by it.

Lossless rules
--------------
``iid_multi_draft`` -- SpecInfer's multi-step speculative sampling (MSS).  Children are drawn
    i.i.d. from the draft law q of their parent.  Child x_i is accepted with
    ``min(1, p_i(x_i) / q(x_i))``; on rejection the working target becomes the normalized residual
    ``p_{i+1} = max(0, p_i - q) / sum(...)``; after the last rejection the recovered token is drawn
    from it.  Miao et al. (2024), "SpecInfer", ASPLOS, section 4.3 and Algorithm 2 (VerifyStochastic),
    Theorem 4.2.  Public code: Infini-AI-Lab/Sequoia ``Tree/SpecInferTree.py`` (``accept_step``:
    ``p = get_residual(p, q)`` between siblings, children from ``multinomial(..., replacement=True)``).
``wor_recursive_rejection`` -- recursive rejection sampling with children drawn *without*
    replacement: as MSS, and on rejecting x_i the draft law is updated too,
    ``q_{i+1} = q_i`` with x_i removed and renormalized (the law the next sibling was drawn from).
    Jeon et al. (2024), "Recursive Speculative Decoding: Accelerating LLM Inference via Sampling
    Without Replacement", arXiv:2402.14160, section 3 (recursive rejection sampling); Chen et al.
    (2024), "Sequoia", arXiv:2402.12374.  Public code: Infini-AI-Lab/Sequoia ``Tree/SpecTree.py``
    (``accept_step``: ``p = residual(p, q)`` then ``draft_logits[token] = -inf`` and q re-softmaxed).
``topk_target_only`` -- deterministic children (the top-k of q, ties to the lower id) verified
    against the target only: child x is accepted with ``p_i(x)`` (q treated as one-hot on x); on
    rejection ``p_{i+1} = p_i`` with x removed and renormalized.  In law this is "sample y ~ p;
    descend if y is a child, else emit y".  Li et al. (2024), "EAGLE", ``eagle/model/utils.py``
    ``evaluate_posterior`` (``qx = 1.0``; on reject ``gtp[xi] = 0; gtp = gtp / gtp.sum()``);
    SGLang ``sgl-kernel/csrc/speculative/speculative_sampling.cuh``
    (``TreeSpeculativeSamplingTargetOnly`` with ``threshold_single = threshold_acc = 1``).
The chain is the tree in which every node has one child (:func:`~verifier.exact.tree_shape.chain_shape`);
there ``iid_multi_draft`` and ``wor_recursive_rejection`` are the canonical chain rule.

Declared lossy
--------------
``typical_acceptance_tree`` -- Medusa on a tree: children are the top-k of q; a node is accepted
    iff ``p(x) > min(epsilon, delta * exp(-H(p)))`` at its parent (epsilon 0.09, delta 0.3, decided
    exactly as in :mod:`verifier.exact.rules`); the deepest node whose whole path is accepted wins
    (ties: first in depth-first order, i.e. Medusa's first candidate of maximal accept length);
    the last token is drawn from the target there.  Cai et al. (2024), "Medusa", section 2.3.1;
    FasterDecoding/Medusa ``medusa/model/utils.py`` ``evaluate_posterior`` (typical branch:
    ``candidates_accept_length = cumprod(posterior_mask).sum``, ``best_candidate = argmax``).

Tree bug zoo (each one small change to a lossless rule)
-------------------------------------------------------
``residual_not_updated`` (MSS): every sibling is verified against the node's original target;
    only the recovered token uses the residual.
``wor_verified_as_iid``: children drawn without replacement, verified by MSS (draft law not updated).
``wor_draft_not_renormalized`` (RRS w/o replacement): the rejected child is removed from the draft
    law but the law is not renormalized before the next sibling's ratio and residual.
``bonus_from_parent`` (MSS): the bonus token at an accepted leaf is drawn from the target at the
    leaf's parent (the tree form of the chain's ``bonus_wrong_position``).
``sorted_by_draft_prob`` (MSS): the i.i.d. children are verified in descending order of their
    draft probability instead of the order they were drawn in (the first matching child is taken
    by draft probability).
``child_of_rejected`` (MSS): below the root the candidates of the current node are *all* nodes one
    level deeper (the parent check is missing), so a child of a rejected sibling can be accepted;
    it is verified against the current node's target and draft laws.

Glossary: see :mod:`verifier.protocols`.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

from verifier.errors import invalid_argument
from verifier.exact.rules import DECLARED_STATUSES, TYPICAL_DELTA, TYPICAL_EPSILON, _exceeds_typical_threshold, residual

__all__ = ["TreeRule", "TREE_RULES", "get_tree_rule", "PROPOSALS", "top_k_order"]

Probs = tuple[Fraction, ...]

PROPOSALS = ("iid", "without_replacement", "top_k")  # how the children of a node are drafted
_VERIFICATIONS = ("speculative", "target_only", "typical")
_DRAFT_UPDATES = ("none", "renormalized", "unnormalized")


@dataclass(frozen=True)
class TreeRule:
    """One tree verification rule.

    Attributes
    ----------
    name, declared, description : str
        As :class:`verifier.exact.rules.Rule`; ``declared`` in {"exact", "biased", "lossy"}.
    proposal : {"iid", "without_replacement", "top_k"}
        Children of a node: i.i.d. from its draft law q; sequentially without replacement
        (q with the earlier siblings removed, renormalized; no more children once q is exhausted);
        or the top-k tokens of q (ties to the lower id; at most vocab children).
    verification : {"speculative", "target_only", "typical"}
        Sibling test: accept x with ``min(1, p_i(x) / q_i(x))`` (a token with ``q_i(x) = 0`` is
        accepted iff ``p_i(x) > 0``, as ``u * q < p`` does); with ``p_i(x)``; or Medusa's typical test.
    draft_update : {"none", "renormalized", "unnormalized"}
        After rejecting x: keep q; remove x and renormalize; remove x only (mutant).
    residual_update : bool
        After a rejection the working target becomes the residual (False: mutant).
    verify_order : {"drawn", "draft_prob"}
        Siblings are verified in drawn order, or sorted by draft probability, descending (mutant).
    bonus_from_parent : bool
        Bonus token at an accepted leaf drawn from the parent's target (mutant).
    candidates : {"children", "next_level"}
        Candidates of the current node: its children, or every node one level deeper (mutant).
    """

    name: str
    declared: str
    description: str
    proposal: str
    verification: str = "speculative"
    draft_update: str = "none"
    residual_update: bool = True
    verify_order: str = "drawn"
    bonus_from_parent: bool = False
    candidates: str = "children"

    def __post_init__(self) -> None:
        assert self.declared in DECLARED_STATUSES, self.declared
        assert self.proposal in PROPOSALS and self.verification in _VERIFICATIONS, (self.proposal, self.verification)
        assert self.draft_update in _DRAFT_UPDATES and self.verify_order in ("drawn", "draft_prob"), self
        assert self.candidates in ("children", "next_level"), self.candidates

    # -- per-sibling hooks -------------------------------------------------------------------

    def acceptance(self, target_probs: Probs, draft_probs: Probs, x: int) -> Fraction:
        """Probability that candidate x is accepted given the working target and draft laws."""
        px = target_probs[x]
        if self.verification == "target_only":
            return px
        if self.verification == "typical":
            return Fraction(int(_exceeds_typical_threshold(target_probs, x, TYPICAL_EPSILON, TYPICAL_DELTA)))
        qx = draft_probs[x]
        if qx == 0:
            return Fraction(int(px > 0))
        return min(Fraction(1), px / qx)

    def after_rejection(self, target_probs: Probs, draft_probs: Probs, x: int) -> tuple[Probs, Probs, Probs]:
        """``(next working target, next draft law, law of the last token if nothing else is accepted)``."""
        if self.verification == "target_only":
            rest = 1 - target_probs[x]
            nxt = tuple(Fraction(0) if y == x else v / rest for y, v in enumerate(target_probs)) if rest else target_probs
            return nxt, draft_probs, nxt
        res = residual(target_probs, draft_probs) or target_probs  # no residual: keep p (the kernels' fallback)
        nxt_p = res if self.residual_update else target_probs
        if self.draft_update == "none":
            nxt_q = draft_probs
        else:
            removed = tuple(Fraction(0) if y == x else v for y, v in enumerate(draft_probs))
            total = sum(removed)
            nxt_q = tuple(v / total for v in removed) if self.draft_update == "renormalized" and total else removed
        return nxt_p, nxt_q, res


def top_k_order(draft_probs: Sequence[Fraction]) -> list[int]:
    """Token ids by descending draft probability, ties to the lower id (the top-k children)."""
    return sorted(range(len(draft_probs)), key=lambda t: (-draft_probs[t], t))


def _rule(name, declared, description, proposal, **switches) -> TreeRule:
    return TreeRule(name, declared, description, proposal, **switches)


TREE_RULES: dict[str, TreeRule] = {
    r.name: r
    for r in [
        _rule("iid_multi_draft", "exact", "SpecInfer MSS: i.i.d. children from q, accept min(1, p_i/q), p_{i+1} = residual; recovered ~ last residual",
              "iid"),
        _rule("wor_recursive_rejection", "exact", "RRS without replacement: children drawn w/o replacement, p and q both updated after each rejection",
              "without_replacement", draft_update="renormalized"),
        _rule("topk_target_only", "exact", "top-k children verified target-only: accept p_i(x), else remove x from p (EAGLE/SGLang)",
              "top_k", verification="target_only"),
        _rule("typical_acceptance_tree", "lossy", "Medusa typical acceptance on top-k children, deepest accepted path, last token ~ p",
              "top_k", verification="typical"),
        _rule("residual_not_updated", "biased", "MSS with every sibling verified against the node's original target (no residual between siblings)",
              "iid", residual_update=False),
        _rule("wor_verified_as_iid", "biased", "children drawn without replacement but verified as i.i.d. (draft law not updated)",
              "without_replacement"),
        _rule("wor_draft_not_renormalized", "biased", "RRS w/o replacement with the rejected child removed from q but q not renormalized",
              "without_replacement", draft_update="unnormalized"),
        _rule("bonus_from_parent", "biased", "MSS with the bonus token at an accepted leaf drawn from the parent's target",
              "iid", bonus_from_parent=True),
        _rule("sorted_by_draft_prob", "biased", "MSS verifying the i.i.d. children by descending draft probability instead of drawn order",
              "iid", verify_order="draft_prob"),
        _rule("child_of_rejected", "biased", "MSS whose candidates below the root are all nodes one level deeper: a child of a rejected sibling can be accepted",
              "iid", candidates="next_level"),
    ]
}


def get_tree_rule(rule: str | TreeRule) -> TreeRule:
    """Return the :class:`TreeRule` for a registry name ('-' and '_' interchangeable) or the rule itself.

    Raises
    ------
    InvalidArgumentError
        Unknown name; the message lists the names in :data:`TREE_RULES`.
    """
    if isinstance(rule, TreeRule):
        return rule
    if isinstance(rule, str) and rule.replace("-", "_") in TREE_RULES:
        return TREE_RULES[rule.replace("-", "_")]
    raise invalid_argument("tree rule", rule, "one of " + ", ".join(TREE_RULES))
