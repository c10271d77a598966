"""The tree decoder zoo: the reference tree decoder, the lossless tree rules and the tree mutants by name.

:data:`TREE_DECODER_REGISTRY` maps ``tree_<name>`` to a :class:`~verifier.decoders.spec.DecoderSpec`
whose factory takes ``(target, draft, num_draft_tokens, tree=..., **options)``;
:func:`verifier.decoders.make_decoder` finds these names too.  ``num_draft_tokens`` must equal the
tree's depth (accepted draft tokens per round are 0..depth); without ``tree`` the chain of
``num_draft_tokens`` is used.

* lossless: ``tree_reference`` (i.i.d. children, SpecInfer MSS), ``tree_wor_recursive_rejection``
  (children without replacement, recursive rejection sampling), ``tree_topk_target_only`` (top-k
  children verified target-only, EAGLE / SGLang);
* kernel mutants, the tree kernel of :data:`~verifier.decoders.tree_kernels.TREE_KERNELS` plugged
  into the decoder with its rule's proposal: ``tree_residual_not_updated``,
  ``tree_wor_verified_as_iid``, ``tree_wor_draft_not_renormalized``, ``tree_bonus_from_parent``,
  ``tree_sorted_by_draft_prob``, ``tree_child_of_rejected`` (exact laws:
  ``verifier.exact.tree_laws.tree_n_token_law(..., rule=<name>)``);
* decoder mutants (no exact law: the enumerator has no attention and no cache):
  ``tree_mask_sees_sibling`` -- the tree attention mask lets a node attend to its earlier siblings
  (the causal mask over the flattened tree, restricted to one level); ``tree_cache_kept_rejected`` --
  rollback keeps every tree column up to the accepted depth (the chain's "keep the first
  ``retained`` drafts" applied to a tree), so a rejected branch's KV stays visible.
"""

from __future__ import annotations

from verifier.decoders.spec import DecoderSpec
from verifier.decoders.tree_decoder import TreeDecoder
from verifier.decoders.tree_kernels import TREE_KERNELS
from verifier.errors import invalid_argument
from verifier.exact.tree_rules import TREE_RULES
from verifier.exact.tree_shape import chain_shape, parse_tree, tree_depth, tree_label

__all__ = ["TREE_DECODER_REGISTRY", "SiblingVisibleMaskTreeDecoder", "CacheKeptRejectedTreeDecoder", "tree_decoder_names"]

LOSSLESS_TREE_RULES = ("iid_multi_draft", "wor_recursive_rejection", "topk_target_only")


class SiblingVisibleMaskTreeDecoder(TreeDecoder):
    """Mutant: the tree attention mask lets a node attend to its earlier siblings (same parent, lower index)."""

    def _node_visibility(self):
        parents = self._parent_ids.to(self._anc.device)
        idx = self._parent_ids.new_tensor(range(len(self._parents))).to(self._anc.device)
        sibling = (parents[:, None] == parents[None, :]) & (idx[None, :] < idx[:, None]) & (parents[:, None] >= 0)
        return self._anc | sibling  # BUG: should be self._anc


class CacheKeptRejectedTreeDecoder(TreeDecoder):
    """Mutant: rollback keeps every tree column up to the accepted depth, rejected branches included."""

    def _kept_nodes(self, accepted_node, retained):
        return self._depth[None] <= retained[:, None]  # BUG: should be self._anc[accepted_node]


def _factory(cls, rule: str):
    def make(target, draft, num_draft_tokens, tree=None, **options):
        shape = chain_shape(num_draft_tokens) if tree is None else parse_tree(tree)
        if tree_depth(shape) != num_draft_tokens:
            raise invalid_argument("num_draft_tokens", num_draft_tokens,
                                   f"the depth of tree {tree_label(shape)!r} ({tree_depth(shape)}): a tree round accepts 0..depth drafts")
        return cls(target, draft, shape, rule=rule, **options)

    return make


def _entry(name: str, cls, rule: str, declared: str, description: str, visible_when: str) -> DecoderSpec:
    return DecoderSpec(name, description, declared, visible_when, _factory(cls, rule), TREE_KERNELS[rule])


_KERNEL_VISIBLE = {  # where the exact enumerator shows each kernel mutant (specverify exact --tree)
    "residual_not_updated": "T > 0, a node with >= 2 children and a rejection before the last sibling (unigram3/3: TV .18)",
    "wor_verified_as_iid": "children drawn without replacement, >= 2 at a node (unigram3/3: TV .10)",
    "wor_draft_not_renormalized": "children drawn without replacement, >= 2 at a node (unigram3/3: TV .10)",
    "bonus_from_parent": "an accepted leaf with a context-dependent target (trigram3/2;2,2: TV .16)",
    "sorted_by_draft_prob": ">= 2 i.i.d. children of different draft probs (trigram3/2;2,2: TV .17)",
    "child_of_rejected": "depth >= 2 with >= 2 nodes on level 1 and a context-dependent target (trigram3/2;2,2: TV .10)",
}

_ENTRIES = [
    _entry("tree_reference", TreeDecoder, "iid_multi_draft", "exact",
           "Reference tree decoder: i.i.d. children, SpecInfer multi-step speculative sampling, one target pass with a tree mask.",
           "never (its law is the target's for every tree, config and batch)"),
    _entry("tree_wor_recursive_rejection", TreeDecoder, "wor_recursive_rejection", "exact",
           "Lossless: children without replacement, recursive rejection sampling (Jeon et al. 2024).", "never"),
    _entry("tree_topk_target_only", TreeDecoder, "topk_target_only", "exact",
           "Lossless: top-k children verified against the target only (EAGLE / SGLang).", "never"),
    *[_entry(f"tree_{rule}", TreeDecoder, rule, "biased", f"Tree kernel mutant: {TREE_RULES[rule].description}.", visible)
      for rule, visible in _KERNEL_VISIBLE.items()],
    _entry("tree_mask_sees_sibling", SiblingVisibleMaskTreeDecoder, "iid_multi_draft", "biased",
           "The tree attention mask lets a node attend to its earlier siblings (target and draft passes).",
           "a node with an earlier sibling whose children or bonus are drawn from its target probs: a context-dependent "
           "target (trigram table or transformer) and depth >= 2 (or a later sibling accepted at a leaf)"),
    _entry("tree_cache_kept_rejected", CacheKeptRejectedTreeDecoder, "iid_multi_draft", "biased",
           "Rollback keeps every tree column up to the accepted depth: a rejected branch's KV stays visible.",
           "T > 0, width >= 2, in the rounds after one whose accepted node is not the last column of its depth, with a "
           "target that reads more than the last token (trigram table or transformer)"),
]

TREE_DECODER_REGISTRY: dict[str, DecoderSpec] = {spec.name: spec for spec in _ENTRIES}


def tree_decoder_names(declared: str | None = None) -> list[str]:
    """Registered tree decoder names, optionally only those with ``declared`` ("exact" or "biased")."""
    return [n for n, s in TREE_DECODER_REGISTRY.items() if declared is None or s.declared == declared]
