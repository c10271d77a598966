"""The reference decoders' per-step work over the vocabulary, done in row blocks (internal).

:class:`verifier.decoders.SpeculativeDecoder` with the reference hooks and kernel, and
:class:`verifier.decoders.AncestralDecoder`, hand whole batches of float64 processed probs to
:func:`verifier.decoders.verify_chain` in the general path: (batch, k + 1, vocab) target probs plus
k stacked (batch, vocab) draft probs, i.e. ``(2k + 1) x batch x vocab x 8`` bytes (6.3 GiB at
batch 1024, V = 128k, k = 2), every one a fresh allocation the kernel must zero-fill page by page.
Here the same arithmetic runs on blocks of rows of about :data:`BLOCK_BYTES` each:

* :func:`propose` -- processed probs of a block, its inverse-CDF draw and q at the drawn token;
  nothing over V outlives the block.
* :func:`verify_round` -- per block, position by position: the processed target row only for the
  rows whose drafts so far were all accepted, the accept test, and the residual only for the rows
  that rejected there: q at the rejected position is recomputed from the draft's logits for those
  rows alone (the draft probs are never stored); the bonus row only for the rows that accepted all.

Bit-identity with the general path (same seed, same tokens; what ``tests/decoders`` and the golden
ci test pin): every operation over V is row-wise (softmax, top-k, top-p sort and cumsum, the
inverse-CDF cumsum and search) and PyTorch computes each row of them with the same instruction
sequence whatever the other rows, so a row's float64 probs, residual and CDF are the same bits in a
block as in the whole batch.  The one reduction whose order can depend on the batch -- a row sum
split across threads when it is the only output (PyTorch's two-pass reduction) -- is avoided by never
forming a one-row block out of a batch of two or more rows.  The uniforms are drawn in the general
path's order and shapes before the blocks (draft: (batch,) per draft token; verify: (batch, k), then
(batch,)).
"""

from __future__ import annotations

import torch

from verifier.decoders.kernels import residual_or_target, sample_from_probs
from verifier.protocols import PADDING_TOKEN_ID
from verifier.sampling import SamplingConfig, processed_probs

__all__ = ["BLOCK_BYTES", "block_rows", "propose", "verify_round"]

BLOCK_BYTES = 16 * 2**20  # float64 probs of one position per block: measured best of 1/4/16/64 MiB at V = 128k, 1 and 2 threads


