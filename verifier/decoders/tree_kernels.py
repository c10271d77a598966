"""Tree verification kernels: the verify step of tree / multi-draft speculative sampling, batched.

Every kernel follows :class:`verifier.protocols.TreeVerificationKernel`::

    kernel(target_probs    (batch, num_nodes, vocab) float64,
           draft_probs     (batch, num_nodes, vocab) float64,
           parent_ids      (num_nodes,)              int64, -1 at the root,
           draft_token_ids (batch, num_nodes)        int64,
           generator) -> emitted (batch, max_depth + 1) int64, -1 padded

One algorithm, :func:`_verify_tree`, walks the tree level by level for all rows at once: at the
current node it tries the candidates (its children, in index order) -- accept, or update the
working target (and draft) law and try the next sibling -- descends into the accepted child, and
after the last level draws the recovered / bonus token from the current node's working target law.
The switches are the rules of :mod:`verifier.exact.tree_rules` (same names, same semantics), so the
exact enumerator gives every kernel's law; :data:`TREE_KERNELS` lists them by rule name.  The
*proposal* (how the driver must draw the children: i.i.d., without replacement, top-k) is the rule's
``proposal`` -- ``wor_verified_as_iid`` is the MSS kernel driven with children drawn without
replacement.

Randomness: one ``torch.rand`` of shape (batch, num_nodes) (the uniform of each node's accept
test) and one of shape (batch,) for the last token, both from ``generator``.

References: see :mod:`verifier.exact.tree_rules` (SpecInfer MSS; RRS without replacement, Jeon et
al. 2024 / Sequoia; EAGLE/SGLang target-only verification).
"""

from __future__ import annotations

from typing import Callable

import torch

from verifier.decoders.kernels import residual_or_target, sample_from_probs
from verifier.errors import invalid_argument
from verifier.protocols import PADDING_TOKEN_ID

__all__ = [
    "verify_tree_iid",
    "verify_tree_without_replacement",
    "verify_tree_target_only",
    "tree_structure",
    "TREE_KERNELS",
]


def tree_structure(parent_ids: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor], torch.Tensor]:
    """``(child_table (num_nodes, max_width) -1 padded, nodes per depth, depth (num_nodes,))`` of a parent array.

    Children keep index order.  Raises :class:`~verifier.errors.InvalidArgumentError` unless
    ``parent_ids[0] == -1`` and ``0 <= parent_ids[i] < i``.
    """
    parents = [int(v) for v in parent_ids.tolist()]
    if not parents or parents[0] != -1 or any(not 0 <= p < i for i, p in enumerate(parents) if i):
        raise invalid_argument("parent_ids", parents[:16], "parent_ids[0] == -1 and 0 <= parent_ids[i] < i (topological order)")
    children: list[list[int]] = [[] for _ in parents]
    depth = [0] * len(parents)
    for i, p in enumerate(parents[1:], start=1):
        children[p].append(i)
        depth[i] = depth[p] + 1
    width = max(1, max(len(c) for c in children))
    table = torch.full((len(parents), width), -1, dtype=torch.int64)
    for i, c in enumerate(children):
        table[i, : len(c)] = torch.tensor(c, dtype=torch.int64) if c else table[i, :0]
    levels = [torch.tensor([i for i, d in enumerate(depth) if d == level], dtype=torch.int64) for level in range(max(depth) + 1)]
    return table, levels, torch.tensor(depth, dtype=torch.int64)


