"""Decoders for the exact-zoo rules that have no registered decoder mutant (softmax residual, shared uniform).

The diagnosis is tested end to end on the shipped transformers, where a rule's exact law cannot be
enumerated to draw rows from; these kernels plug each rule into the reference
:class:`~verifier.decoders.speculative.SpeculativeDecoder` (their law equals
:func:`verifier.exact.n_token_law` with the rule: tests/diagnose/test_zoo_diagnosis.py).  Test and
benchmark fixtures, not a registry: ``specverify`` suites keep using :mod:`verifier.decoders.mutants`.
"""

from __future__ import annotations

import torch

from verifier.decoders.kernels import _chain, _verify_chain_iv
from verifier.decoders.speculative import SpeculativeDecoder
from verifier.errors import invalid_argument

__all__ = ["ZOO_RULE_KERNELS", "zoo_rule_decoder"]


def softmax_residual_kernel(target_probs, draft_probs, draft_token_ids, generator):
    """The recovered token ~ softmax(max(0, p - q)) over every token (exp(0) = 1 for the zeros)."""
    def recover(p, q):
        return torch.softmax(torch.clamp(p - q, min=0.0), dim=-1)

    args = _verify_chain_iv(target_probs, draft_probs, draft_token_ids, generator)
    return _chain(*args, generator, recover_rule=recover)


def shared_uniform_kernel(target_probs, draft_probs, draft_token_ids, generator):
    """One uniform per round, reused for the acceptance test of every draft position."""
    def accept(tp, dp, ids, u):
        k = ids.shape[1]
        p = tp[:, :k].gather(-1, ids[..., None])[..., 0]
        q = dp.gather(-1, ids[..., None])[..., 0]
        return u[:, :1] * q < p

    args = _verify_chain_iv(target_probs, draft_probs, draft_token_ids, generator)
    return _chain(*args, generator, accept_rule=accept)


ZOO_RULE_KERNELS = {"softmax_residual": softmax_residual_kernel, "shared_uniform": shared_uniform_kernel}


def zoo_rule_decoder(rule: str, target, draft, num_draft_tokens: int, **options) -> SpeculativeDecoder:
    """The reference decoder with the verify kernel of zoo rule ``rule`` (a key of :data:`ZOO_RULE_KERNELS`).

    Raises
    ------
    InvalidArgumentError
        ``rule`` has no kernel here.
    """
    if rule not in ZOO_RULE_KERNELS:
        raise invalid_argument("rule", rule, f"one of {sorted(ZOO_RULE_KERNELS)}")
    return SpeculativeDecoder(target, draft, num_draft_tokens, kernel=ZOO_RULE_KERNELS[rule], name=rule, **options)
