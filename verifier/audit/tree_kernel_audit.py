"""Tree-kernel audit (level 2 for trees): drive a tree verification kernel with synthetic distributions.

A case is a :class:`~verifier.exact.tree_stage.TreeCase`: rational tabular target and draft models,
a prompt, a static tree and N.  The driver runs *rounds* like a tree decoder would, on
``num_draws`` independent rows at once: it computes every node's processed probs from the tabular
models along the node's path, draws the children per the proposal (i.i.d. / without replacement
via ``torch.multinomial`` / top-k by a stable sort) with a generator independent of the kernel's,
calls the kernel, appends the emitted path and repeats until each row has N tokens (or EOS).

Cells (each a pooled Pearson GOF test, :func:`verifier.stats.gof_test`):

* ``first N tokens`` against :func:`~verifier.exact.target_law` -- the lossless claim, independent
  of how many drafts a rule accepts (any lossless tree rule passes, any biased one fails);
  sequences outside the target's support are one extra category with expected 0 (a hard failure);
* with ``rule`` (a declared rule), *acceptance rule conformance* apart from the bias verdict, as
  :mod:`verifier.audit.kernel_audit` does for ``acceptance="canonical"``: the first-round accepted
  count against :func:`~verifier.exact.tree_laws.tree_accepted_count_law` -- does the kernel accept
  as often as the rule it claims (a lossless kernel with another rule is not biased for that);
  skipped on EOS cases, where the kernel cannot know EOS.

``expected="rule"`` compares the first N tokens with the rule's own exact N-token law instead (to
check that a lossy or mutant kernel implements what its rule says).  The verdict is
:func:`verifier.stats.adjust` in gate mode with ``dependent=True`` over the bias cells.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from verifier.audit.kernel_audit import DEFAULT_BATCH, KERNEL_TARGET_TV, KernelCell, _KernelVerdict
from verifier.plugins import check_kernel_output
from verifier.errors import DecoderError, invalid_argument
from verifier.exact.cases import standard_tabular_pairs
from verifier.exact.laws import target_law
from verifier.exact.tree_laws import _tree_n_token_law, tree_accepted_count_law
from verifier.exact.tree_rules import PROPOSALS, get_tree_rule
from verifier.exact.tree_shape import bfs_nodes, parse_tree, tree_depth
from verifier.exact.tree_stage import TreeCase
from verifier.protocols import PADDING_TOKEN_ID
from verifier.stats import Adjustment, accepted_count_test, adjust, gof_test

__all__ = ["TreeKernelAuditResult", "standard_tree_kernel_cases", "draw_tree_rounds", "audit_tree_kernel"]


def standard_tree_kernel_cases() -> list[TreeCase]:
    """Kernel-level tree cases (no EOS, drafts with full support so width-3 without-replacement fills).

    ``unigram3/3``: context-free pair, width 3 -- every sibling-level mutant shows (TV .10-.18);
    ``trigram3/2;2,2``: context-dependent pair, width 2, depth 2 -- bonus-node and child-of-rejected
    mutants show too (TV .04-.18).  N = 3.
    """
    pairs = standard_tabular_pairs()
    return [TreeCase(f"{p}/{t}", pairs[p].target, pairs[p].draft, pairs[p].prefix, parse_tree(t), 3, pairs[p].description)
            for p, t in (("unigram3", "3"), ("trigram3", "2;2,2"))]


class _Tables:
    """Float64 next-token tables of a tabular pair, indexed by the last ``context_len`` tokens."""

    def __init__(self, case: TreeCase) -> None:
        self.vocab = case.target.vocab_size
        self.context_len = case.target.context_len
        if case.draft.context_len != self.context_len:
            raise invalid_argument("case.draft.context_len", case.draft.context_len, f"target.context_len={self.context_len}")
        self.target = torch.from_numpy(case.target.float_table())
        self.draft = torch.from_numpy(case.draft.float_table())

    def index(self, context: np.ndarray) -> torch.Tensor:
        """Row index of each context (rows of ``context``: the last ``context_len`` tokens)."""
        idx = np.zeros(len(context), dtype=np.int64)
        for j in range(self.context_len):
            idx = idx * self.vocab + context[:, j]
        return torch.from_numpy(idx)


def _draw_children(q: torch.Tensor, k: int, proposal: str, gen: torch.Generator) -> torch.Tensor:
    if proposal == "iid":
        return torch.multinomial(q, k, replacement=True, generator=gen)
    if proposal == "without_replacement":
        if int((q > 0).sum(dim=1).min()) < k:
            raise invalid_argument("case", "<draft law with fewer than width positive tokens>",
                                   f"draft rows with >= {k} positive tokens for {k} children drawn without replacement")
        return torch.multinomial(q, k, replacement=False, generator=gen)
    if k > q.shape[1]:
        raise invalid_argument("case.tree", f"<a node with {k} children>", f"at most vocab_size={q.shape[1]} top-k children per node")
    order = np.argsort(-q.numpy(), axis=1, kind="stable")  # top-k, ties to the lower id
    return torch.from_numpy(np.ascontiguousarray(order[:, :k]))


def draw_tree_rounds(kernel: Callable, case: TreeCase, num_draws: int, seed: int, *, proposal: str = "iid",
                     batch_size: int = DEFAULT_BATCH) -> tuple[np.ndarray, np.ndarray]:
    """Run tree rounds with ``kernel`` until each of ``num_draws`` rows has ``case.num_tokens`` tokens.

    Parameters
    ----------
    kernel : TreeVerificationKernel
    case : TreeCase
    num_draws : int
    seed : int
        Tree drafting uses ``SeedSequence(seed)`` state 0, the kernel's generator state 1.
    proposal : {"iid", "without_replacement", "top_k"}, default "iid"
    batch_size : int, default 8192

    Returns
    -------
    tokens : np.ndarray, shape (num_draws, num_tokens), int64
        First N emitted tokens per row, -1 after EOS.
    first_round_accepted : np.ndarray, shape (num_draws,), int64
        Accepted draft tokens of each row's first round.

    Raises
    ------
    InvalidArgumentError
        Bad ``num_draws`` / ``proposal``, or a case whose drafts cannot fill the tree.
    DecoderError, DecoderOutputError
        The kernel raised or returned invalid output (exit 3).
    """
    if isinstance(num_draws, bool) or not isinstance(num_draws, int) or num_draws < 1:
        raise invalid_argument("num_draws", num_draws, "an integer >= 1")
    if proposal not in PROPOSALS:
        raise invalid_argument("proposal", proposal, " | ".join(PROPOSALS))
    draft_seed, kernel_seed = (int(s) for s in np.random.SeedSequence(int(seed)).generate_state(2, np.uint32))
    draft_gen, kernel_gen = torch.Generator().manual_seed(draft_seed), torch.Generator().manual_seed(kernel_seed)
    out = np.full((num_draws, case.num_tokens), PADDING_TOKEN_ID, dtype=np.int64)
    accepted = np.zeros(num_draws, dtype=np.int64)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny per-node ops: intra-op threads only spin (10x slower on a busy 2-core box)
    try:
        for start in range(0, num_draws, batch_size):
            b = min(batch_size, num_draws - start)
            tokens, acc = _rounds(kernel, case, b, proposal, draft_gen, kernel_gen)
            out[start: start + b], accepted[start: start + b] = tokens, acc
    finally:
        torch.set_num_threads(threads)
    return out, accepted


def _rounds(kernel, case: TreeCase, b: int, proposal: str, draft_gen, kernel_gen) -> tuple[np.ndarray, np.ndarray]:
    tables, eos, num_tokens = _Tables(case), case.target.eos_token_id, case.num_tokens
    nodes = bfs_nodes(case.tree)
    parents = torch.tensor([p for p, _, _ in nodes], dtype=torch.int64)
    children = [[j for j, (pj, _, _) in enumerate(nodes) if pj == i] for i in range(len(nodes))]
    depth, c_len = tree_depth(case.tree), tables.context_len
    window = np.tile(np.asarray(case.prefix[len(case.prefix) - c_len:] if c_len else (), dtype=np.int64), (b, 1))  # last c_len tokens
    tokens = np.full((b, num_tokens), PADDING_TOKEN_ID, dtype=np.int64)
    length = np.zeros(b, dtype=np.int64)
    done = np.zeros(b, dtype=bool)
    first_accepted = np.full(b, -1, dtype=np.int64)
    while not done.all():
        rows = np.flatnonzero(~done)
        ids = torch.full((len(rows), len(nodes)), PADDING_TOKEN_ID, dtype=torch.int64)
        ctx = [window[rows]]  # context (last c_len tokens) of every node, breadth-first
        for i, (parent, _, _) in enumerate(nodes):
            if i:
                ctx.append(np.concatenate([ctx[parent], ids[:, i, None].numpy()], axis=1)[:, 1:] if c_len else ctx[parent])
            if children[i]:  # draw node i's children from its draft row
                ids[:, children[i]] = _draw_children(tables.draft[tables.index(ctx[i])], len(children[i]), proposal, draft_gen)
        row_idx = torch.stack([tables.index(c) for c in ctx], dim=1)  # (rows, nodes)
        name = getattr(kernel, "__name__", type(kernel).__name__)
        try:
            emitted = kernel(tables.target[row_idx], tables.draft[row_idx], parents, ids, kernel_gen)
        except Exception as exc:
            raise DecoderError(f"tree kernel {name} raised on target_probs{(len(rows), len(nodes), tables.vocab)}: "
                               f"{type(exc).__name__}: {exc}") from exc
        emitted = check_kernel_output(emitted, batch=len(rows), num_draft_tokens=depth, vocab_size=tables.vocab, kernel_name=name).numpy()
        fresh = first_accepted[rows] < 0
        first_accepted[rows[fresh]] = (emitted[fresh] != PADDING_TOKEN_ID).sum(axis=1) - 1
        # append the round's tokens, cut at N and after EOS (vectorised over rows, one column at a time)
        stopped = np.zeros(len(rows), dtype=bool)
        for j in range(emitted.shape[1]):
            t = emitted[:, j]
            m = ~stopped & (t != PADDING_TOKEN_ID)
            r = rows[m]
            tokens[r, length[r]] = t[m]
            length[r] += 1
            if c_len:
                window[r] = np.concatenate([window[r, 1:], t[m, None]], axis=1)
            ended = m & ((length[rows] == num_tokens) | (t == eos))
            done[rows[ended]] = True
            stopped |= ended | (t == PADDING_TOKEN_ID)
    return tokens, first_accepted


@dataclass
class TreeKernelAuditResult(_KernelVerdict):
    """Verdict of :func:`audit_tree_kernel` on one case (``PASS`` or ``BIAS DETECTED``)."""

    kernel: str
    case: TreeCase
    proposal: str
    rule: str | None
    expected: str
    num_draws: int
    seed: int
    alpha: float
    cells: list[KernelCell]
    adjustment: Adjustment
    conformance: KernelCell | None = None  # accepted count vs the declared rule (not a bias cell)
    target_tv: float = KERNEL_TARGET_TV  # a cell that cannot see this TV makes the case UNDERPOWERED

    def _effect(self, i: int) -> str:
        """The worst cell's TV estimate with its interval, only when the cell could see ``target_tv``."""
        res = self.cells[i].result
        if res.effect is None or res.underpowered(self.target_tv):
            return ""
        return f", TV estimate {res.effect.estimate:.3g} [{res.effect.ci_low:.3g}, {res.effect.ci_high:.3g}]"

    def summary(self) -> str:
        i = int(np.argmin(self.adjustment.adjusted_pvalues))
        return (f"{self.kernel} on {self.case.name} ({self.proposal} children): {self.verdict} (n={self.num_draws}, seed={self.seed}, "
                f"alpha={self.alpha:g}, {self.adjustment.method}; worst cell {self.cells[i].name}: "
                f"p_adj={self.adjustment.adjusted_pvalues[i]:.3g}{self._effect(i)})")


