"""Mechanisms the field reports (issue 26): three decoder mutants, each one defect of a serving engine.

* ``recovered_one_late``: on a rejection at round position j the recovered token is drawn from the residual of the
  verify output's *next* rows ``p[j + 1], q[j + 1]`` (computed with the rejected draft token in the prefix): an
  off-by-one index into the (k + 1)-row target output.  At the last draft position (j = k - 1) the next row is the
  bonus row ``p[k]``, for which the draft computed no q: the mutant draws the recovered token from ``p[k]`` (the
  residual of ``p[k]`` against an all-zero q); where ``p[j + 1] == q[j + 1]`` it draws ``p[j + 1]``
  (:func:`verifier.decoders.kernels.residual_or_target`).
* ``draft_accept_same_uniform``: the draft token is drawn by inverse CDF from q in token-id order
  (:func:`verifier.decoders.kernels.sample_from_probs`) with a uniform u, and the acceptance test ``u q(x) < p(x)``
  reuses that u; the recovered token comes from an independent uniform (the kernel's own).
* ``target_processed_first_only``: the request's temperature / top-k / top-p are applied to the target's first
  verify row of each round only; rows 1..k (the later acceptance tests, residuals and the bonus token) are the
  unprocessed probs (``SamplingConfig()``: T = 1, no filter).  At T = 1 without filters it is the reference.

Each law is exact in :mod:`verifier.exact.field_rules` (the first two are rules of :data:`verifier.exact.RULES`; the
third is built for an unprocessed table by :func:`verifier.exact.field_rules.target_processed_first_only`), checked
against these decoders in ``tests/decoders/test_field_mutants.py``.  :data:`FIELD_DECODER_REGISTRY` maps the names to
:class:`~verifier.decoders.spec.DecoderSpec`; :func:`verifier.decoders.make_decoder` finds them.

Glossary: see :mod:`verifier.protocols`.
"""

from __future__ import annotations

import torch

from verifier.decoders import kernels as K
from verifier.decoders.kernels import residual_or_target, sample_from_probs
from verifier.decoders.spec import DecoderSpec
from verifier.decoders.speculative import SpeculativeDecoder
from verifier.sampling import SamplingConfig, processed_probs

__all__ = ["FIELD_DECODER_REGISTRY", "recovered_one_late_kernel", "late_recover_rules", "DraftAcceptSameUniformDecoder",
           "TargetProcessedFirstOnlyDecoder", "field_decoder_names"]

_UNPROCESSED = SamplingConfig()  # T = 1, no filter: what the later positions of a round get


def recovered_one_late_kernel(target_probs, draft_probs, draft_token_ids, generator):
    """Mutant: the recovered token at rejected position j is drawn from the residual of rows ``j + 1``.

    Parameters
    ----------
    target_probs : torch.Tensor, shape (batch, num_draft_tokens + 1, vocab)
    draft_probs : torch.Tensor, shape (batch, num_draft_tokens, vocab)
    draft_token_ids : torch.Tensor, shape (batch, num_draft_tokens), int64
    generator : torch.Generator

    Returns
    -------
    torch.Tensor, shape (batch, num_draft_tokens + 1), int64
        As :func:`verifier.decoders.verify_chain`: accepted drafts, the recovered or bonus token, -1 padding.

    Raises
    ------
    InvalidArgumentError
        As :func:`verifier.decoders.verify_chain`.

    Notes
    -----
    Rejected at j < k - 1: ``residual_or_target(p[j + 1], q[j + 1])``; at j = k - 1: ``p[k]`` (q taken as 0 there).
    Exact law: rule ``recovered_one_late`` of :data:`verifier.exact.RULES`.  Visible at T > 0 wherever a rejection
    happens and the next rows differ from the rejected position's (any context-dependent target; on a context-free
    pair only at the last draft position, where ``p[k] = p`` replaces the residual).
    """
    p, q, ids = K._verify_chain_iv(target_probs, draft_probs, draft_token_ids, generator)
    return K._chain(p, q, ids, generator, **late_recover_rules(p, q))


def late_recover_rules(p: torch.Tensor, q: torch.Tensor) -> dict:
    """``count_rule`` and ``recover_rule`` of :func:`verifier.decoders.kernels._chain` that draw the recovered token
    from the next position's rows (``recovered_one_late``; p: (batch, k + 1, vocab), q: (batch, k, vocab), float64):
    shared by :func:`recovered_one_late_kernel` and the pairs of :mod:`verifier.decoders.field_pairs`."""
    batch, k, _ = q.shape
    rows = torch.arange(batch, device=q.device)
    got: dict[str, torch.Tensor] = {}

    def count(accepted):
        got["n"] = accepted.to(torch.int64).cumprod(dim=-1).sum(dim=-1)  # the rejected position (k: none)
        return got["n"]

    def recover(p_rej, q_rej):
        nxt = (got["n"] + 1).clamp(max=k)  # BUG on purpose: the next position's rows
        q_next = torch.where((nxt < k)[:, None], q[rows, nxt.clamp(max=k - 1)], torch.zeros_like(q_rej))
        return residual_or_target(p[rows, nxt], q_next)

    return {"count_rule": count, "recover_rule": recover}


