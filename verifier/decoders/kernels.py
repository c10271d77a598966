"""Verification kernels: the verify step of speculative sampling as pure, batched functions.

Every kernel follows :class:`verifier.protocols.VerificationKernel`::

    kernel(target_probs  (batch, num_draft_tokens + 1, vocab) float64,
           draft_probs   (batch, num_draft_tokens, vocab)     float64,
           draft_token_ids (batch, num_draft_tokens)          int64,
           generator) -> emitted (batch, num_draft_tokens + 1) int64, -1 padded

Glossary: a draft token is *accepted* with probability ``min(1, p/q)``; the first position that
is not accepted is the *rejected position*; there the *recovered token* is drawn from the
*residual* ``max(0, p - q) / sum(max(0, p - q))``; when all k drafts are accepted the *bonus
token* is drawn from the target row ``k`` (the ``+ 1`` row).  :func:`verify_chain` is the
reference (Leviathan et al. 2023, Algorithm 1; Chen et al. 2023, Algorithm 2).  The other kernels
are mutants of the bug zoo, each one small deviation from it; ``KERNELS`` lists them by name.

Randomness: one ``torch.rand`` call of shape (batch, k) for the accept tests and one of shape
(batch,) for the recovered/bonus draw, both from ``generator`` -- the same generator state gives
the same output.
"""

from __future__ import annotations

from typing import Callable

import torch

from verifier.errors import invalid_argument
from verifier.protocols import PADDING_TOKEN_ID

__all__ = [
    "verify_chain",
    "sample_from_probs",
    "residual_or_target",
    "full_p_fallback_kernel",
    "greedy_acceptance_kernel",
    "deterministic_acceptance_kernel",
    "typical_acceptance_kernel",
    "bonus_wrong_position_kernel",
    "draft_suffix_kept_kernel",
    "batch_cross_talk_kernel",
    "degenerate_residual_div0_kernel",
    "accept_all_kernel",
    "residual_by_index_kernel",
    "synthetic_acceptance_kernel",
    "make_synthetic_acceptance_kernel",
    "KERNELS",
]

# Medusa's typical acceptance (Cai et al. 2024, 3.3.1): accept if p(x) > min(EPSILON, DELTA * exp(-H(p)))
TYPICAL_EPSILON = 0.09  # posterior threshold
TYPICAL_DELTA = 0.3  # posterior alpha