def audit_tree_kernel(kernel: Callable, case: TreeCase, *, proposal: str | None = None, rule: str | None = None, expected: str = "target",
                      num_draws: int = 50_000, seed: int = 0, alpha: float = 1e-3, batch_size: int = DEFAULT_BATCH,
                      name: str | None = None, target_tv: float = KERNEL_TARGET_TV) -> TreeKernelAuditResult:
    """Audit a tree verification kernel on one synthetic tree case: PASS, BIAS DETECTED or UNDERPOWERED.

    Parameters
    ----------
    kernel : TreeVerificationKernel
        E.g. :func:`verifier.decoders.tree_kernels.verify_tree_iid` or a mutant from ``TREE_KERNELS``.
    case : TreeCase
        :func:`standard_tree_kernel_cases` or any rational pair, prompt, tree and N.
    proposal : {"iid", "without_replacement", "top_k"}, optional
        How the driver drafts the children; default: ``rule``'s proposal, else "iid".
    rule : str, optional
        The tree rule the kernel claims to implement (:data:`~verifier.exact.tree_rules.TREE_RULES`):
        adds the acceptance-conformance check (``conformance``, ``conforms``; no EOS in the case) and
        sets the default proposal.
    expected : {"target", "rule"}, default "target"
        Law of the first N tokens: the target's (the lossless claim) or ``rule``'s exact law.
    num_draws : int, default 50000
        Rows (independent sequences of N tokens).
    seed : int, default 0
    alpha : float, default 1e-3
        Family-wise false-alarm rate over the cells (Holm + Cauchy combination; cells share draws).
    batch_size : int, default 8192
    name : str, optional
    target_tv : float, default 0.03
        Smallest bias (total variation) the case must see: not rejected with a cell whose minimum
        detectable TV exceeds it is ``UNDERPOWERED``, never PASS.

    Returns
    -------
    TreeKernelAuditResult

    Raises
    ------
    InvalidArgumentError
        Unknown rule / proposal / expected, ``expected="rule"`` without a rule, alpha outside (0, 1).
    DecoderError, DecoderOutputError
        The kernel raised or returned invalid output (exit 3).
    """
    if not 0 < alpha < 1:
        raise invalid_argument("alpha", alpha, "a number in (0, 1)")
    if expected not in ("target", "rule") or (expected == "rule" and rule is None):
        raise invalid_argument("expected", expected, "'target', or 'rule' together with rule=NAME")
    rule_obj = get_tree_rule(rule) if rule is not None else None
    proposal = proposal or (rule_obj.proposal if rule_obj else "iid")
    tokens, accepted = draw_tree_rounds(kernel, case, num_draws, seed, proposal=proposal, batch_size=batch_size)
    if expected == "rule":
        law = _tree_n_token_law(case.target, case.draft, case.prefix, case.tree, case.num_tokens, rule_obj)
    else:
        law = target_law(case.target, case.prefix, case.num_tokens)
    outcomes = sorted(law)
    code = {o: i for i, o in enumerate(outcomes)}
    counts = np.zeros(len(outcomes) + 1, dtype=np.int64)  # last: sequences outside the law's support
    for row, c in zip(*np.unique(tokens, axis=0, return_counts=True)):
        counts[code.get(tuple(int(t) for t in row), len(outcomes))] += c
    probs = np.array([float(law[o]) for o in outcomes] + [0.0])
    label = "target" if expected == "target" else f"rule {rule_obj.name}"
    cells = [KernelCell(f"first {case.num_tokens} tokens ({label} law)", gof_test(counts, probs, alpha=alpha), probs, counts)]
    conformance = None
    if rule_obj is not None and case.target.eos_token_id is None:
        acc_law = tree_accepted_count_law(case.target, case.draft, case.prefix, case.tree, rule_obj)
        conformance = KernelCell(f"first-round accepted count (acceptance rule conformance, {rule_obj.name})",
                                 accepted_count_test(accepted, acc_law, alpha=alpha), np.array([float(v) for v in acc_law]),
                                 np.bincount(accepted, minlength=len(acc_law)))
    adjustment = adjust([c.result for c in cells], alpha=alpha, mode="gate", dependent=True)
    label = name or getattr(kernel, "__name__", type(kernel).__name__)
    return TreeKernelAuditResult(label, case, proposal, rule_obj.name if rule_obj else None, expected, num_draws, seed, alpha, cells,
                                 adjustment, conformance, target_tv)
