"""Randomized-PIT terms of emitted rows straight from a torch target's float32 logits (issue 17).

The PIT cell needs, per emitted token ``x`` at position ``t`` of a row, only two numbers: the
target's processed prob ``p_t(x)`` and the mass ``F_t(x^-)`` of the tokens ranked before it (prob
descending, ties by smaller id; :mod:`verifier.stats.pit`).  The general path
(:meth:`verifier.runner.models.ReferenceModel.teacher_forced`) materialises float64 processed probs
``[rows, T, V]`` and ranks them: about 30 ns per logit on this CPU, 20+ min of CPU at V = 256k and
n = 100k.  Here, for a torch target sampled with a plain temperature (no top-k, top-p or
repetition penalty, not greedy):

* ranking by prob equals ranking by logit (softmax at ``T > 0`` is strictly increasing in the
  float32 logit), so ``F = sum_{l_v > l_x} e_v / Z`` with ``e_v = exp((l_v - max l) / T)``;
* tied logits have equal probs: the tokens tied with ``x`` and of smaller id add ``count x e_x``;
* ``e_v`` and the partial sums are computed over tiles that stay in cache -- float64 up to
  V = :data:`FLOAT32_ABOVE`, float32 above -- and the tile sums accumulate in float64;
  ``p_t(x) = e_x / Z`` is computed in float64 from ``x``'s own logit, so a token the float64
  softmax gives a positive prob never reads as a support violation.

The u's differ from the float64 path's by rounding: ~1e-16 with float64 tiles, < 1e-6 absolute with
float32 tiles (test ``tests/runner/test_pitscore.py``); the random V's are drawn in the same order.  Memory: the
logits of one row batch (:func:`verifier.runner.memory.rows_per_batch`) and one block's scratch.
"""

from __future__ import annotations

import os
from typing import Iterator

import numpy as np
import torch

from verifier.exact.tabular import TabularLM
from verifier.protocols import PADDING_TOKEN_ID
from verifier.runner.memory import rows_per_batch
from verifier.runner.prefixes import distinct_prefixes, forcing_inputs
from verifier.sampling import SamplingConfig

__all__ = ["fast_pit_applies", "pit_terms", "pit_values", "ROW_TILE", "BLOCK_WIDTH", "FLOAT32_ABOVE"]

ROW_TILE = 32  # rows x BLOCK_WIDTH float32 = 1 MiB of scratch (about L2): exp, mask and sums stay in cache
BLOCK_WIDTH = 8192  # tokens per tile; fixed, so each row's float32 partial sums are the same whatever the batch
FLOAT32_ABOVE = 65_536  # float64 tiles up to this vocabulary (the shipped and ci suites: p-values as the float64 path
# to ~1e-12 even at p ~ 1e-300), float32 above (the decoders' "auto" precision switches at the same V)
PIT_THREADS = min(2, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))
MAX_ROWS = 256  # rows per forward pass (as ReferenceModel.ROW_BATCH)


def fast_pit_applies(ref, sampling: SamplingConfig) -> bool:
    """Whether :func:`pit_terms` scores this target and sampling config (a torch model, plain
    temperature sampling); otherwise the float64 path of ``ReferenceModel.teacher_forced`` is used."""
    return (not isinstance(ref.model, TabularLM) and not sampling.greedy and sampling.top_k is None
            and (sampling.top_p is None or sampling.top_p >= 1.0)
            and (sampling.repetition_penalty is None or sampling.repetition_penalty == 1.0)
            and not sampling.counts_generated and not sampling.min_p  # issue 29 kind 3: float64 path
            and float(sampling.temperature) > 0)


