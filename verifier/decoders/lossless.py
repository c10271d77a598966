"""Lossless verification kernels other than the canonical one (decoder-level variants).

Both keep the target law exactly (the exact stage proves it on the standard cases: rules
``fresh_target_match`` and ``block_verification`` of :data:`verifier.exact.RULES`) but accept a
different number of drafts than the canonical ``min(1, p/q)`` rule -- which is why the harness's
bias verdict is about the output law only and acceptance is audited separately
(:mod:`verifier.runner.acceptance`).

Same protocol and shapes as :func:`verifier.decoders.kernels.verify_chain`::

    kernel(target_probs  (batch, num_draft_tokens + 1, vocab) float64,
           draft_probs   (batch, num_draft_tokens, vocab)     float64,
           draft_token_ids (batch, num_draft_tokens)          int64,
           generator) -> emitted (batch, num_draft_tokens + 1) int64, -1 padded

The accepted count is the number of emitted tokens before the last one (the recovered or bonus
token), which is what :class:`~verifier.decoders.SpeculativeDecoder` reports in ``last_stats``
(it caps the draft-agreeing prefix at ``emitted - 1``, so a recovered token that happens to equal
the next draft is not counted as accepted).
"""

from __future__ import annotations

import torch

from verifier.decoders.kernels import _verify_chain_iv, residual_or_target, sample_from_probs
from verifier.protocols import PADDING_TOKEN_ID

__all__ = ["fresh_target_match_kernel", "block_verification_kernel", "LOSSLESS_KERNELS"]


def _emit(draft_ids: torch.Tensor, num_accepted: torch.Tensor, final_token: torch.Tensor) -> torch.Tensor:
    batch, k = draft_ids.shape
    cols = torch.arange(k + 1, device=draft_ids.device)[None]
    emitted = torch.full((batch, k + 1), PADDING_TOKEN_ID, dtype=torch.int64, device=draft_ids.device)
    emitted[:, :k] = torch.where(cols[:, :k] < num_accepted[:, None], draft_ids, PADDING_TOKEN_ID)
    emitted[torch.arange(batch, device=draft_ids.device), num_accepted] = final_token
    return emitted


def fresh_target_match_kernel(target_probs, draft_probs, draft_token_ids, generator):
    """Accept draft ``d_j`` iff it equals a fresh target sample ``y_j ~ p_j``; on the first
    mismatch emit ``y_j`` and end the round; when all k match, the bonus token ~ ``p_{k+1}``.

    Lossless: position j emits ``y_j ~ p_j`` whatever the draft (accepted means ``d_j = y_j``).
    Acceptance probability ``sum_x q(x) p(x)`` per position, at most the canonical ``sum min(p, q)``
    (equal only when one of them is one-hot).  Several production engines verify this way.

    Randomness: one ``torch.rand`` (batch, k) for the fresh target samples, one (batch,) for the bonus.
    """
    target, draft, ids = _verify_chain_iv(target_probs, draft_probs, draft_token_ids, generator)
    batch, k, vocab = draft.shape
    u = torch.rand(batch, k, dtype=torch.float64, device=ids.device, generator=generator)
    fresh = sample_from_probs(target[:, :k].reshape(batch * k, vocab), u.reshape(-1)).reshape(batch, k)
    num_accepted = (fresh == ids).to(torch.int64).cumprod(dim=1).sum(dim=1)
    bonus = sample_from_probs(target[:, k], torch.rand(batch, dtype=torch.float64, device=ids.device, generator=generator))
    rows = torch.arange(batch, device=ids.device)
    final = torch.where(num_accepted == k, bonus, fresh[rows, num_accepted.clamp(max=k - 1)])
    return _emit(ids, num_accepted, final)


def block_verification_kernel(target_probs, draft_probs, draft_token_ids, generator):
    """Block verification (Sun et al. 2024, Algorithm 2): the draft block is verified jointly.

    With ``w_0 = 1``, ``w_i = min(1, w_{i-1} p_i(d_i) / q_i(d_i))``,
    ``r_i = sum_y max(0, w_i p_{i+1}(y) - q_{i+1}(y))``, ``h_i = r_i / (r_i + 1 - w_i)`` for
    ``i < k`` (1 where ``r_i + 1 - w_i = 0``) and ``h_k = w_k``: ``tau`` is the largest ``i`` with
    ``eta_i < h_i`` (0 if none); emit ``d_1..d_tau`` and then the bonus token ~ ``p_{k+1}`` (tau = k)
    or the recovered token ~ ``max(0, w_tau p_{tau+1} - q_{tau+1})`` (``p_{tau+1}`` where that is all
    zero, :func:`~verifier.decoders.kernels.residual_or_target`).  Lossless, and never fewer accepted
    drafts in expectation than token-wise verification (exact figures: rule ``block_verification``
    in :mod:`verifier.exact.block`).

    Randomness: one ``torch.rand`` (batch, k) for the eta's, one (batch,) for the final token.
    """
    target, draft, ids = _verify_chain_iv(target_probs, draft_probs, draft_token_ids, generator)
    batch, k, _ = draft.shape
    dev = ids.device
    p_draft = target[:, :k].gather(-1, ids[..., None])[..., 0]
    q_draft = draft.gather(-1, ids[..., None])[..., 0]
    w = [torch.ones(batch, dtype=torch.float64, device=dev)]
    for i in range(k):  # q_draft > 0: the draft sampled d_i from q
        w.append(torch.clamp(w[-1] * p_draft[:, i] / q_draft[:, i], max=1.0))
    weights = torch.stack(w, dim=1)  # (batch, k + 1): w_0..w_k
    h = []
    for i in range(1, k):
        r = torch.clamp(weights[:, i, None] * target[:, i] - draft[:, i], min=0.0).sum(dim=-1)
        denom = r + 1.0 - weights[:, i]
        h.append(torch.where(denom > 0, r / torch.where(denom > 0, denom, 1.0), 1.0))
    h.append(weights[:, k])
    h = torch.stack(h, dim=1)  # (batch, k): h_1..h_k
    eta = torch.rand(batch, k, dtype=torch.float64, device=dev, generator=generator)
    positions = torch.arange(1, k + 1, device=dev)[None]
    num_accepted = torch.where(eta < h, positions, 0).amax(dim=1)  # tau
    rows = torch.arange(batch, device=dev)
    pos = num_accepted.clamp(max=k - 1)
    recover = residual_or_target(weights[rows, pos][:, None] * target[rows, pos], draft[rows, pos])
    all_accepted = (num_accepted == k)[:, None]
    final = sample_from_probs(torch.where(all_accepted, target[:, k], recover),
                              torch.rand(batch, dtype=torch.float64, device=dev, generator=generator))
    return _emit(ids, num_accepted, final)


LOSSLESS_KERNELS = {
    "fresh_target_match": fresh_target_match_kernel,
    "block_verification": block_verification_kernel,
}
