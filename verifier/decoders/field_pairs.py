"""Decoders with two defects, one of them a mechanism the field reports (issue 26): the composites' mutants.

A real engine can draft greedily *and* read the recovered token one position late.  The diagnosis names such an engine
by a composite ``"A+B"`` of :func:`verifier.diagnose.family.composite_names`; :func:`field_pair_decoder` builds the
decoder with both defects from the single mutants' parts, each part where it lives in the reference decoder:

* the draft side (``_propose``): ``greedy_draft`` (:class:`~verifier.decoders.mutants.GreedyDraftSoftmaxQDecoder`),
  ``draft_accept_same_uniform`` (:class:`~verifier.decoders.field_mutants.DraftAcceptSameUniformDecoder`, whose
  kernel reuses the draft's uniform);
* the target rows (``_target_probs``): ``target_processed_first_only``
  (:class:`~verifier.decoders.field_mutants.TargetProcessedFirstOnlyDecoder`);
* the verify kernel: a mutant kernel of :data:`verifier.decoders.kernels.KERNELS`, ``recovered_one_late``
  (:func:`~verifier.decoders.field_mutants.late_recover_rules`), or, beside ``draft_accept_same_uniform`` (which owns
  the acceptance test), the recovered-token or bonus-row rule of ``full_p_fallback``, ``residual_by_index``,
  ``bonus_wrong_position`` or ``recovered_one_late``.

Each pair's exact law: :func:`verifier.exact.composite.composite_rule`; checked against these decoders in
``tests/diagnose/test_field_pairs.py``.  Pairs whose other part has no decoder kernel here (``softmax_residual`` and
``shared_uniform``: zoo rules whose kernels live in :mod:`verifier.diagnose.zoo_decoders`; ``recovered_one_late`` with
an acceptance change: not built yet) are refused, saying which are built (:data:`BUILT`).

Glossary: see :mod:`verifier.protocols`.
"""

from __future__ import annotations

from verifier.decoders import kernels as K
from verifier.decoders.field_mutants import (DraftAcceptSameUniformDecoder, TargetProcessedFirstOnlyDecoder,
                                             late_recover_rules, recovered_one_late_kernel)
from verifier.decoders.mutants import GreedyDraftSoftmaxQDecoder
from verifier.decoders.speculative import SpeculativeDecoder
from verifier.errors import invalid_argument

__all__ = ["field_pair_decoder", "field_pair_buildable", "BUILT"]

FIELD = ("recovered_one_late", "draft_accept_same_uniform", "target_processed_first_only")
# the recovered-token / bonus-row rule of a part, beside draft_accept_same_uniform's acceptance test (p: (batch, k + 1,
# vocab), q: (batch, k, vocab))
_BESIDE_SAME_UNIFORM = {
    "full_p_fallback": lambda p, q: {"recover_rule": lambda p_rej, q_rej: p_rej},
    "residual_by_index": lambda p, q: {"recover_rule": K.residual_by_index},
    "bonus_wrong_position": lambda p, q: {"bonus_row": q.shape[1] - 1},
    "recovered_one_late": late_recover_rules,
}
# not pair parts: exact kernels (block_verification, fresh_target_match: they change nothing, composite_rule refuses them)
_NO_PAIR_KERNELS = ("canonical", "block_verification", "fresh_target_match", "draft_suffix_kept", "batch_cross_talk",
                    "degenerate_residual_div0")
BUILT = ("target_processed_first_only with greedy_draft, draft_accept_same_uniform or a mutant kernel of "
         "verifier.decoders.kernels.KERNELS; draft_accept_same_uniform with " + ", ".join(_BESIDE_SAME_UNIFORM) +
         "; recovered_one_late with greedy_draft or bonus_wrong_position")  # the pairs field_pair_decoder builds


def field_pair_decoder(name: str, target, draft, num_draft_tokens: int = 4, **options) -> SpeculativeDecoder:
    """The decoder with both defects of the composite ``name`` (``"A+B"``, a part a field mechanism).

    Parameters
    ----------
    name : str
        ``"A+B"`` (either part order) with a pair of :data:`BUILT`, e.g. ``"greedy_draft+recovered_one_late"``.
    target, draft, num_draft_tokens, **options
        As for :func:`verifier.decoders.make_decoder` (``num_draft_tokens`` default 4).

    Returns
    -------
    SpeculativeDecoder
        Named ``name``; its law is ``composite_rule(A, B)``'s (:mod:`verifier.exact.composite`).

    Raises
    ------
    InvalidArgumentError
        ``name`` is not a pair this module builds (the message says which are).
    """
    recipe = _recipe(name)
    if recipe is None:
        raise invalid_argument("name", name, "a pair of defects A+B: " + BUILT, where="field_pair_decoder")
    decoder = recipe(target, draft, num_draft_tokens, **options)
    decoder.name = name
    return decoder


def field_pair_buildable(name: str) -> bool:
    """Whether :func:`field_pair_decoder` builds the composite ``name`` (``"A+B"``, either order)."""
    return _recipe(name) is not None


def _recipe(name: str):
    """The constructor ``(target, draft, k, **options) -> decoder`` of the pair ``name``, or None."""
    parts = tuple(name.split("+")) if isinstance(name, str) else ()
    if len(parts) != 2 or parts[0] == parts[1] or not set(parts) & set(FIELD):
        return None
    a, b = parts
    if "target_processed_first_only" in parts:  # the rows statement: the other part's decoder on those rows
        other = b if a == "target_processed_first_only" else a
        if other == "greedy_draft":
            return _mix(GreedyDraftSoftmaxQDecoder, TargetProcessedFirstOnlyDecoder)
        if other == "draft_accept_same_uniform":
            return _mix(DraftAcceptSameUniformDecoder, TargetProcessedFirstOnlyDecoder)
        if other in K.KERNELS and other not in _NO_PAIR_KERNELS:
            return lambda target, draft, k, **options: TargetProcessedFirstOnlyDecoder(target, draft, k, kernel=K.KERNELS[other], **options)
        return None
    if "draft_accept_same_uniform" in parts:
        rules = _BESIDE_SAME_UNIFORM.get(b if a == "draft_accept_same_uniform" else a)
        if rules is None:
            return None
        return type("DraftAcceptSameUniformPair", (DraftAcceptSameUniformDecoder,), {"_chain_options": lambda self, p, q: rules(p, q)})
    if set(parts) == {"greedy_draft", "recovered_one_late"}:
        return lambda target, draft, k, **options: GreedyDraftSoftmaxQDecoder(target, draft, k, kernel=recovered_one_late_kernel, **options)
    if set(parts) == {"bonus_wrong_position", "recovered_one_late"}:
        return lambda target, draft, k, **options: SpeculativeDecoder(target, draft, k, kernel=_late_bonus_early_kernel, **options)
    return None


def _late_bonus_early_kernel(target_probs, draft_probs, draft_token_ids, generator):
    """``recovered_one_late`` and ``bonus_wrong_position``: the recovered token from the next rows, the bonus from row k - 1."""
    p, q, ids = K._verify_chain_iv(target_probs, draft_probs, draft_token_ids, generator)
    return K._chain(p, q, ids, generator, bonus_row=q.shape[1] - 1, **late_recover_rules(p, q))


def _mix(draft_side: type, rows_side: type) -> type:
    """A decoder class with ``draft_side``'s draft (``_propose``, kernel) and ``rows_side``'s target rows."""
    return type(f"{draft_side.__name__}On{rows_side.__name__}", (draft_side, rows_side), {})