def _verify_tree_iv(target_probs, draft_probs, parent_ids, draft_token_ids, generator):
    if not isinstance(generator, torch.Generator):
        raise invalid_argument("generator", type(generator).__name__, "a torch.Generator")
    for name, t in (("target_probs", target_probs), ("draft_probs", draft_probs), ("parent_ids", parent_ids),
                    ("draft_token_ids", draft_token_ids)):
        if not isinstance(t, torch.Tensor):
            raise invalid_argument(name, type(t).__name__, "a torch.Tensor")
    if target_probs.ndim != 3 or target_probs.shape[1] < 2:
        raise invalid_argument("target_probs.shape", tuple(target_probs.shape), "(batch, num_nodes >= 2, vocab)")
    batch, n, vocab = target_probs.shape
    if tuple(draft_probs.shape) != (batch, n, vocab):
        raise invalid_argument("draft_probs.shape", tuple(draft_probs.shape), f"(batch, num_nodes, vocab) = {(batch, n, vocab)}")
    if tuple(parent_ids.shape) != (n,):
        raise invalid_argument("parent_ids.shape", tuple(parent_ids.shape), f"(num_nodes,) = {(n,)}")
    if tuple(draft_token_ids.shape) != (batch, n):
        raise invalid_argument("draft_token_ids.shape", tuple(draft_token_ids.shape), f"(batch, num_nodes) = {(batch, n)}")
    ids = draft_token_ids[:, 1:]
    if draft_token_ids.dtype not in (torch.int64, torch.int32) or (batch and (ids.min() < 0 or ids.max() >= vocab)):
        raise invalid_argument("draft_token_ids", "<out of range or not integer>", f"integer ids in 0..{vocab - 1} (column 0 ignored)")
    return target_probs.to(torch.float64), draft_probs.to(torch.float64), parent_ids.long().cpu(), draft_token_ids.long(), generator


def _normalized(weights: torch.Tensor) -> torch.Tensor:
    total = weights.sum(dim=-1, keepdim=True)
    return torch.where(total > 0, weights / total.clamp(min=torch.finfo(weights.dtype).tiny), weights)


def _verify_tree(target_probs, draft_probs, parent_ids, draft_token_ids, generator, *, verification: str = "speculative",
                 draft_update: str = "none", residual_update: bool = True, verify_order: str = "drawn",
                 bonus_from_parent: bool = False, candidates: str = "children") -> torch.Tensor:
    """The reference tree walk with the switches of :class:`verifier.exact.tree_rules.TreeRule` (for mutants)."""
    batch, n, _ = target_probs.shape
    device, tokens = target_probs.device, draft_token_ids
    child_table, levels, _ = tree_structure(parent_ids)
    child_table, parents = child_table.to(device), parent_ids.to(device)
    max_depth = len(levels) - 1
    rows = torch.arange(batch, device=device)
    u = torch.rand(batch, n, dtype=torch.float64, device=device, generator=generator)  # accept test of each node
    cur = torch.zeros(batch, dtype=torch.int64, device=device)  # current (last accepted) node
    p_cur, q_cur = target_probs[:, 0].clone(), draft_probs[:, 0].clone()  # working target / draft law at cur
    last = p_cur.clone()  # law of the last token if no further candidate is accepted
    active = torch.ones(batch, dtype=torch.bool, device=device)
    num_accepted = torch.zeros(batch, dtype=torch.int64, device=device)
    emitted = torch.full((batch, max_depth + 1), PADDING_TOKEN_ID, dtype=torch.int64, device=device)
    for level in range(max_depth):
        if candidates == "children" or level == 0:
            cand = child_table[cur]  # (batch, width): children of the current node, -1 padded
        else:  # mutant: every node one level deeper, whoever its parent is
            cand = levels[level + 1].to(device)[None].expand(batch, -1)
        if verify_order == "draft_prob":  # mutant: siblings by descending draft prob (stable), padding last
            keys = torch.where(cand >= 0, q_cur.gather(1, tokens.gather(1, cand.clamp(min=0))), -1.0)
            cand = cand.gather(1, torch.sort(keys, dim=1, descending=True, stable=True).indices)
        accepted_node = torch.full((batch,), -1, dtype=torch.int64, device=device)
        for slot in range(cand.shape[1]):
            c = cand[:, slot]
            valid = active & (c >= 0) & (accepted_node < 0)
            cc = c.clamp(min=0)
            x = tokens[rows, cc]
            px, qx = p_cur[rows, x], q_cur[rows, x]
            # speculative: accepted w.p. min(1, p/q) as u * q < p; target-only: q is one-hot on x
            accept = valid & ((u[rows, cc] < px) if verification == "target_only" else (u[rows, cc] * qx < px))
            reject = valid & ~accept
            accepted_node = torch.where(accept, c, accepted_node)
            if verification == "target_only":  # remove x from the target and renormalize
                new_p = _normalized(p_cur.scatter(1, x[:, None], 0.0))
                new_last, new_q = new_p, q_cur
            else:
                res = _normalized(residual_or_target(p_cur, q_cur))
                new_p, new_last = (res if residual_update else p_cur), res
                new_q = q_cur
                if draft_update != "none":  # without replacement: x leaves the draft law too
                    new_q = q_cur.scatter(1, x[:, None], 0.0)
                    new_q = _normalized(new_q) if draft_update == "renormalized" else new_q
            p_cur = torch.where(reject[:, None], new_p, p_cur)
            q_cur = torch.where(reject[:, None], new_q, q_cur)
            last = torch.where(reject[:, None], new_last, last)
        descended = accepted_node >= 0
        node = accepted_node.clamp(min=0)
        emitted[:, level] = torch.where(descended, tokens[rows, node], emitted[:, level])
        cur = torch.where(descended, node, cur)
        p_cur = torch.where(descended[:, None], target_probs[rows, cur], p_cur)
        q_cur = torch.where(descended[:, None], draft_probs[rows, cur], q_cur)
        last = torch.where(descended[:, None], target_probs[rows, cur], last)
        num_accepted += descended.to(torch.int64)
        active = descended
    if bonus_from_parent:  # mutant: the bonus at an accepted leaf comes from the parent's target row
        at_leaf = (cur > 0) & (child_table[cur, 0] < 0)
        last = torch.where(at_leaf[:, None], target_probs[rows, parents[cur].clamp(min=0)], last)
    final = sample_from_probs(last, torch.rand(batch, dtype=torch.float64, device=device, generator=generator))
    emitted[rows, num_accepted] = final
    return emitted


