"""Reference tree speculative decoder: a static draft tree, one target pass with a tree attention mask,
verification by a tree kernel, per-row KV rollback to the accepted path.  Batched over samples.

One round per active row (:meth:`TreeDecoder._round`), for a static tree shape
(:mod:`verifier.exact.tree_shape`; node 0 = the root = the last emitted token):

1. **draft**, level by level: the draft scores the root (the emitted tokens it has not seen),
   the children of every node are drawn from the node's processed draft probs q (i.i.d., without
   replacement or top-k: the rule's ``proposal``), and the next level's nodes are scored in one
   forward with a *tree attention mask* -- each node attends to the context and its own ancestors
   only, at position ``root + depth``;
2. **target**, one pass over ``[pending tokens, every draft node]`` with the same tree mask gives
   the processed target probs p at every node;
3. **verify**: the tree kernel (:mod:`verifier.decoders.tree_kernels`) walks the tree and returns
   the accepted path, then the recovered or bonus token;
4. **roll back**: the accepted node is the deepest node whose token path is a prefix of the
   emitted tokens; both KV caches keep the columns of its ancestors (the accepted path) and hide
   every other tree column in the row's attention mask (:class:`TreeCacheRunner`); emitted tokens
   a cache has not seen are fed at the start of the next round.

Masks are per query (a 4-D ``attention_mask`` of shape (batch, 1, new, cached + new), additive:
0 = visible), as Hugging Face causal LMs take them, with explicit ``position_ids``;
:class:`verifier.models.TabularCausalLM` honours the same semantics, so exact laws on tabular pairs
check the mechanism (``tree_n_token_law``).  Mutants override one hook each: ``_node_visibility``
(which tree nodes a node attends to) and ``_kept_nodes`` (which tree columns survive rollback).

Glossary: see :mod:`verifier.protocols`; rules in :mod:`verifier.exact.tree_rules`.
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

import numpy as np
import torch

from verifier.decoders._runner import COMPACT_HOLE_FRACTION, CacheRunner, _use_buffered_layers, output_cache
from verifier.decoders.kernels import sample_from_probs
from verifier.decoders.speculative import _FROM_CONFIG, bind_model_pair, MAX_NUM_DRAFT_TOKENS, _generate_iv, _Output, _right_aligned, \
    _rows_to_keep
from verifier.decoders.tree_kernels import TREE_KERNELS
from verifier.errors import DecoderOutputError, invalid_argument
from verifier.exact.tree_rules import PROPOSALS, get_tree_rule
from verifier.exact.tree_shape import bfs_nodes, parse_tree, tree_depth, tree_label
from verifier.protocols import PADDING_TOKEN_ID, DecoderStats
from verifier.sampling import SamplingConfig, add_generated, context_codes, processed_probs
from verifier.validation import check_stop_rule

__all__ = ["TreeDecoder", "TreeCacheRunner", "tree_attention_mask"]


def _mask_dtype(model) -> torch.dtype:
    dtype = getattr(model, "dtype", torch.float32)
    return dtype if isinstance(dtype, torch.dtype) and dtype.is_floating_point else torch.float32


def tree_attention_mask(visible: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Additive 4-D attention mask from a visibility tensor.

    Parameters
    ----------
    visible : torch.Tensor, shape (batch, queries, keys), bool
        True where a query attends to a key column (cached columns first, then the new ones).
    dtype : torch.dtype
        The model's floating dtype.

    Returns
    -------
    torch.Tensor, shape (batch, 1, queries, keys), ``dtype``
        0 where visible, ``finfo(dtype).min`` elsewhere (Hugging Face's convention; finite, so a
        query that sees only itself never yields NaN).
    """
    mask = torch.zeros(visible.shape, dtype=dtype, device=visible.device)
    return mask.masked_fill(~visible, torch.finfo(dtype).min)[:, None]