def sample_from_probs(weights: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF draw from non-negative (possibly unnormalised) weights.

    Parameters
    ----------
    weights : torch.Tensor, shape (batch, vocab), float64
        Non-negative; normalisation is implicit (the uniform is scaled by the row sum).
    uniforms : torch.Tensor, shape (batch,), float64 in [0, 1)

    Returns
    -------
    torch.Tensor, shape (batch,), int64
        A token with positive weight.  A NaN row gives token 0 (what an unguarded division by
        zero produces downstream; the reference never passes one).
    """
    cdf = torch.cumsum(weights, dim=-1)
    x = uniforms * cdf[:, -1]
    # first index whose cdf exceeds x (= number of cdf entries <= x; cdf is non-decreasing, so a
    # binary search gives the same index as counting); zero-weight tokens are skipped
    idx = torch.searchsorted(cdf, x[:, None], right=True)[:, 0]
    # x can round up to the row total (idx = vocab, or past trailing zero weights): fall back to
    # the last token with positive weight.  Only rows without x < total can need it (x < total
    # puts idx at or before the last positive weight), so it runs on those rows only; they also
    # catch NaN rows, which count no cdf entry <= NaN and so give token 0.
    over = ~(x < cdf[:, -1])
    if bool(over.any()):
        w, c = weights[over], cdf[over]
        count = (c <= x[over][:, None]).sum(dim=-1)
        last_positive = w.shape[-1] - 1 - torch.argmax((w.flip(-1) > 0).to(torch.int8), dim=-1)
        idx[over] = torch.minimum(count, last_positive)
    return idx


def residual_or_target(target_row: torch.Tensor, draft_row: torch.Tensor) -> torch.Tensor:
    """Unnormalised residual ``max(0, p - q)``, or ``p`` itself where the residual sums to 0.

    The fallback covers the degenerate residual: ``p != q`` but float rounding makes ``p <= q``
    everywhere, so ``max(0, p - q)`` is all zero (possible only when rows do not sum to exactly
    1).  Sampling from ``p`` there is what the exact rule does in the limit and never yields NaN.

    Parameters
    ----------
    target_row, draft_row : torch.Tensor, shape (batch, vocab), float64

    Returns
    -------
    torch.Tensor, shape (batch, vocab), float64, non-negative, every row with a positive sum.
    """
    residual = (target_row - draft_row).clamp_(min=0.0)  # one new array, clamped in place
    degenerate = residual.sum(dim=-1, keepdim=True) <= 0
    return torch.where(degenerate, target_row, residual) if bool(degenerate.any()) else residual


def _verify_chain_iv(target_probs, draft_probs, draft_token_ids, generator) -> tuple[torch.Tensor, ...]:
    if not isinstance(generator, torch.Generator):
        raise invalid_argument("generator", type(generator).__name__, "a torch.Generator")
    for name, t in (("target_probs", target_probs), ("draft_probs", draft_probs), ("draft_token_ids", draft_token_ids)):
        if not isinstance(t, torch.Tensor):
            raise invalid_argument(name, type(t).__name__, "a torch.Tensor")
    if draft_probs.ndim != 3 or draft_probs.shape[1] < 1:
        raise invalid_argument("draft_probs.shape", tuple(draft_probs.shape), "(batch, num_draft_tokens >= 1, vocab)")
    batch, k, vocab = draft_probs.shape
    if tuple(target_probs.shape) != (batch, k + 1, vocab):
        raise invalid_argument("target_probs.shape", tuple(target_probs.shape), f"(batch, num_draft_tokens + 1, vocab) = {(batch, k + 1, vocab)}")
    if tuple(draft_token_ids.shape) != (batch, k):
        raise invalid_argument("draft_token_ids.shape", tuple(draft_token_ids.shape), f"(batch, num_draft_tokens) = {(batch, k)}")
    if draft_token_ids.dtype not in (torch.int64, torch.int32) or (batch and (draft_token_ids.min() < 0 or draft_token_ids.max() >= vocab)):
        raise invalid_argument("draft_token_ids", "<out of range or not integer>", f"integer ids in 0..{vocab - 1}")
    return target_probs.to(torch.float64), draft_probs.to(torch.float64), draft_token_ids.long()


def _chain(
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor,
    draft_token_ids: torch.Tensor,
    generator: torch.Generator,
    *,
    accept_rule: Callable | None = None,
    count_rule: Callable | None = None,
    recover_rule: Callable | None = None,
    bonus_row: int | None = None,
    keep_suffix: bool = False,
) -> torch.Tensor:
    """The reference chain verification with optional replacement rules (for mutants)."""
    batch, k, _ = draft_probs.shape
    ids = draft_token_ids
    # p(d_j) and q(d_j) at each draft position j
    p_draft = target_probs[:, :k].gather(-1, ids[..., None])[..., 0]
    q_draft = draft_probs.gather(-1, ids[..., None])[..., 0]
    # accepted with probability min(1, p/q): u < p/q  <=>  u * q < p  (no division; p = 0 never accepted)
    u = torch.rand(batch, k, dtype=torch.float64, device=ids.device, generator=generator)
    accepted = accept_rule(target_probs, draft_probs, ids, u) if accept_rule else u * q_draft < p_draft
    # accepted prefix length = rejected position (k when every draft is accepted)
    num_accepted = count_rule(accepted) if count_rule else accepted.to(torch.int64).cumprod(dim=-1).sum(dim=-1)
    rows = torch.arange(batch, device=ids.device)
    pos = num_accepted.clamp(max=k - 1)
    p_rej, q_rej = target_probs[rows, pos], draft_probs[rows, pos]
    # recovered token ~ normalized residual at the rejected position; bonus ~ target row k
    weights_rej = recover_rule(p_rej, q_rej) if recover_rule else residual_or_target(p_rej, q_rej)
    weights_bonus = target_probs[:, k if bonus_row is None else bonus_row]
    all_accepted = (num_accepted == k)[:, None]
    final_token = sample_from_probs(torch.where(all_accepted, weights_bonus, weights_rej),
                                    torch.rand(batch, dtype=torch.float64, device=ids.device, generator=generator))
    emitted = torch.full((batch, k + 1), PADDING_TOKEN_ID, dtype=torch.int64, device=ids.device)
    cols = torch.arange(k + 1, device=ids.device)[None]
    emitted[:, :k] = torch.where(cols[:, :k] < num_accepted[:, None], ids, PADDING_TOKEN_ID)
    emitted[rows, num_accepted] = final_token
    if keep_suffix:  # mutant: the unverified drafts after the rejected position are emitted too
        emitted[:, :k] = torch.where(cols[:, :k] > num_accepted[:, None], ids, emitted[:, :k])
    return emitted


def verify_chain(target_probs: torch.Tensor, draft_probs: torch.Tensor, draft_token_ids: torch.Tensor,
                 generator: torch.Generator) -> torch.Tensor:
    """Reference speculative-sampling verification of a chain of draft tokens, batched.

    Parameters
    ----------
    target_probs : torch.Tensor, shape (batch, num_draft_tokens + 1, vocab)
        Processed target probs at each draft position; row ``num_draft_tokens`` (the ``+ 1``) is
        where the bonus token is drawn.  Cast to float64.
    draft_probs : torch.Tensor, shape (batch, num_draft_tokens, vocab)
        Processed draft probs the draft tokens were sampled from.  Cast to float64.
    draft_token_ids : torch.Tensor, shape (batch, num_draft_tokens), int64
    generator : torch.Generator
        The only source of randomness (on the tensors' device).

    Returns
    -------
    torch.Tensor, shape (batch, num_draft_tokens + 1), int64
        Per row: the accepted draft tokens, then the recovered token (at the rejected position)
        or the bonus token (all accepted), then ``-1`` padding.

    Raises
    ------
    InvalidArgumentError
        On mismatched shapes, ids outside the vocabulary or a non-generator.

    Notes
    -----
    Each row is independent.  Token j is accepted iff ``u_j * q(d_j) < p(d_j)`` with ``u_j ~ U[0, 1)``
    (probability ``min(1, p/q)``); the residual falls back to the target row where it sums to 0
    (:func:`residual_or_target`).  The output law of every row equals the target's
    (Leviathan et al. 2023, Theorem 3.5); ``verifier.exact.round_law`` gives it exactly.

    References
    ----------
    Leviathan, Kalman, Matias, "Fast Inference from Transformers via Speculative Decoding", ICML 2023, Algorithm 1.
    Chen et al., "Accelerating Large Language Model Decoding with Speculative Sampling", 2023, Algorithm 2.

    Examples
    --------
    >>> g = torch.Generator().manual_seed(0)
    >>> p = torch.tensor([[[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]], dtype=torch.float64)
    >>> q = torch.tensor([[[0.0, 1.0, 0.0]]], dtype=torch.float64)
    >>> verify_chain(p, q, torch.tensor([[1]]), g).tolist()
    [[1, 2]]
    """
    return _chain(*_verify_chain_iv(target_probs, draft_probs, draft_token_ids, generator), generator)


# ---------------------------------------------------------------------------------------------
# Kernel-level mutants.  Each is the reference with ONE rule replaced; docstrings say when the
# defect is visible at all.


def full_p_fallback_kernel(target_probs, draft_probs, draft_token_ids, generator):
    """Mutant: the recovered token is drawn from the target row p instead of the residual.

    Visible whenever a rejection can happen and the residual differs from p, i.e. p != q at a
    position with overlap: output law ``min(p,q) + (1 - sum min(p,q)) p`` (DESIGN: p=(.2,.5,.3),
    q=(.5,.3,.2) gives (.26,.45,.29)).  Invisible when q is one-hot on a token with p = 0.
    """
    args = _verify_chain_iv(target_probs, draft_probs, draft_token_ids, generator)
    return _chain(*args, generator, recover_rule=lambda p, q: p)


def greedy_acceptance_kernel(target_probs, draft_probs, draft_token_ids, generator):
    """Mutant: the T=0 rule at T>0 -- accept iff the draft token is the target argmax, else draw
    from p (exact rule ``greedy_acceptance``).  Visible whenever p is not one-hot (any T > 0);
    identical to the reference at T = 0.
    """
    def accept(p, q, ids, u):
        return ids == p[:, :-1].argmax(dim=-1)

    args = _verify_chain_iv(target_probs, draft_probs, draft_token_ids, generator)
    return _chain(*args, generator, accept_rule=accept, recover_rule=lambda p, q: p)


def deterministic_acceptance_kernel(target_probs, draft_probs, draft_token_ids, generator):
    """Mutant: accept iff ``p(d) >= q(d)`` (no coin), recover from the residual.  Visible
    whenever some drafted token has ``0 < p(d) < q(d)`` (it is then never accepted)."""
    def accept(p, q, ids, u):
        k = ids.shape[1]
        return p[:, :k].gather(-1, ids[..., None])[..., 0] >= q.gather(-1, ids[..., None])[..., 0]

    args = _verify_chain_iv(target_probs, draft_probs, draft_token_ids, generator)
    return _chain(*args, generator, accept_rule=accept)


def typical_acceptance_kernel(target_probs, draft_probs, draft_token_ids, generator):
    """Declared lossy: Medusa typical acceptance, ``p(d) > min(eps, delta * exp(-H(p)))`` with
    eps = 0.09, delta = 0.3; at the rejected position a token is drawn from p.  Biased whenever
    the threshold accepts tokens with p(d) < q(d) or rejects tokens p would keep -- in practice
    at every T > 0 (Cai et al. 2024, "Medusa", section 3.3.1).
    """
    def accept(p, q, ids, u):
        k = ids.shape[1]
        pk = p[:, :k]
        entropy = -(pk * torch.log(pk.clamp(min=1e-300))).sum(-1)
        threshold = torch.minimum(torch.full_like(entropy, TYPICAL_EPSILON), TYPICAL_DELTA * torch.exp(-entropy))
        return pk.gather(-1, ids[..., None])[..., 0] > threshold

    args = _verify_chain_iv(target_probs, draft_probs, draft_token_ids, generator)
    return _chain(*args, generator, accept_rule=accept, recover_rule=lambda p, q: p)


def bonus_wrong_position_kernel(target_probs, draft_probs, draft_token_ids, generator):
    """Mutant: the bonus token is drawn from target row k-1 (the last draft position) instead
    of row k.  Visible only when all k drafts are accepted, at emitted position k + 1 of that
    round, and only if the two target rows differ (context-dependent target)."""
    args = _verify_chain_iv(target_probs, draft_probs, draft_token_ids, generator)
    k = args[2].shape[1]
    return _chain(*args, generator, bonus_row=k - 1)


def draft_suffix_kept_kernel(target_probs, draft_probs, draft_token_ids, generator):
    """Mutant: after the recovered token, the unverified draft tokens after the rejected
    position are emitted too (exact rule ``draft_suffix_kept``).  Needs k >= 2 and a rejection
    before position k; visible from the token after the recovered one."""
    args = _verify_chain_iv(target_probs, draft_probs, draft_token_ids, generator)
    return _chain(*args, generator, keep_suffix=True)


def batch_cross_talk_kernel(target_probs, draft_probs, draft_token_ids, generator):
    """Mutant: row 0's accepted length is applied to every row of the batch.  Row 0 is
    unbiased; every other row is biased whenever rejections happen.  Needs batch >= 2."""
    def count(acc):
        n = acc.to(torch.int64).cumprod(dim=-1).sum(dim=-1)
        return n[:1].expand_as(n).clone()

    args = _verify_chain_iv(target_probs, draft_probs, draft_token_ids, generator)
    return _chain(*args, generator, count_rule=count)


def degenerate_residual_div0_kernel(target_probs, draft_probs, draft_token_ids, generator):
    """Mutant: normalises the residual by its sum without the degenerate-case fallback, so an
    all-zero residual becomes NaN and the recovered token is garbage (token 0).  Visible only
    when a rejection happens where ``max(0, p - q)`` sums to 0 -- rows that do not sum to
    exactly 1 (rounding, or unnormalised synthetic probs); with float64-normalised model probs
    this has probability ~1e-16, so drive the kernel with such rows to see it."""
    def recover(p, q):
        residual = torch.clamp(p - q, min=0.0)
        return residual / residual.sum(dim=-1, keepdim=True)

    args = _verify_chain_iv(target_probs, draft_probs, draft_token_ids, generator)
    return _chain(*args, generator, recover_rule=recover)


def accept_all_kernel(target_probs, draft_probs, draft_token_ids, generator):
    """Mutant: every draft token is accepted (no acceptance test: a uniform stuck at 0, a skipped check;
    exact rule ``accept_all``); the bonus token is drawn from target row k.  The emitted law is the
    draft's at drafted positions: visible whenever q != p (any T, first position)."""
    def accept(p, q, ids, u):
        return torch.ones_like(ids, dtype=torch.bool)

    args = _verify_chain_iv(target_probs, draft_probs, draft_token_ids, generator)
    return _chain(*args, generator, accept_rule=accept, recover_rule=lambda p, q: p)


def residual_by_index(target_row: torch.Tensor, draft_row: torch.Tensor) -> torch.Tensor:
    """llama.cpp's residual: ``max(0, p(t_i) - q(d_i))`` with t_i / d_i the i-th token of non-zero prob of
    the target / draft row in id order (exact rule ``residual_by_index``); p where it sums to 0.

    Parameters
    ----------
    target_row, draft_row : torch.Tensor, shape (batch, vocab), float64

    Returns
    -------
    torch.Tensor, shape (batch, vocab), unnormalised weights.
    """
    keep_p, keep_q = target_row > 0, draft_row > 0
    order = torch.argsort((~keep_q).to(torch.int8), dim=-1, stable=True)  # draft candidates first, in id order
    compact_q = torch.where(keep_q, draft_row, torch.zeros_like(draft_row)).gather(-1, order)
    index = (keep_p.to(torch.int64).cumsum(dim=-1) - 1).clamp(min=0)  # array index of each target candidate
    deficit = torch.where(keep_p, (target_row - compact_q.gather(-1, index)).clamp(min=0.0), torch.zeros_like(target_row))
    deficit = torch.where(deficit > 1e-9, deficit, torch.zeros_like(deficit))  # = diagnose.mechanisms.BY_INDEX_TOLERANCE
    empty = deficit.sum(dim=-1, keepdim=True) <= 0
    return torch.where(empty, target_row, deficit)


def residual_by_index_kernel(target_probs, draft_probs, draft_token_ids, generator):
    """Mutant: on rejection the draft prob at the same index of the id-sorted candidate arrays is subtracted
    (llama.cpp ``speculative.cpp``; exact rule ``residual_by_index``).  Visible only when the target and draft
    keep different token sets (top-k / top-p / min-p, or a zero prob), at the first position already;
    identical to the reference when every prob is positive."""
    args = _verify_chain_iv(target_probs, draft_probs, draft_token_ids, generator)
    return _chain(*args, generator, recover_rule=residual_by_index)


def make_synthetic_acceptance_kernel(rates=None) -> Callable:
    """Declared lossy: a "synthetic acceptance" benchmarking mode (vLLM ``rejection_sample_method = "synthetic"``;
    exact rule ``synthetic_acceptance``): draft j is accepted iff ``u_j < rates[j - 1]`` whatever p and q are
    (positions beyond ``rates`` take its last entry); the recovered token ~ residual (p where it is empty), the bonus
    from target row k.  Biased wherever the fixed rate is not the canonical ``min(1, p/q)`` (any T, first position).

    Parameters
    ----------
    rates : sequence of float in [0, 1], optional
        Conditional acceptance per draft position; default :data:`verifier.exact.rules.SYNTHETIC_RATES` (0.8, 0.6).

    Returns
    -------
    callable
        A :class:`~verifier.protocols.VerificationKernel` with ``name`` and ``settings`` (``{"rates": [...]}``).

    Raises
    ------
    InvalidArgumentError
        ``rates`` empty or holding a value outside [0, 1] (checked by the exact rule's factory).
    """
    from verifier.exact.rules import SYNTHETIC_RATES, synthetic_acceptance

    fixed = synthetic_acceptance(SYNTHETIC_RATES if rates is None else rates).position_acceptance
    values = [float(r) for r in fixed]

    def accept(p, q, ids, u):
        k = ids.shape[1]
        c = torch.tensor([values[min(j, len(values) - 1)] for j in range(k)], dtype=torch.float64, device=u.device)
        return u < c[None]  # BUG (by design): no p, no q

    def synthetic_acceptance_kernel(target_probs, draft_probs, draft_token_ids, generator):
        args = _verify_chain_iv(target_probs, draft_probs, draft_token_ids, generator)
        return _chain(*args, generator, accept_rule=accept)

    synthetic_acceptance_kernel.name = "synthetic_acceptance"
    synthetic_acceptance_kernel.settings = {"rates": [str(r) for r in fixed]}
    synthetic_acceptance_kernel.__doc__ = make_synthetic_acceptance_kernel.__doc__
    return synthetic_acceptance_kernel


synthetic_acceptance_kernel = make_synthetic_acceptance_kernel()  # at the default rates (the exact rule's RULES entry)


KERNELS: dict[str, Callable] = {
    "canonical": verify_chain,
    "full_p_fallback": full_p_fallback_kernel,
    "greedy_acceptance": greedy_acceptance_kernel,
    "deterministic_acceptance": deterministic_acceptance_kernel,
    "typical_acceptance": typical_acceptance_kernel,
    "bonus_wrong_position": bonus_wrong_position_kernel,
    "draft_suffix_kept": draft_suffix_kept_kernel,
    "batch_cross_talk": batch_cross_talk_kernel,
    "degenerate_residual_div0": degenerate_residual_div0_kernel,
    "accept_all": accept_all_kernel,
    "residual_by_index": residual_by_index_kernel,
    "synthetic_acceptance": synthetic_acceptance_kernel,
}