def verify_tree_iid(target_probs: torch.Tensor, draft_probs: torch.Tensor, parent_ids: torch.Tensor, draft_token_ids: torch.Tensor,
                    generator: torch.Generator) -> torch.Tensor:
    """Reference tree verification for children drawn i.i.d. from their parent's draft law (SpecInfer MSS).

    Parameters
    ----------
    target_probs : torch.Tensor, shape (batch, num_nodes, vocab)
        Processed target probs after the path to each node (node 0 = root).  Cast to float64.
    draft_probs : torch.Tensor, shape (batch, num_nodes, vocab)
        Processed draft probs after the path to each node (the law its children were drawn from).
    parent_ids : torch.Tensor, shape (num_nodes,), int64
        -1 at the root, ``0 <= parent_ids[i] < i`` elsewhere; siblings are verified in index order.
    draft_token_ids : torch.Tensor, shape (batch, num_nodes), int64
        Column 0 (the root) is ignored.
    generator : torch.Generator

    Returns
    -------
    torch.Tensor, shape (batch, max_depth + 1), int64
        Accepted path, then the recovered or bonus token, then ``-1``.

    Raises
    ------
    InvalidArgumentError
        Mismatched shapes, a parent array that is not topological, ids outside the vocabulary.

    Notes
    -----
    Child x_i of the current node is accepted iff ``u * q(x_i) < p_i(x_i)`` (probability
    ``min(1, p_i/q)``); on rejection ``p_{i+1} = max(0, p_i - q) / sum(...)`` (falling back to
    ``p_i`` where that sums to 0).  The law of every row is
    ``verifier.exact.tree_laws.tree_round_law(..., rule="iid_multi_draft")``.

    References
    ----------
    Miao et al. (2024), "SpecInfer", ASPLOS, Algorithm 2 (multi-step speculative sampling).

    Examples
    --------
    >>> g = torch.Generator().manual_seed(0)
    >>> p = torch.tensor([[[0.0, 1.0], [1.0, 0.0], [0.0, 1.0]]], dtype=torch.float64)
    >>> q = torch.tensor([[[0.5, 0.5], [0.5, 0.5], [0.5, 0.5]]], dtype=torch.float64)
    >>> verify_tree_iid(p, q, torch.tensor([-1, 0, 0]), torch.tensor([[-1, 0, 1]]), g).tolist()  # child 0 has p = 0
    [[1, 1]]
    """
    return _verify_tree(*_verify_tree_iv(target_probs, draft_probs, parent_ids, draft_token_ids, generator))


