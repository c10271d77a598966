"""The reference decoders' float32 fast path at large vocabularies (internal; issue 17 part 3).

:mod:`verifier.decoders._fused` keeps every processed prob in float64 so that the emitted tokens are
bit-identical to the general path; at V = 128k its float64 softmax and full-V float64 cumsum cost
~2.3x the tiny-compute model's forward passes.  Here the same round -- draft draw, accept test,
residual at the rejected position, bonus draw -- runs on float32 weights, and no row is normalised
or cumsummed over V.  Which path a decoder takes is its ``precision`` (:func:`resolve_precision`):
``"auto"`` is float64 up to :data:`AUTO_FLOAT32_ABOVE` vocabulary entries (every shipped and ci
suite, so their seeds give the same tokens as before) and float32 above.

The float32 law of a row
------------------------
Processed logits are computed in float32 (:func:`processed_logits`: repetition penalty,
temperature, top-k on the logits before the temperature -- the set float64 keeps --, top-p on float32 weights ``exp(x - max)`` cumulated and normalised in float64; the
tie and boundary rules of :func:`verifier.sampling.processed_probs`), then ``w = softmax(x)`` in
float32.  The row is cut into blocks of :data:`BLOCK` entries (the last one shorter when
``BLOCK`` does not divide V).  With ``S_b`` the block sums in the weights' dtype, ``T = sum_b S_b``
(float64) and ``C_b`` block b's float64 sum, the row's law is

    law(i) = (S_b / T) * (w_i / C_b)        for i in block b

:func:`inverse_cdf` draws exactly from it (up to float64 rounding): the block from a float64
cumsum over the block sums, the entry from a float64 cumsum inside that one block.  The accept test
uses law(d) for p(d) and q(d) (:func:`law_at`); the residual ``max(p - q, 0)`` is formed in float64
from the full laws (:func:`law_rows`) for the rejected rows only.  Speculative sampling is exact
for any pair of distributions, so the emitted law is this float32 law of the target; it differs
from the float64 processed probs by float32 rounding (TV ~1e-7 per row at V = 128k, measured in
``tests/decoders/test_fast32.py``).  Greedy (T = 0) is one-hot either way and goes to the float64 path.
"""

from __future__ import annotations

import math

import torch

from verifier.decoders import _fused
from verifier.decoders.kernels import residual_or_target
from verifier.errors import invalid_argument
from verifier.protocols import PADDING_TOKEN_ID
from verifier.sampling import SamplingConfig, check_logits, processed_probs

__all__ = ["AUTO_FLOAT32_ABOVE", "BLOCK", "PRECISIONS", "resolve_precision", "processed_logits", "block_sums",
           "inverse_cdf", "law_at", "law_rows", "propose", "verify_round"]

PRECISIONS = ("auto", "float64", "float32")
AUTO_FLOAT32_ABOVE = 65_536  # "auto": float64 up to this vocabulary (shipped, ci and Llama-2-size suites keep their tokens)
BLOCK = 256  # inverse-CDF block: one float64 cumsum over V / BLOCK block sums, one over a single block
ROW_BYTES = 32 * 2**20  # float32 weights of one position per row block (reused buffer): the draws' op overhead is per block
TOP_P_MARGIN = 5e-7  # x (1 + max |logit / T|): a bound on float32 rounding of a top-p mass (cast, / T, x - max, exp)
TOP_P_STAKE = 1e-5  # a token whose top-p membership rounding could flip takes float64's cut from this mass up
CACHE_BYTES = 2**20  # float32 logits per sub-block of the softmax and block sums (~L2; 1 MiB measured best of 0.5-2)


def resolve_precision(precision: str, vocab: int) -> str:
    """The precision a decoder runs at: ``"float64"`` or ``"float32"``.

    Parameters
    ----------
    precision : {"auto", "float64", "float32"}
        ``"auto"``: float64 when ``vocab <= AUTO_FLOAT32_ABOVE`` (65,536), else float32.
    vocab : int
        The models' vocabulary size (logits width).

    Raises
    ------
    InvalidArgumentError
        ``precision`` is not one of :data:`PRECISIONS`.
    """
    if not isinstance(precision, str) or precision not in PRECISIONS:
        raise invalid_argument("precision", precision, f"one of {', '.join(map(repr, PRECISIONS))} "
                               f"(auto = float64 up to V = {AUTO_FLOAT32_ABOVE:,}, float32 above)")
    if precision == "auto":
        return "float64" if vocab <= AUTO_FLOAT32_ABOVE else "float32"
    return precision