def _block_terms(logits: torch.Tensor, ids: torch.Tensor, inv_t: float) -> tuple[np.ndarray, np.ndarray]:
    """(p_x, F(x^-)) float64 of each row of ``logits`` (rows, V) float32 at token ``ids`` (rows,).

    Works on tiles of at most :data:`ROW_TILE` rows x :data:`BLOCK_WIDTH` tokens (a scratch that
    stays in cache).  Every row is reduced in the same order whatever the number of rows (numpy's
    single-threaded pairwise sum per tile, tiles added in float64 in token order), so the
    values do not depend on the batch size, hence not on the memory available.
    """
    from verifier.errors import invalid_argument

    logits = logits.contiguous()
    rows, vocab = logits.shape
    lx = logits.gather(1, ids[:, None])  # (rows, 1)
    top = logits.amax(dim=1, keepdim=True)
    if not (torch.isfinite(top).all() and not torch.isnan(lx).any() and not torch.isposinf(lx).any()):
        raise invalid_argument("logits", "<NaN or +inf in the target logits>", "finite values or -inf")
    z = np.zeros(rows)
    above = np.zeros(rows)
    tied = np.zeros(rows, dtype=np.int64)
    lg, lxn, topn = logits.numpy(), lx.numpy(), top.numpy()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # 1 MiB tiles: intra-op threads only spin (measured 15x slower on the busy 2-core box)
    try:
        workers = min(PIT_THREADS, -(-rows // ROW_TILE))
        if workers <= 1:
            _tiles(lg, lxn, topn, inv_t, z, above, tied)
        else:  # disjoint row ranges, one per thread (numpy and torch release the GIL); each row's sums are unchanged
            from concurrent.futures import ThreadPoolExecutor

            step = -(-rows // (workers * ROW_TILE)) * ROW_TILE
            parts = [slice(a, min(a + step, rows)) for a in range(0, rows, step)]
            with ThreadPoolExecutor(len(parts)) as pool:
                list(pool.map(lambda sl: _tiles(lg[sl], lxn[sl], topn[sl], inv_t, z[sl], above[sl], tied[sl]), parts))
    finally:
        torch.set_num_threads(threads)
    ex = np.exp((lxn[:, 0].astype(np.float64) - topn[:, 0].astype(np.float64)) * inv_t)  # float64: stays > 0
    for r in np.flatnonzero(tied > 1):  # equal logits, equal probs: the smaller ids rank first
        x = int(ids[r])
        above[r] += np.count_nonzero(lg[r, :x] == lg[r, x]) * ex[r]
    return ex / z, above / z


def _tiles(lg: np.ndarray, lxn: np.ndarray, topn: np.ndarray, inv_t: float, z: np.ndarray, above: np.ndarray,
           tied: np.ndarray) -> None:
    """Add each tile's sums (total, above the emitted logit; float32 above V = FLOAT32_ABOVE, else float64)
    and tie counts to ``z``, ``above``, ``tied``."""
    rows, vocab = lg.shape
    width = min(BLOCK_WIDTH, vocab)
    buf = np.empty((ROW_TILE, width), dtype=np.float32 if vocab > FLOAT32_ABOVE else np.float64)
    mask = np.empty((ROW_TILE, width), dtype=bool)
    for r0 in range(0, rows, ROW_TILE):
        rr = min(ROW_TILE, rows - r0)
        for v0 in range(0, vocab, width):
            ww = min(width, vocab - v0)
            blk = lg[r0:r0 + rr, v0:v0 + ww]
            e = buf.reshape(-1)[:rr * ww].reshape(rr, ww)  # contiguous scratch of this tile
            m = mask.reshape(-1)[:rr * ww].reshape(rr, ww)
            np.subtract(blk, topn[r0:r0 + rr], out=e, dtype=e.dtype)  # in the tile dtype (float32 casts exactly to float64)
            if inv_t != 1.0:
                np.multiply(e, inv_t, out=e)
            torch.from_numpy(e).exp_()
            z[r0:r0 + rr] += e.sum(axis=1)
            np.greater(blk, lxn[r0:r0 + rr], out=m)
            np.multiply(e, m, out=e)
            above[r0:r0 + rr] += e.sum(axis=1)
            np.equal(blk, lxn[r0:r0 + rr], out=m)
            tied[r0:r0 + rr] += np.count_nonzero(m, axis=1)


def pit_terms(ref, prompt_ids: tuple[int, ...], tokens: np.ndarray, sampling: SamplingConfig
              ) -> Iterator[tuple[slice, np.ndarray, np.ndarray]]:
    """Yield ``(rows, p_x, cdf_below)`` per row batch of emitted rows.

    Parameters
    ----------
    ref : ReferenceModel
        A torch target (:func:`fast_pit_applies`).
    prompt_ids : tuple of int
    tokens : np.ndarray, shape (num_samples, max_new_tokens), int64, -1 after EOS
    sampling : SamplingConfig

    Yields
    ------
    rows : slice
    p_x : np.ndarray, shape (rows, max_new_tokens), float64
        Processed target prob of each emitted token (meaningless where the token is -1).
    cdf_below : np.ndarray, shape (rows, max_new_tokens), float64
        Target mass ranked before it (prob descending, ties by smaller id).
    """
    n, steps = tokens.shape
    vocab = ref.vocab_size
    prompt = torch.as_tensor(prompt_ids, dtype=torch.long)
    inv_t = 1.0 / float(sampling.temperature)
    # the batch's float32 logits (the model's own output) plus the model's transients of the same size
    budget = rows_per_batch(steps * vocab * 4 * 2)
    rows = min(budget, MAX_ROWS)
    known = distinct_prefixes(prompt, tokens, budget) if n > rows else None
    if known is not None:  # each distinct prefix through the model once (182 for 53,474 rows at T = 1, k = 1)
        uniq, inverse = known
        table = torch.cat([ref.float_logits(uniq[i:i + rows], keep=steps) for i in range(0, len(uniq), rows)])
    for start in range(0, n, rows):
        part, seqs = forcing_inputs(prompt, tokens[start:start + rows])
        if known is not None:
            logits = table[torch.as_tensor(inverse[start:start + rows])]
        else:
            logits = ref.float_logits(seqs, keep=steps)  # (rows, steps, vocab) float32
        px, below = _block_terms(logits.reshape(-1, vocab), part.reshape(-1), inv_t)
        del logits
        yield slice(start, start + len(part)), px.reshape(len(part), steps), below.reshape(len(part), steps)


def pit_values(ref, prompt_ids: tuple[int, ...], tokens: np.ndarray, sampling: SamplingConfig,
               rng: np.random.Generator) -> tuple[list[np.ndarray], list]:
    """Randomized-PIT values of every emitted token, row-major, as ``verifier.stats.pit.randomized_pit``
    gives them batch by batch (same order, same draws from ``rng``).

    Returns
    -------
    u_parts : list of np.ndarray, float64
        One array per row batch (concatenate for the cell).
    violations : list of SupportViolation
        Emitted tokens at target prob 0, per batch (merged by the cell).

    Raises
    ------
    InvalidArgumentError
        A token id outside ``0..vocab - 1`` (other than the padding -1).
    """
    from verifier.errors import invalid_argument
    from verifier.stats.pit import randomized_pit_from_cdf
    from verifier.stats.results import SupportViolation

    live_ids = tokens[tokens != PADDING_TOKEN_ID]
    if live_ids.size and (live_ids.min() < 0 or live_ids.max() >= ref.vocab_size):
        bad = live_ids[(live_ids < 0) | (live_ids >= ref.vocab_size)][0]
        raise invalid_argument("token_ids", int(bad), f"ids in 0..{ref.vocab_size - 1} or padding")
    u_parts, violations = [], []
    for rows, px, below in pit_terms(ref, prompt_ids, tokens, sampling):
        live = tokens[rows] != PADDING_TOKEN_ID
        ids, px, below = tokens[rows][live], px[live], below[live]
        zero = px == 0
        if zero.any():
            bad, cnt = np.unique(ids[zero], return_counts=True)
            violations.extend(SupportViolation(int(t), int(c)) for t, c in zip(bad, cnt))
        u_parts.append(randomized_pit_from_cdf(below[~zero], px[~zero], rng))
    return u_parts, violations