class DraftAcceptSameUniformDecoder(SpeculativeDecoder):
    """Speculative decoding whose acceptance test reuses the uniform that drew the draft token.

    Parameters
    ----------
    target, draft, num_draft_tokens, **options
        As :class:`~verifier.decoders.SpeculativeDecoder` (its kernel is this class's).

    Notes
    -----
    The draft token ``x`` is the inverse-CDF draw of the processed q in token-id order with uniform u; it is
    accepted iff ``u q(x) < p(x)``.  Exact law: rule ``draft_accept_same_uniform`` of :data:`verifier.exact.RULES`
    (``verifier.exact.field_rules.same_uniform_acceptance``).
    """

    def __init__(self, target, draft, num_draft_tokens: int = 4, **options) -> None:
        super().__init__(target, draft, num_draft_tokens, kernel=self._verify, **options)
        self._draft_uniforms: list[torch.Tensor] = []  # per draft position of the round: the uniform that drew it

    def _chain_options(self, p: torch.Tensor, q: torch.Tensor) -> dict:
        """Further replacement rules of :func:`verifier.decoders.kernels._chain` (none: a second defect's, in
        :mod:`verifier.decoders.field_pairs`)."""
        return {}

    def _propose(self, logits, sampling: SamplingConfig, seen, gen):
        q = processed_probs(logits, sampling, seen)
        u = torch.rand(q.shape[0], dtype=torch.float64, device=q.device, generator=gen)
        self._draft_uniforms.append(u)
        return sample_from_probs(q, u), q

    def _verify(self, target_probs, draft_probs, draft_token_ids, generator):
        """The reference chain verification with the draft's uniforms in the acceptance test."""
        k = draft_token_ids.shape[1]  # this round's k proposals (entries left by an interrupted call are dropped)
        u_draft, self._draft_uniforms = torch.stack(self._draft_uniforms[-k:], dim=1), []
        args = K._verify_chain_iv(target_probs, draft_probs, draft_token_ids, generator)

        def accept(p, q, ids, u):
            p_d = p[:, :ids.shape[1]].gather(-1, ids[..., None])[..., 0]
            return u_draft * q.gather(-1, ids[..., None])[..., 0] < p_d  # BUG on purpose: u_draft, not the fresh u

        return K._chain(*args, generator, accept_rule=accept, **self._chain_options(args[0], args[1]))


class TargetProcessedFirstOnlyDecoder(SpeculativeDecoder):
    """Speculative decoding whose target rows 1..k (later positions and the bonus row) are unprocessed.

    Notes
    -----
    Row 0 of each round's verify output is processed with the request's sampling config, rows 1..k with
    ``SamplingConfig()`` (T = 1, no top-k / top-p / penalty).  Exact law:
    :func:`verifier.exact.field_rules.target_processed_first_only` of the unprocessed table, applied to the processed
    one; the reference's at T = 1 without processing.
    """

    def _target_probs(self, logits, sampling: SamplingConfig, seen):
        processed = processed_probs(logits[:, :1], sampling, None if seen is None else seen[:, :1])
        return torch.cat([processed, processed_probs(logits[:, 1:], _UNPROCESSED)], dim=1)  # BUG on purpose: rows 1..k raw


def _spec(kernel):
    return lambda target, draft, k, **options: SpeculativeDecoder(target, draft, k, kernel=kernel, **options)


def _cls(cls):
    return lambda target, draft, k, **options: cls(target, draft, k, **options)


_ENTRIES = [
    DecoderSpec("recovered_one_late", "On rejection at position j the recovered token is drawn from the residual of "
                "the next position's rows (p[j+1], q[j+1], computed with the rejected draft in the prefix); at the last "
                "draft position from the bonus row p[k].", "biased",
                "T > 0 with rejections (any k): from the first position with a context-dependent target (bigram or "
                "richer); on a context-free target only at the round's last draft position (p[k] = p)",
                _spec(recovered_one_late_kernel), recovered_one_late_kernel),
    DecoderSpec("draft_accept_same_uniform", "The draft token's inverse-CDF uniform (token-id order) is reused by the "
                "acceptance test u < p(x)/q(x); recovered token from an independent uniform.", "biased",
                "T > 0 wherever a drafted token has p(x) < q(x) (any k, first position): low-id tokens are accepted "
                "too often, high-id ones too rarely", _cls(DraftAcceptSameUniformDecoder)),
    DecoderSpec("target_processed_first_only", "Temperature / top-k / top-p applied to the target's first verify row of "
                "each round only; later positions and the bonus token use the unprocessed target (T = 1, no filter).",
                "biased", "only when the request processes the target (T != 1, top_k < vocab, top_p < 1), from the "
                "second position of a round (k >= 1: the bonus token already); identical to the reference at T = 1 "
                "without processing", _cls(TargetProcessedFirstOnlyDecoder)),
]

FIELD_DECODER_REGISTRY: dict[str, DecoderSpec] = {spec.name: spec for spec in _ENTRIES}


def field_decoder_names() -> list[str]:
    """Names of the field-reported mutants."""
    return list(FIELD_DECODER_REGISTRY)