def processed_logits(logits: torch.Tensor, sampling: SamplingConfig, seen: torch.Tensor | None) -> torch.Tensor:
    """Float32 processed logits: ``softmax`` of the result is the float32 processed probs.

    Parameters
    ----------
    logits : torch.Tensor, shape (rows, vocab), any float dtype
    sampling : SamplingConfig
        Not greedy (T = 0 runs in float64).
    seen : bool torch.Tensor, shape (rows, vocab), or None
        Context-token mask; required when a repetition penalty is set.

    Returns
    -------
    torch.Tensor, shape (rows, vocab), float32
        Tokens outside top-k / top-p are ``-inf``.

    Raises
    ------
    InvalidArgumentError
        As :func:`verifier.sampling.processed_probs`: NaN or +inf, an all ``-inf`` row, or a
        repetition penalty without ``seen``.
    """
    x = logits if logits.dtype == torch.float32 else logits.to(torch.float32)
    if not math.isfinite(float(x.sum())):  # as processed_probs: one cheap pass, exact checks only when it overflows
        check_logits(x)
    return _process(x, sampling, seen, logits)


def _plain(sampling: SamplingConfig, vocab: int) -> bool:
    """True when processing leaves the logits as they are (T = 1, no top-k/top-p/penalty)."""
    return (sampling.temperature == 1 and (sampling.top_k is None or sampling.top_k >= vocab)
            and (sampling.top_p is None or sampling.top_p >= 1.0)
            and (sampling.repetition_penalty is None or sampling.repetition_penalty == 1.0))


def _process(x: torch.Tensor, sampling: SamplingConfig, seen: torch.Tensor | None,
             source: torch.Tensor | None = None) -> torch.Tensor:
    """:func:`processed_logits` without the finiteness checks (float32 ``x``; ``source``: the same rows as
    given, before the float32 cast, for the rows whose top-p cut float32 rounding could move)."""
    vocab = x.shape[-1]
    top_k = sampling.top_k is not None and sampling.top_k < vocab
    if sampling.repetition_penalty is not None and sampling.repetition_penalty != 1.0:
        if seen is None:
            raise invalid_argument("context_token_mask", None, "a bool mask (..., vocab) when repetition_penalty is set")
        r = float(sampling.repetition_penalty)
        if top_k:  # the top-k set from the float64 penalised logits: x / r in float32 can tie neighbouring logits
            x64 = x.to(torch.float64)
            x64 = torch.where(seen, torch.where(x64 > 0, x64 / r, x64 * r), x64)
            kth = torch.topk(x64, sampling.top_k, dim=-1).values[..., -1:]
            x, top_k = x64.masked_fill(x64 < kth, -math.inf).to(torch.float32), False
        else:
            x = torch.where(seen, torch.where(x > 0, x / r, x * r), x)
    if top_k:  # ties with the k-th logit are kept; chosen before the temperature (the same set: T > 0 keeps the
        # order, and float64's x / T never ties distinct float32 logits, while float32's can)
        kth = torch.topk(x, sampling.top_k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, -math.inf)
    if sampling.temperature != 1:
        x = x / float(sampling.temperature)
    if sampling.top_p is not None and sampling.top_p < 1.0:
        # unnormalised float32 weights, cumulated and normalised in float64: a float32 softmax's own
        # normalisation error (~1e-6 at V = 128k) would move the cut for a mass within 1e-6 of top_p
        weights = torch.exp(x - x.amax(dim=-1, keepdim=True))
        sorted_w = torch.sort(weights, dim=-1, descending=True).values.to(torch.float64)
        cum = torch.cumsum(sorted_w, dim=-1)
        keep_sorted = cum - sorted_w < sampling.top_p * cum[..., -1:]  # the last kept: the first reaching top_p
        keep_sorted[..., 0] = True
        threshold = torch.where(keep_sorted, sorted_w, math.inf).amin(dim=-1, keepdim=True).to(torch.float32)
        cut = x.masked_fill(weights < threshold, -math.inf)  # every token tied with the last kept stays
        # the mass before a token within float32 rounding of top_p (e.g. 0.5 + 0.3 at top_p 0.8): float32
        # and float64 may cut on either side of it, and a token of mass m moves (TV 0.2 on a tabular row);
        # rows where such a token holds >= TOP_P_STAKE take float64's set (processed_probs on the logits as
        # given); below it the move stays within the path's TV contract (1e-5 per row)
        spread = torch.where(torch.isfinite(x), x.abs(), 0.0).amax(dim=-1, keepdim=True).to(torch.float64)
        total = cum[..., -1:]
        near = ((cum - sorted_w) - sampling.top_p * total).abs() <= TOP_P_MARGIN * (1.0 + spread) * total
        rows = torch.nonzero((near & (sorted_w >= TOP_P_STAKE * total)).any(dim=-1)).flatten()
        if rows.numel():
            src = (x if source is None else source).index_select(0, rows)
            keep = processed_probs(src, sampling, None if seen is None else seen.index_select(0, rows)) > 0
            cut[rows] = x.index_select(0, rows).masked_fill(~keep, -math.inf)
        x = cut
    return x