class TreeCacheRunner(CacheRunner):
    """A :class:`~verifier.decoders._runner.CacheRunner` that also appends blocks of columns under a
    per-query mask (a draft tree) and keeps only some of them afterwards.

    Invariant (as the base class): ``lengths == mask.sum(1)`` after :meth:`keep_block`; between
    :meth:`append_block` and :meth:`keep_block` the block's columns are speculative.
    """

    @torch.no_grad()
    def append_block(self, token_ids: torch.Tensor, position_ids: torch.Tensor, see_new: torch.Tensor,
                     see_recent: torch.Tensor | None = None, persist: torch.Tensor | None = None) -> torch.Tensor:
        """Feed ``token_ids`` (batch, m) under a per-query mask; return logits (batch, m, vocab).

        Parameters
        ----------
        token_ids, position_ids : torch.Tensor, shape (batch, m), int64
        see_new : torch.Tensor, shape (batch or 1, m, m), bool
            Which of the new columns each new query attends to.
        see_recent : torch.Tensor, shape (batch or 1, m, t), bool, optional
            Which of the last ``t`` cached columns each query attends to (AND their row mask);
            older visible columns are seen by every query.
        persist : torch.Tensor, shape (batch, m), bool, optional
            Visibility of the new columns to later forwards (default all True).
        """
        batch, m = token_ids.shape
        cols = self.mask.shape[1]
        t = 0 if see_recent is None else see_recent.shape[-1]
        parts = [self.mask[:, None, :cols - t].expand(batch, m, cols - t)]
        if t:
            parts.append(see_recent & self.mask[:, None, cols - t:])
        parts.append(see_new.expand(batch, m, m))
        mask = tree_attention_mask(torch.cat(parts, dim=2), _mask_dtype(self.model))
        out = self.model(input_ids=token_ids, attention_mask=mask, position_ids=position_ids, use_cache=True,
                         **{self._cache_kwarg: self.cache})
        if self.cache is None:  # first forward without a prefill (1-token prompt)
            _use_buffered_layers(output_cache(out), self.reserve_columns)
        self.cache = output_cache(out)
        keep = torch.ones(batch, m, dtype=torch.bool, device=self.device) if persist is None else persist
        self.mask = torch.cat([self.mask, keep], dim=1)
        return out.logits

    def keep_block(self, keep: torch.Tensor) -> None:
        """Hide the last ``keep.shape[1]`` columns where ``keep`` (batch, m) is False; recount lengths."""
        m = keep.shape[1]
        if m:
            self.mask = torch.cat([self.mask[:, :-m], self.mask[:, -m:] & keep], dim=1)
        self.lengths = self.mask.sum(dim=1)
        self._maybe_compact()