def verify_tree_without_replacement(target_probs: torch.Tensor, draft_probs: torch.Tensor, parent_ids: torch.Tensor,
                                    draft_token_ids: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Reference tree verification for children drawn *without replacement* (recursive rejection sampling).

    As :func:`verify_tree_iid`, and after rejecting x_i the draft law is updated to the law the next
    sibling was drawn from: ``q_{i+1} = q_i`` with x_i removed, renormalized.  Same shapes and
    errors.  Law: ``tree_round_law(..., rule="wor_recursive_rejection")``.

    References
    ----------
    Jeon et al. (2024), "Recursive Speculative Decoding", arXiv:2402.14160; Sequoia ``Tree/SpecTree.py``.
    """
    return _verify_tree(*_verify_tree_iv(target_probs, draft_probs, parent_ids, draft_token_ids, generator), draft_update="renormalized")


def verify_tree_target_only(target_probs: torch.Tensor, draft_probs: torch.Tensor, parent_ids: torch.Tensor,
                            draft_token_ids: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Reference tree verification of deterministic (top-k) children against the target only.

    Child x is accepted iff ``u < p_i(x)``; on rejection x is removed from the working target,
    which is renormalized (draft probs are ignored).  In law: sample y from the target, descend if y
    is a child, else emit y.  Same shapes and errors.  Law: ``tree_round_law(..., rule="topk_target_only")``.

    References
    ----------
    EAGLE ``eagle/model/utils.py`` ``evaluate_posterior``; SGLang ``TreeSpeculativeSamplingTargetOnly``.
    """
    return _verify_tree(*_verify_tree_iv(target_probs, draft_probs, parent_ids, draft_token_ids, generator), verification="target_only")


def _mutant(name: str, doc: str, **switches) -> Callable:
    def kernel(target_probs, draft_probs, parent_ids, draft_token_ids, generator):
        return _verify_tree(*_verify_tree_iv(target_probs, draft_probs, parent_ids, draft_token_ids, generator), **switches)

    kernel.__name__ = kernel.__qualname__ = f"{name}_kernel"
    kernel.__doc__ = f"Mutant ({name}): {doc}  Law: ``tree_round_law(..., rule={name!r})``."
    return kernel


TREE_KERNELS: dict[str, Callable] = {
    "iid_multi_draft": verify_tree_iid,
    "wor_recursive_rejection": verify_tree_without_replacement,
    "topk_target_only": verify_tree_target_only,
    "residual_not_updated": _mutant("residual_not_updated", "siblings verified against the node's original target; "
                                    "only the last token uses the residual.", residual_update=False),
    "wor_verified_as_iid": verify_tree_iid,  # the defect is the pairing: MSS driven with children drawn without replacement
    "wor_draft_not_renormalized": _mutant("wor_draft_not_renormalized", "the rejected child is removed from the draft law, "
                                          "which is not renormalized.", draft_update="unnormalized"),
    "bonus_from_parent": _mutant("bonus_from_parent", "the bonus token at an accepted leaf is drawn from the parent's target row.",
                                 bonus_from_parent=True),
    "sorted_by_draft_prob": _mutant("sorted_by_draft_prob", "siblings verified by descending draft probability, not index order.",
                                    verify_order="draft_prob"),
    "child_of_rejected": _mutant("child_of_rejected", "below the root every node one level deeper is a candidate "
                                 "(the parent check is missing).", candidates="next_level"),
}