def block_sums(weights: torch.Tensor) -> torch.Tensor:
    """``S_b``: sums of the :data:`BLOCK`-wide blocks of each row, in the weights' dtype, returned as float64.

    Parameters
    ----------
    weights : torch.Tensor, shape (rows, vocab), float32 or float64, non-negative, contiguous rows

    Returns
    -------
    torch.Tensor, shape (rows, ceil(vocab / BLOCK)), float64
    """
    rows, vocab = weights.shape
    full = vocab // BLOCK
    out = torch.empty(rows, -(-vocab // BLOCK), dtype=torch.float64, device=weights.device)
    if full:
        out[:, :full] = weights[:, :full * BLOCK].reshape(rows, full, BLOCK).sum(-1)
    if vocab % BLOCK:  # the short tail block
        out[:, full] = weights[:, full * BLOCK:].sum(-1)
    return out


def _block_of(weights: torch.Tensor, block: torch.Tensor) -> torch.Tensor:
    """Float64 entries of block ``block[r]`` of each row, (rows, BLOCK); past the vocabulary: 0."""
    vocab = weights.shape[1]
    cols = block[:, None] * BLOCK + torch.arange(BLOCK, device=weights.device)[None]
    inside = cols < vocab
    return torch.where(inside, weights.gather(1, cols.clamp(max=vocab - 1)).to(torch.float64), 0.0)


def _last_positive(values: torch.Tensor) -> torch.Tensor:
    """Index of the last positive entry of each row (0 for a row without one)."""
    flipped = (values.flip(-1) > 0).to(torch.int8)
    return values.shape[-1] - 1 - torch.argmax(flipped, dim=-1)


def _first_above(cumsum: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Per row, the first index whose ``cumsum`` entry exceeds ``x`` (the in-block search; zero weights skipped)."""
    return torch.searchsorted(cumsum, x[:, None], right=True)[:, 0]


def inverse_cdf(weights: torch.Tensor, uniforms: torch.Tensor, sums: torch.Tensor | None = None) -> torch.Tensor:
    """Draw one entry per row from the block law ``(S_b / T) (w_i / C_b)`` of the module docstring.

    Parameters
    ----------
    weights : torch.Tensor, shape (rows, vocab), float32 or float64, non-negative, every row with a positive entry
    uniforms : torch.Tensor, shape (rows,), float64 in [0, 1)
    sums : torch.Tensor, shape (rows, blocks), float64, optional
        :func:`block_sums` of ``weights`` when already computed.

    Returns
    -------
    torch.Tensor, shape (rows,), int64
        An entry with positive weight (zero-weight entries and blocks are never drawn).

    Notes
    -----
    x = u T falls in block b = the first whose cumulative block sum exceeds x (a zero block never
    does); y = (x - sum of the blocks before b) / S_b in [0, 1) is scaled to the block's own float64
    sum C_b and the entry is the first whose in-block cumsum exceeds y C_b.  Rounding that carries x
    or y C_b to the total falls back to the last positive block / entry.
    """
    if sums is None:
        sums = block_sums(weights)
    csum = torch.cumsum(sums, dim=-1)
    x = uniforms * csum[:, -1]
    blk = torch.searchsorted(csum, x[:, None], right=True)[:, 0]
    blk = torch.minimum(blk, _last_positive(sums))  # x rounded up to T: the last block with mass
    before = torch.where(blk > 0, csum.gather(1, (blk - 1).clamp(min=0)[:, None])[:, 0], 0.0)
    s_b = sums.gather(1, blk[:, None])[:, 0]
    inner = _block_of(weights, blk)
    cin = torch.cumsum(inner, dim=-1)
    y = ((x - before) / s_b).clamp(min=0.0) * cin[:, -1]
    idx = torch.minimum(_first_above(cin, y), _last_positive(inner))  # y C_b rounded up to C_b: the last positive entry
    return blk * BLOCK + idx


def law_at(weights: torch.Tensor, sums: torch.Tensor, token: torch.Tensor) -> torch.Tensor:
    """The block law at ``token`` of each row: ``(S_b / T) (w_token / C_b)``, float64, shape (rows,)."""
    blk = token // BLOCK
    inner = _block_of(weights, blk)
    c_b = inner.sum(-1)
    w = weights.gather(1, token[:, None])[:, 0].to(torch.float64)
    s_b = sums.gather(1, blk[:, None])[:, 0]
    return torch.where(w > 0, s_b / sums.sum(-1) * (w / c_b), 0.0)


def law_rows(weights: torch.Tensor, sums: torch.Tensor) -> torch.Tensor:
    """The full block law of each row, float64 (rows, vocab) (for the rejected rows' residual)."""
    rows, vocab = weights.shape
    if vocab % BLOCK == 0:  # one float64 copy, its block sums, one scaling pass
        w = weights.to(torch.float64, copy=True).view(rows, vocab // BLOCK, BLOCK)
        c_b = w.sum(-1, keepdim=True)
        scale = torch.where(c_b > 0, (sums / sums.sum(-1, keepdim=True))[..., None] / c_b, 0.0)
        return w.mul_(scale).view(rows, vocab)
    w = weights.to(torch.float64)
    pad = -vocab % BLOCK
    c_b = torch.nn.functional.pad(w, (0, pad)).view(rows, -1, BLOCK).sum(-1)
    scale = torch.where(c_b > 0, sums / sums.sum(-1, keepdim=True) / c_b, 0.0)
    return w * scale.repeat_interleave(BLOCK, dim=1)[:, :vocab]


def _weights(logits: torch.Tensor, sampling: SamplingConfig, seen: torch.Tensor | None,
             rows: torch.Tensor | None = None, out: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Float32 processed probs of ``logits`` (or of ``logits[rows]``), (n, vocab), and their block sums.

    The softmax runs on sub-blocks of about :data:`CACHE_BYTES` (the row copy and the softmax's
    passes of a sub-block read what the one before just wrote, from cache).  NaN, +inf and all
    ``-inf`` rows show as a non-finite or zero row total; only then are the raw logits checked.
    ``out`` (at least n rows, float32) is reused for the result: a fresh multi-MiB tensor per call
    costs about as much as the softmax (measured 3.8 vs 1.8 ns per entry at V = 128k).
    """
    n = logits.shape[0] if rows is None else rows.numel()
    vocab = logits.shape[1]
    w = torch.empty(n, vocab, dtype=torch.float32, device=logits.device) if out is None else out[:n]
    step = max(1, CACHE_BYTES // (4 * vocab))
    plain = _plain(sampling, vocab)
    buf = torch.empty(min(n, step), vocab, dtype=logits.dtype, device=logits.device) if rows is not None else None
    whole = vocab % BLOCK == 0  # 32,000, 128,256, 152,064, 256,000: block sums of each sub-block while it is in cache
    sums32 = torch.empty(n, vocab // BLOCK, dtype=torch.float32, device=logits.device) if whole else None
    for start in range(0, n, step):
        part = slice(start, min(n, start + step))
        x = logits[part] if rows is None else torch.index_select(logits, 0, rows[part], out=buf[:part.stop - start])
        source = x
        if x.dtype != torch.float32:
            x = x.to(torch.float32)
        if not plain:
            x = _process(x, sampling, None if seen is None else seen[part] if rows is None else seen.index_select(0, rows[part]),
                         source)
        torch.softmax(x, dim=-1, out=w[part])
        if whole:
            torch.sum(w[part].view(-1, vocab // BLOCK, BLOCK), dim=-1, out=sums32[part])
    sums = sums32.to(torch.float64) if whole else block_sums(w)
    total = sums.sum(-1)
    if not bool((total > 0).all()) or not math.isfinite(float(total.sum())):
        check_logits(logits if rows is None else logits.index_select(0, rows))
        raise invalid_argument("logits", "<a row without positive processed probs>", "finite logits")  # not reached
    return w, sums


def _rows(batch: int, vocab: int) -> int:
    return max(2, min(batch, ROW_BYTES // max(1, 4 * vocab)))


def propose(logits: torch.Tensor, sampling: SamplingConfig, seen: torch.Tensor | None,
            uniforms: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """As :func:`verifier.decoders._fused.propose`, on the float32 law: token ~ q and q(token) (float64)."""
    if sampling.greedy:
        return _fused.propose(logits, sampling, seen, uniforms)
    batch, vocab = logits.shape
    token = torch.empty(batch, dtype=torch.int64, device=logits.device)
    prob = torch.empty(batch, dtype=torch.float64, device=logits.device)
    rows = _rows(batch, vocab)
    buf = torch.empty(rows + 1, vocab, dtype=torch.float32, device=logits.device)  # + 1: a one-row tail joins a block
    for blk in _fused._blocks(batch, rows):
        w, sums = _weights(logits[blk], sampling, None if seen is None else seen[blk], out=buf)
        token[blk] = t = inverse_cdf(w, uniforms[blk], sums)
        prob[blk] = law_at(w, sums, t)
    return token, prob


def verify_round(target_logits: torch.Tensor, draft_logits: list[torch.Tensor], draft_token_probs: torch.Tensor,
                 draft_token_ids: torch.Tensor, sampling: SamplingConfig, contexts: list[torch.Tensor] | None,
                 generator: torch.Generator) -> torch.Tensor:
    """As :func:`verifier.decoders._fused.verify_round` (same arguments, same uniforms), on the float32 laws.

    Per row block and position j, for the rows whose drafts so far were all accepted: the target's
    float32 weights, p(d_j) by :func:`law_at`, the accept test ``u q(d_j) < p(d_j)``; for the rows
    rejecting at j the residual ``max(p - q, 0)`` in float64 from :func:`law_rows` of both; for the
    rows that accepted all k the bonus drawn from the target's weights at row k.

    Returns
    -------
    torch.Tensor, shape (batch, k + 1), int64
        Accepted drafts, then the recovered or bonus token, ``-1`` padding.
    """
    if sampling.greedy:
        return _fused.verify_round(target_logits, draft_logits, draft_token_probs, draft_token_ids, sampling,
                                   contexts, generator)
    batch, k = draft_token_ids.shape
    vocab = target_logits.shape[-1]
    dev = draft_token_ids.device
    ids = draft_token_ids
    u = torch.rand(batch, k, dtype=torch.float64, device=dev, generator=generator)
    final_u = torch.rand(batch, dtype=torch.float64, device=dev, generator=generator)
    num_accepted = torch.zeros(batch, dtype=torch.int64, device=dev)
    final_token = torch.empty(batch, dtype=torch.int64, device=dev)
    rows = _rows(batch, vocab)
    buf = torch.empty(rows + 1, vocab, dtype=torch.float32, device=dev)  # the target's weights, reused at every position
    for blk in _fused._blocks(batch, rows):
        active = torch.arange(blk.start, blk.stop, device=dev)  # rows whose drafts so far were all accepted
        for j in range(k + 1):
            if active.numel() == blk.stop - blk.start:  # every row of the block: a view (softmax reads the rows in place)
                w, sums = _weights(target_logits[blk, j], sampling, None if contexts is None else contexts[j][blk], out=buf)
            else:
                w, sums = _weights(target_logits[:, j], sampling, None if contexts is None else contexts[j], active, out=buf)
            if j == k:  # every draft accepted: the bonus token ~ the target's law at row k
                final_token[active] = inverse_cdf(w, final_u[active], sums)
                break
            accepted = u[active, j] * draft_token_probs[active, j] < law_at(w, sums, ids[active, j])
            rejected = active[~accepted]
            if rejected.numel():  # recovered token ~ residual max(0, p - q) at the rejected position
                p = law_rows(w[~accepted], sums[~accepted])
                wq, sq = _weights(draft_logits[j], sampling, None if contexts is None else contexts[j], rejected)
                final_token[rejected] = inverse_cdf(residual_or_target(p, law_rows(wq, sq)), final_u[rejected])
            active = active[accepted]
            num_accepted[active] += 1
            if not active.numel():
                break
    emitted = torch.full((batch, k + 1), PADDING_TOKEN_ID, dtype=torch.int64, device=dev)
    cols = torch.arange(k + 1, device=dev)[None]
    emitted[:, :k] = torch.where(cols[:, :k] < num_accepted[:, None], ids, PADDING_TOKEN_ID)
    emitted[torch.arange(batch, device=dev), num_accepted] = final_token
    return emitted