class TreeDecoder:
    """Reference tree speculative decoder (SpecInfer-style token tree, one target pass), batched.

    Parameters
    ----------
    target, draft : causal LM
        Hugging Face causal LMs that take a 4-D ``attention_mask`` and ``position_ids`` (any
        model whose attention honours a custom mask; tested on Llama) or
        :class:`verifier.models.TabularCausalLM`; same vocabulary and device.
    tree : str or nested tuple, default "2;2,2"
        Static tree shape (:func:`~verifier.exact.tree_shape.parse_tree`); depth 1..32.
    rule : str, default "iid_multi_draft"
        Tree rule of :data:`~verifier.exact.tree_rules.TREE_RULES` with a kernel in
        :data:`~verifier.decoders.tree_kernels.TREE_KERNELS`; gives the kernel and the proposal.
    kernel : TreeVerificationKernel, optional
        Overrides the rule's kernel.
    proposal : {"iid", "without_replacement", "top_k"}, optional
        Overrides the rule's proposal (how the children of a node are drafted).
    eos_token_id : int or None, optional
        Default: the target config's ``eos_token_id``.
    name : str, default "tree"

    Attributes
    ----------
    num_draft_tokens : int
        The tree's depth: accepted draft tokens per round are 0..depth.
    num_draft_nodes : int
        Draft tokens proposed per round (the draft budget).
    settings : dict
        Tree, rule, proposal, kernel -- recorded with every sample shard.
    last_stats : DecoderStats
        As :class:`~verifier.decoders.SpeculativeDecoder`'s; ``extra``: ``emitted_per_round`` (kernel output
        per round), ``row_rounds`` and ``row_tokens_per_round_sum`` (per row: rounds, and accepted
        drafts + 1 summed over its rounds, EOS-capped; int64 arrays of shape (num_samples,)).

    Raises
    ------
    InvalidArgumentError
        Malformed tree, depth > 32, unknown rule or proposal, a rule without a kernel, top-k
        children wider than the vocabulary.
    ModelLoadError
        Target and draft vocabularies or devices differ.

    Notes
    -----
    With a lossless rule the emitted law equals plain target sampling for every tree, sampling
    config and batch size (its law on tabular pairs is ``tree_n_token_law(..., rule)``).  Rows of
    ``draft_probs`` at the deepest level (nodes without children that the draft never scores) are
    uniform placeholders, unused by the kernels.  Children drawn without replacement need at least
    as many tokens with positive draft prob as the widest node has children
    (``InvalidArgumentError`` at generate time otherwise).
    """

    def __init__(self, target, draft, tree="2;2,2", *, rule: str = "iid_multi_draft", kernel: Callable | None = None,
                 proposal: str | None = None, eos_token_id=_FROM_CONFIG, name: str = "tree") -> None:
        self.shape = parse_tree(tree)
        self.tree = tree_label(self.shape)
        depth = tree_depth(self.shape)
        if depth > MAX_NUM_DRAFT_TOKENS:
            raise invalid_argument("tree", self.tree, f"depth <= {MAX_NUM_DRAFT_TOKENS}")
        rule_obj = get_tree_rule(rule)
        if kernel is None:
            kernel = TREE_KERNELS.get(rule_obj.name)
            if kernel is None:
                raise invalid_argument("rule", rule_obj.name, "a tree rule with a kernel: " + ", ".join(TREE_KERNELS))
        proposal = rule_obj.proposal if proposal is None else proposal
        if proposal not in PROPOSALS:
            raise invalid_argument("proposal", proposal, " | ".join(PROPOSALS))
        self.rule, self.kernel, self.proposal = rule_obj.name, kernel, proposal
        bind_model_pair(self, target, draft, eos_token_id)
        self.name = name
        self.last_stats: DecoderStats | None = None
        self._structure(depth)
        if proposal == "top_k" and self._width > self.vocab_size:
            raise invalid_argument("tree", self.tree, f"at most vocab_size={self.vocab_size} top-k children per node")
        self.num_draft_tokens = depth
        self.num_draft_nodes = len(self._parents) - 1
        self.settings = {"tree": self.tree, "rule": self.rule, "proposal": proposal,
                         "kernel": getattr(kernel, "__name__", type(kernel).__name__)}

    def _structure(self, depth: int) -> None:
        nodes = bfs_nodes(self.shape)
        n, dev = len(nodes), self.device
        self._parents = [p for p, _, _ in nodes]
        self._children = [[j for j, (p, _, _) in enumerate(nodes) if p == i] for i in range(n)]
        self._width = max(len(c) for c in self._children)
        depths = [d for _, _, d in nodes]
        self._depth = torch.tensor(depths, dtype=torch.int64, device=dev)
        self._levels = [[i for i in range(n) if depths[i] == lv] for lv in range(depth + 1)]  # contiguous (BFS)
        anc = torch.zeros(n, n, dtype=torch.bool)  # anc[i, j]: j is i or an ancestor of i
        at_depth = torch.full((n, max(depth, 1)), -1, dtype=torch.int64)  # at_depth[i, j]: i's ancestor at depth j + 1
        for i in range(n):
            j = i
            while j >= 0:
                anc[i, j] = True
                if depths[j]:
                    at_depth[i, depths[j] - 1] = j
                j = self._parents[j]
        self._anc, self._at_depth = anc.to(dev), at_depth.to(dev)
        self._parent_ids = torch.tensor(self._parents, dtype=torch.int64)

    # -- hooks that mutants override (each is one line of the reference) --------------------
    def _node_visibility(self) -> torch.Tensor:
        """(nodes, nodes) bool: node i attends to node j -- the tree attention mask (ancestors and itself)."""
        return self._anc

    def _kept_nodes(self, accepted_node: torch.Tensor, retained: torch.Tensor) -> torch.Tensor:
        """(batch, nodes) bool: tree nodes whose KV columns stay visible -- the accepted path."""
        return self._anc[accepted_node]

    # -- the algorithm ----------------------------------------------------------------------
    def _draw_children(self, q: torch.Tensor, width: int, sampling: SamplingConfig, gen: torch.Generator) -> torch.Tensor:
        """Tokens (batch, width) of one node's children from its draft probs q (batch, vocab), per the proposal."""
        batch = q.shape[0]
        if self.proposal == "top_k":  # deterministic: the top-k of q, ties to the lower id
            return torch.sort(q, dim=1, descending=True, stable=True).indices[:, :width]
        if self.proposal == "without_replacement":
            have = int((q > 0).sum(dim=1).min())
            if have < width:
                raise invalid_argument("tree", self.tree, f"children drawn without replacement need >= {width} tokens with positive "
                                       f"draft prob at every node; a draft row under sampling {sampling.label()} has {have}")
        left, out = q.clone(), []
        for _ in range(width):
            x = sample_from_probs(left, torch.rand(batch, dtype=torch.float64, device=q.device, generator=gen))
            out.append(x)
            if self.proposal == "without_replacement":
                left.scatter_(1, x[:, None], 0.0)
        return torch.stack(out, dim=1)

    def _round(self, st: dict, sampling: SamplingConfig, gen: torch.Generator) -> torch.Tensor:
        """One round for every active row; returns emitted (active, depth + 1), -1 padded."""
        dev, d, vocab = self.device, self.num_draft_tokens, self.vocab_size
        n = len(self._parents)
        batch = st["target_pending"].shape[0]
        rows = torch.arange(batch, device=dev)
        tokens = torch.zeros(batch, n, dtype=torch.int64, device=dev)  # node tokens; column 0 = the root
        tokens[:, 0] = st["target_pending"][:, -1]
        seen = None  # (batch, nodes, vocab) context of each node, only with a penalty
        if st["seen"] is not None:
            seen = st["seen"][:, None].repeat(1, n, 1)
        q = torch.full((batch, n, vocab), 1.0 / vocab, dtype=torch.float64, device=dev)  # deepest rows: unused placeholders
        vis = self._node_visibility()
        # 1. draft: the root (emitted tokens the draft has not seen), then one level of the tree per forward
        logits = st["draft"].append(st["draft_pending"], st["draft_pending_visible"])[:, -1:]
        root_pos = st["draft"].lengths - 1
        for level in range(d):
            nodes = self._levels[level]
            q[:, nodes] = processed_probs(logits, sampling, seen[:, nodes] if seen is not None else None)
            for i in nodes:
                kids = self._children[i]
                if kids:
                    tokens[:, kids] = self._draw_children(q[:, i], len(kids), sampling, gen)
                    if seen is not None:
                        for c in kids:
                            seen[:, c] = seen[:, i]
                            add_generated(seen[:, c], rows, tokens[:, c])
            if level + 1 < d:  # score the next level: it attends to the context and its ancestors only
                nxt = self._levels[level + 1]
                lo, hi = nxt[0], nxt[-1] + 1
                logits = st["draft"].append_block(tokens[:, lo:hi], root_pos[:, None] + self._depth[lo:hi][None],
                                                  vis[lo:hi, lo:hi][None], vis[lo:hi, 1:lo][None] if lo > 1 else None)
        # 2. target: one pass over [pending, every draft node] under the tree mask gives p at every node
        pend, pvis = st["target_pending"], st["target_pending_visible"]
        m_p = pend.shape[1]
        before = st["target"].lengths
        pos_p = (before[:, None] + pvis.to(torch.int64).cumsum(dim=1) - 1).clamp(min=0)
        pos_nodes = (before + pvis.sum(dim=1) - 1)[:, None] + self._depth[1:][None]
        causal = torch.ones(m_p, m_p, dtype=torch.bool, device=dev).tril()
        see_pp = (causal[None] & pvis[:, None, :]) | torch.eye(m_p, dtype=torch.bool, device=dev)[None]  # a dummy slot sees itself
        top = torch.cat([see_pp, torch.zeros(batch, m_p, n - 1, dtype=torch.bool, device=dev)], dim=2)
        bottom = torch.cat([pvis[:, None, :].expand(batch, n - 1, m_p), vis[1:, 1:][None].expand(batch, n - 1, n - 1)], dim=2)
        t_logits = st["target"].append_block(torch.cat([torch.where(pvis, pend, 0), tokens[:, 1:]], dim=1),
                                             torch.cat([pos_p, pos_nodes], dim=1), torch.cat([top, bottom], dim=1),
                                             persist=torch.cat([pvis, torch.ones(batch, n - 1, dtype=torch.bool, device=dev)], dim=1))
        target_probs = self._target_probs(t_logits[:, m_p - 1:], sampling, seen)
        # 3. verify: the accepted path, then the recovered or bonus token
        emitted = self.kernel(target_probs, q, self._parent_ids, tokens, gen)
        if not isinstance(emitted, torch.Tensor) or tuple(emitted.shape) != (batch, d + 1):
            raise DecoderOutputError(f"tree kernel {self.settings['kernel']} returned "
                                     f"{tuple(getattr(emitted, 'shape', ()))}; expected (batch, depth + 1) = {(batch, d + 1)}")
        emitted = emitted.to(dev)
        num_emitted = (emitted != PADDING_TOKEN_ID).sum(dim=1)
        accepted = num_emitted - 1
        # 4. roll back: the accepted node = the deepest node whose token path is a prefix of the emitted tokens
        path = tokens.gather(1, self._at_depth.clamp(min=0).flatten()[None].expand(batch, -1)).view(batch, n, -1)
        need = self._at_depth[None] >= 0
        agree = ((path == emitted[:, None, :path.shape[2]]) | ~need).all(dim=2) & (self._depth[None] <= accepted[:, None])
        node = torch.where(agree, self._depth[None], -1).argmax(dim=1)  # first (BFS) node of the largest depth
        retained = self._depth[node]
        kept = self._kept_nodes(node, retained)
        st["target"].keep_block(torch.cat([torch.ones(batch, m_p, dtype=torch.bool, device=dev), kept[:, 1:]], dim=1))
        fed = self._levels[d - 1][-1] if d > 1 else 0  # draft tree columns: nodes 1..fed (levels 1..depth-1)
        st["draft"].keep_block(kept[:, 1:fed + 1])
        # 5. pending: emitted tokens each cache has not seen (the draft never scored the deepest level)
        st["target_pending"], st["target_pending_visible"] = _right_aligned(emitted, retained, num_emitted)
        st["draft_pending"], st["draft_pending_visible"] = _right_aligned(emitted, retained.clamp(max=d - 1), num_emitted)
        st["accepted"] = accepted
        return emitted

    def _target_probs(self, logits: torch.Tensor, sampling: SamplingConfig, seen) -> torch.Tensor:
        """Processed target probs p (batch, nodes, vocab) float64."""
        return processed_probs(logits, sampling, seen)

    @torch.no_grad()
    def generate(self, prompt_ids: Sequence[int], num_samples: int, max_new_tokens: int,
                 sampling: SamplingConfig, seed: int, *, stop_token_ids: Sequence[int] = (),
                 max_tokens: int | None = None) -> np.ndarray:
        """Sample ``num_samples`` continuations of ``prompt_ids`` by tree speculative decoding.

        Parameters
        ----------
        prompt_ids : sequence of int
            At least one token (at least ``context_len`` for tabular models).
        num_samples : int
            Independent rows, run as one batch.
        max_new_tokens : int
            Exact number of columns returned.
        sampling : SamplingConfig
        seed : int
            Seeds a ``torch.Generator`` on the models' device (drafting and verification).
        stop_token_ids, max_tokens
            The request's stop rule, as for :meth:`verifier.decoders.SpeculativeDecoder.generate`.

        Returns
        -------
        np.ndarray, shape (num_samples, max_new_tokens), int64
            Emitted tokens, ``-1`` after EOS.

        Raises
        ------
        InvalidArgumentError
            Bad prompt, counts < 1, seed < 0, ``sampling`` not a SamplingConfig, a bad stop rule, or children
            drawn without replacement from draft rows with too few positive tokens.
        DecoderOutputError
            The kernel returned the wrong shape.
        """
        prompt = _generate_iv(prompt_ids, num_samples, max_new_tokens, sampling, seed, self.vocab_size, self.min_prompt_len)
        stops, limit = check_stop_rule(stop_token_ids, max_tokens, max_new_tokens=max_new_tokens, vocab_size=self.vocab_size)
        t0 = time.perf_counter()
        dev, d = self.device, self.num_draft_tokens
        gen = torch.Generator(device=dev).manual_seed(int(seed))
        reserve = int((len(prompt) + max_new_tokens + d + 1) / (1 - COMPACT_HOLE_FRACTION)) + self.num_draft_nodes + d + 2
        st = {"target": TreeCacheRunner(self.target, dev, reserve), "draft": TreeCacheRunner(self.draft, dev, reserve)}
        st["target"].prefill(prompt[:-1], num_samples)
        st["draft"].prefill(prompt[:-1], num_samples)
        last = torch.full((num_samples, 1), prompt[-1], dtype=torch.int64, device=dev)
        st["target_pending"] = st["draft_pending"] = last
        st["target_pending_visible"] = st["draft_pending_visible"] = torch.ones_like(last, dtype=torch.bool)
        st["seen"] = context_codes(prompt, num_samples, self.vocab_size, dev, sampling=sampling)  # None without penalties
        rows = torch.arange(num_samples, device=dev)
        live = torch.ones(num_samples, dtype=torch.bool, device=dev)
        out = _Output(num_samples, max_new_tokens, self.eos_token_id, dev, stops, limit)
        accepted_counts, emitted_counts, first_round = [], [], None
        row_rounds = torch.zeros(num_samples, dtype=torch.int64, device=dev)  # rounds and tokens per round summed, per row
        row_tokens = torch.zeros(num_samples, dtype=torch.int64, device=dev)
        while rows.numel():
            emitted = self._round(st, sampling, gen)
            num_emitted = (emitted != PADDING_TOKEN_ID).sum(dim=1)
            num_accepted = st["accepted"]
            if self.eos_token_id is not None:  # drafts after an accepted EOS are never emitted
                pos = torch.arange(1, d + 1, device=dev)
                first_eos = torch.where(emitted[:, :d] == self.eos_token_id, pos, d + 1).amin(dim=1)
                num_accepted = torch.minimum(num_accepted, first_eos)
            accepted_counts.append(num_accepted[live])
            emitted_counts.append(num_emitted[live])
            row_rounds[rows[live]] += 1
            row_tokens[rows[live]] += num_accepted[live] + 1
            if first_round is None:
                first_round = num_accepted.clone()
            if st["seen"] is not None:
                valid = emitted != PADDING_TOKEN_ID
                r = torch.arange(rows.numel(), device=dev)[:, None].expand_as(emitted)[valid]
                add_generated(st["seen"], r, emitted[valid])
            live = live & ~out.write(rows, emitted, torch.where(live, num_emitted, 0))
            keep = _rows_to_keep(live)
            if keep is not None:
                rows, live = rows[keep], live[keep]
                st["target"].select_rows(keep)
                st["draft"].select_rows(keep)
                for key in ("target_pending", "target_pending_visible", "draft_pending", "draft_pending_visible", "seen"):
                    if st[key] is not None:
                        st[key] = st[key][keep]
        counts = torch.cat(accepted_counts).cpu().numpy().astype(np.int64)
        self.last_stats = DecoderStats(
            rounds=int(counts.size), accepted_counts=counts, num_draft_tokens=d,
            first_round_accepted=first_round.cpu().numpy().astype(np.int64),
            extra={"seconds": time.perf_counter() - t0, "device": str(dev), "tree": self.tree,
                   "num_draft_nodes": self.num_draft_nodes,
                   "emitted_per_round": float(torch.cat(emitted_counts).double().mean()),
                   "row_rounds": row_rounds.cpu().numpy(), "row_tokens_per_round_sum": row_tokens.cpu().numpy()},
        )
        return out.tokens.cpu().numpy()