def block_rows(width: int, vocab: int, batch: int) -> int:
    """Rows per block: ``width x vocab`` float64 values per row in about :data:`BLOCK_BYTES`, at least 2.
    Read at call time (tests shrink it)."""
    return max(2, min(batch, BLOCK_BYTES // max(1, 8 * width * vocab)))


def _blocks(batch: int, rows: int):
    """Slices covering ``range(batch)`` in steps of ``rows``; a one-row tail joins the block before it."""
    start = 0
    while start < batch:
        stop = start + rows
        if batch - stop == 1:
            stop = batch
        yield slice(start, min(stop, batch))
        start = stop


def propose(logits: torch.Tensor, sampling: SamplingConfig, seen: torch.Tensor | None,
            uniforms: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw one token per row from the processed probs of ``logits``; also return its probability.

    Parameters
    ----------
    logits : torch.Tensor, shape (batch, vocab), any float dtype
    sampling : SamplingConfig
    seen : bool torch.Tensor, shape (batch, vocab), or None
        Context-token mask (only with a repetition penalty).
    uniforms : torch.Tensor, shape (batch,), float64
        One uniform per row, as the general path draws it.

    Returns
    -------
    token : torch.Tensor, shape (batch,), int64
    prob : torch.Tensor, shape (batch,), float64
        The processed prob of ``token`` in its row (q(d) for a draft token).
    """
    batch, vocab = logits.shape
    token = torch.empty(batch, dtype=torch.int64, device=logits.device)
    prob = torch.empty(batch, dtype=torch.float64, device=logits.device)
    for blk in _blocks(batch, block_rows(1, vocab, batch)):
        q = processed_probs(logits[blk], sampling, None if seen is None else seen[blk])
        token[blk] = t = sample_from_probs(q, uniforms[blk])
        prob[blk] = q.gather(-1, t[:, None])[:, 0]
    return token, prob


def _rows_probs(logits: torch.Tensor, sampling: SamplingConfig, seen: torch.Tensor | None, rows: torch.Tensor,
                single_ok: bool) -> torch.Tensor:
    """Processed probs of ``logits[rows]`` (n, vocab); computed on two copies of the row when ``n == 1``
    unless ``single_ok`` (the general path had a one-row reduction there too): see the module docstring."""
    pad = rows.numel() == 1 and not single_ok
    idx = rows.repeat(2) if pad else rows
    q = processed_probs(logits[idx], sampling, None if seen is None else seen[idx])
    return q[:1] if pad else q


def verify_round(target_logits: torch.Tensor, draft_logits: list[torch.Tensor], draft_token_probs: torch.Tensor,
                 draft_token_ids: torch.Tensor, sampling: SamplingConfig, contexts: list[torch.Tensor] | None,
                 generator: torch.Generator) -> torch.Tensor:
    """:func:`verify_chain` on the target's and draft's logits, without materialising their probs.

    Parameters
    ----------
    target_logits : torch.Tensor, shape (batch, k + 1, vocab)
        Target logits at the k draft positions and the bonus position.
    draft_logits : list of k torch.Tensor, shape (batch, vocab)
        The logits each draft token was proposed from.
    draft_token_probs : torch.Tensor, shape (batch, k), float64
        q(d_j), as :func:`propose` returned it.
    draft_token_ids : torch.Tensor, shape (batch, k), int64
    sampling : SamplingConfig
    contexts : list of k + 1 bool tensors (batch, vocab), or None
        Context-token masks before d_1, after d_1, ..., after d_k (repetition penalty only).
    generator : torch.Generator

    Returns
    -------
    torch.Tensor, shape (batch, k + 1), int64
        As :func:`verify_chain`: accepted drafts, the recovered or bonus token, ``-1`` padding.
    """
    batch, k = draft_token_ids.shape
    vocab = target_logits.shape[-1]
    dev = draft_token_ids.device
    ids = draft_token_ids
    u = torch.rand(batch, k, dtype=torch.float64, device=dev, generator=generator)
    final_u = torch.rand(batch, dtype=torch.float64, device=dev, generator=generator)
    num_accepted = torch.zeros(batch, dtype=torch.int64, device=dev)
    final_token = torch.empty(batch, dtype=torch.int64, device=dev)
    for blk in _blocks(batch, block_rows(1, vocab, batch)):
        weights = torch.empty(blk.stop - blk.start, vocab, dtype=torch.float64, device=dev)
        active = torch.arange(blk.start, blk.stop, device=dev)  # rows whose drafts so far were all accepted
        for j in range(k + 1):
            # p at position j, only for the rows that reach it (the target row of a row past its
            # rejected position is never used); a target row in the general path is one of k + 1 >= 2
            # reductions, so a lone row here is computed twice over (single_ok=False)
            p = _rows_probs(target_logits[:, j], sampling, None if contexts is None else contexts[j], active, False)
            if j == k:  # every draft accepted: the bonus token is drawn from the target row k
                weights[active - blk.start] = p
                break
            accepted = u[active, j] * draft_token_probs[active, j] < p.gather(-1, ids[active, j, None])[:, 0]
            rejected = active[~accepted]
            if rejected.numel():  # recovered token ~ residual max(0, p - q) at the rejected position
                q = _rows_probs(draft_logits[j], sampling, None if contexts is None else contexts[j], rejected, batch == 1)
                weights[rejected - blk.start] = residual_or_target(p[~accepted], q)
            active = active[accepted]
            num_accepted[active] += 1
            if not active.numel():
                break
        final_token[blk] = sample_from_probs(weights, final_u[blk])
    emitted = torch.full((batch, k + 1), PADDING_TOKEN_ID, dtype=torch.int64, device=dev)
    cols = torch.arange(k + 1, device=dev)[None]
    emitted[:, :k] = torch.where(cols[:, :k] < num_accepted[:, None], ids, PADDING_TOKEN_ID)
    emitted[torch.arange(batch, device=dev), num_accepted] = final_token
    return emitted
