"""Checks on what a decoder under test returns (shared by the runner, plugins and the pytest API).

A decoder that returns garbage is a *decoder error* (exit code 3), not a statistical finding:
these checks run on every batch before any sample is written or counted.
"""

from __future__ import annotations

import numpy as np

from verifier.errors import DecoderOutputError, invalid_argument
from verifier.protocols import PADDING_TOKEN_ID

NO_ROUND = -1  # first_round_accepted of a row in which no speculative round ran (same as verifier.runner.acceptance.NO_ROUND)

__all__ = ["check_row_temperatures", "check_row_prompts", "check_emitted_tokens", "check_decoder_stats", "check_stop_rule", "check_reported_logprobs", "same_rows_nats",
           "repeated_block", "REPLAY_NATS", "MAX_LOGPROB", "plugin_attribute"]

# the largest reported logprob accepted at an emitted token: log 1 = 0, plus the rounding of a float32 log-softmax
# whose largest entry comes out a few ulps above 0 (a value above it claims a probability > 1)
MAX_LOGPROB = 1e-6

# rows an i.i.d. sampler (any law) repeats with probability <= exp(-REPLAY_NATS) (about 1e-13) are replayed
REPLAY_NATS = 30.0
_PREFIX_CHECK = 32  # rows compared for every candidate block length before the whole block is
_FULL_CHECKS = 64  # candidate block lengths compared in full (low-entropy rows pass the prefix often)

_MISSING = object()


def check_row_temperatures(row_temperatures, num_samples: int, sampling) -> list[float] | None:
    """``generate(..., row_temperatures=)`` checked: one finite temperature > 0 per row, or None (the batch-composition
    axis's mixed levels, issue 29 kind 1; shared by the reference decoders and the engine adapters that take it).

    Raises
    ------
    InvalidArgumentError
        Not ``num_samples`` finite numbers > 0 (booleans refused), or ``sampling`` is greedy (T = 0 has no factor).
    """
    import math

    if row_temperatures is None:
        return None
    try:
        temps = [float(t) for t in row_temperatures]
    except (TypeError, ValueError):
        temps = []
    if (len(temps) != num_samples or any(isinstance(t, bool) for t in row_temperatures)
            or not all(math.isfinite(t) and t > 0 for t in temps)):
        raise invalid_argument("row_temperatures", row_temperatures, f"{num_samples} finite numbers > 0 (one per row)")
    if getattr(sampling, "greedy", False):
        raise invalid_argument("row_temperatures", row_temperatures, "None with a greedy sampling config (T = 0)")
    return temps


def check_row_prompts(row_prompts, num_samples: int, vocab_size: int | None = None,
                      min_len: int = 1) -> list[tuple[int, ...]] | None:
    """``generate(..., row_prompts=)`` checked: one prompt (a sequence of token ids) per row, or None (the
    batch-composition axis's mixed-prompts levels, issue 29 kind 1; shared by the reference decoders and the engine
    adapters that take it).

    Parameters
    ----------
    row_prompts : sequence of sequence of int, or None
        ``num_samples`` prompts, row ``r`` continues ``row_prompts[r]`` (in place of ``prompt_ids``).
    num_samples : int
    vocab_size : int, optional
        Ids must be in ``0..vocab_size - 1``; None: only ``>= 0`` is checked (an engine checks its own vocabulary).
    min_len : int, default 1
        The models' shortest prompt (a tabular model's context length).

    Returns
    -------
    list of tuple of int, or None

    Raises
    ------
    InvalidArgumentError
        Not a sequence of ``num_samples`` prompts, a prompt shorter than ``min_len``, an id that is not an integer
        (booleans refused) or outside the vocabulary; the message names ``row_prompts[r]``.
    """
    if row_prompts is None:
        return None
    if isinstance(row_prompts, (str, bytes)) or not hasattr(row_prompts, "__len__") or len(row_prompts) != num_samples:
        raise invalid_argument("row_prompts", row_prompts, f"{num_samples} prompts (one sequence of token ids per row)")
    out = []
    top = f"0..{vocab_size - 1}" if vocab_size is not None else ">= 0"
    for r, prompt in enumerate(row_prompts):
        try:
            ids = tuple(prompt)
        except TypeError:
            ids = None
        if (ids is None or len(ids) < min_len or any(isinstance(t, bool) or not isinstance(t, (int, np.integer))
                                                      or t < 0 or (vocab_size is not None and t >= vocab_size)
                                                      for t in ids)):
            raise invalid_argument(f"row_prompts[{r}]", prompt, f"at least {min_len} token id(s) in {top}")
        out.append(tuple(int(t) for t in ids))
    return out


def takes_generate_keyword(decoder, name: str) -> bool:
    """Whether ``decoder.generate`` takes the optional keyword ``name`` (``return_logprobs``, ``row_temperatures``): a
    decoder that states its optional keywords (an engine adapter's ``generate_keywords``,
    :class:`verifier.engines.decoder.EngineDecoder`) is taken at its word; otherwise its signature decides (the
    keyword itself or ``**kwargs``)."""
    import inspect

    declared = plugin_attribute(decoder, "generate_keywords", None)  # plugin code: a property that raises is exit 3
    if isinstance(declared, (set, frozenset, tuple, list)):
        return name in declared
    try:
        params = inspect.signature(decoder.generate).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def plugin_attribute(obj, name: str, default=None, *, decoder_name: str = "decoder"):
    """``getattr(obj, name, default)`` on plugin code: a property that raises is a decoder error.

    Raises
    ------
    DecoderError
        Reading the attribute raised (exit 3); the message names the property and the exception.
        ``KeyboardInterrupt`` passes through.
    """
    from verifier.errors import DecoderError

    try:
        return getattr(obj, name, default)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit included: plugin code, never a clean exit
        raise DecoderError(f"{decoder_name}: reading its `{name}` property raised {type(exc).__name__}: {exc}; "
                           f"allowed: a `{name}` attribute or property that returns a value") from exc


def check_stop_rule(stop_token_ids, max_tokens, *, max_new_tokens: int,
                    vocab_size: int | None = None) -> tuple[tuple[int, ...], int | None]:
    """Check a request's stop rule (issue 29, bug kind 5) and return it as ``(sorted ids, max_tokens)``.

    Parameters
    ----------
    stop_token_ids : sequence of int
        Token ids that end a row where they are emitted (the stop token itself is emitted, as EOS is), beside the
        model's EOS.  Empty: only EOS stops a row.
    max_tokens : int or None
        The request's length limit: a row holds at most ``max_tokens`` emitted tokens, padding after them.
        None: the limit is ``max_new_tokens`` (the width of the returned array).
    max_new_tokens : int
        Width of the returned array; ``max_tokens`` must not exceed it.
    vocab_size : int, optional
        When given, every stop id must be below it.

    Returns
    -------
    (tuple of int, int or None)

    Raises
    ------
    InvalidArgumentError
        A stop id that is not an integer >= 0 (or not below ``vocab_size``), a repeated id, or ``max_tokens`` not an
        integer in ``1..max_new_tokens``.
    """
    from verifier.errors import invalid_argument

    ids = stop_token_ids
    if isinstance(ids, (str, bytes)) or not hasattr(ids, "__iter__"):
        raise invalid_argument("stop_token_ids", ids, "a list of token ids (integers >= 0)")
    ids = list(ids)
    top = f"..{vocab_size - 1}" if vocab_size is not None else " or more"
    for t in ids:
        if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or t < 0 or (vocab_size is not None and t >= vocab_size):
            raise invalid_argument("stop_token_ids", ids, f"token ids in 0{top}")
    if len(set(int(t) for t in ids)) != len(ids):
        raise invalid_argument("stop_token_ids", ids, "each id at most once")
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, (int, np.integer))
                                   or not 1 <= max_tokens <= max_new_tokens):
        raise invalid_argument("max_tokens", max_tokens, f"None or an integer in 1..max_new_tokens={max_new_tokens}")
    return tuple(sorted(int(t) for t in ids)), (None if max_tokens is None else int(max_tokens))


def check_emitted_tokens(
    emitted,
    *,
    num_samples: int,
    max_new_tokens: int,
    vocab_size: int,
    eos_token_id: int | None,
    decoder_name: str = "decoder",
    stop_token_ids: tuple[int, ...] = (),
    max_tokens: int | None = None,
) -> np.ndarray:
    """Validate one ``Decoder.generate`` result and return it as ``int64``.

    Parameters
    ----------
    emitted : array-like, shape (num_samples, max_new_tokens), int64
        Emitted tokens, :data:`~verifier.protocols.PADDING_TOKEN_ID` (-1) after EOS.
    num_samples, max_new_tokens : int
        The shape that was asked for.
    vocab_size : int
        Valid token ids are ``0 .. vocab_size - 1``.
    eos_token_id : int or None
        The id that ends a row; ``None`` when the model has no EOS (then -1 never occurs).
    decoder_name : str
        Named in the error message.
    stop_token_ids : tuple of int, default ()
        The request's stop tokens (:func:`check_stop_rule`): padding may also follow one of them.  A token after a
        stop token is *not* an error here: it is the ``stop`` cell's finding (:mod:`verifier.runner.stop`).
    max_tokens : int or None, default None
        The request's length limit: padding may fill the columns from ``max_tokens`` on.  A token there is not an
        error here either (the ``stop`` cell's "max_tokens overshot").

    Returns
    -------
    np.ndarray, shape (num_samples, max_new_tokens), int64

    Raises
    ------
    DecoderOutputError
        Not an ndarray/tensor of integer dtype int64, wrong shape, an id outside
        ``[0, vocab_size)`` other than padding, padding before EOS (or a stop token, or column
        ``max_tokens``), or a token after EOS.  The message shows the first bad row.
    """
    arr = emitted
    if hasattr(arr, "detach") and hasattr(arr, "cpu"):  # torch.Tensor without importing torch
        device = getattr(getattr(arr, "device", None), "type", None)
        if device == "meta":  # shape and dtype only: there are no tokens to copy
            raise DecoderOutputError(f"{decoder_name} returned a tensor on the 'meta' device (shape {tuple(arr.shape)}, "
                                     "no data); allowed: a numpy.ndarray or a torch.Tensor on cpu or cuda, of int64")
        try:
            arr = arr.detach().cpu().numpy()
        except (RuntimeError, TypeError, ValueError, NotImplementedError) as exc:
            raise DecoderOutputError(f"{decoder_name} returned a {type(emitted).__name__} on device {device!r} that cannot be "
                                     f"copied to a numpy array ({type(exc).__name__}: {exc}); allowed: a numpy.ndarray or a "
                                     "torch.Tensor on cpu or cuda, of int64") from None
    if not isinstance(arr, np.ndarray):
        raise DecoderOutputError(f"{decoder_name} returned {type(emitted).__name__}; allowed: numpy.ndarray or torch.Tensor of int64")
    if arr.dtype != np.int64:
        raise DecoderOutputError(f"{decoder_name} returned dtype={arr.dtype}; allowed: int64 (floats, e.g. NaN-derived values, are invalid)")
    if arr.shape != (num_samples, max_new_tokens):
        raise DecoderOutputError(
            f"{decoder_name} returned shape={arr.shape}; allowed: (num_samples, max_new_tokens)=({num_samples}, {max_new_tokens})"
        )
    pad = arr == PADDING_TOKEN_ID
    bad_id = ~pad & ((arr < 0) | (arr >= vocab_size))
    if eos_token_id is None:
        after_eos = np.zeros_like(pad)
        pad_ok = ~pad
    else:
        is_eos = arr == eos_token_id
        seen_eos_before = np.cumsum(is_eos, axis=1) - is_eos > 0  # an EOS strictly earlier in the row
        after_eos = seen_eos_before & ~pad
        pad_ok = ~(pad & ~seen_eos_before)
    if stop_token_ids or max_tokens is not None:  # a request's stop rule: padding may follow a stop token or the limit
        stopped = np.isin(arr, np.asarray(stop_token_ids, dtype=np.int64))
        stopped_before = np.cumsum(stopped, axis=1) - stopped > 0
        if max_tokens is not None:
            stopped_before[:, max_tokens:] = True
        pad_ok = pad_ok | (pad & stopped_before)
    bad_pad = ~pad_ok
    bad = bad_id | after_eos | bad_pad
    if bad.any():
        row, col = (int(v) for v in np.argwhere(bad)[0])
        if bad_id[row, col]:
            why = f"token id {int(arr[row, col])} at position {col} is outside 0..{vocab_size - 1}"
        elif after_eos[row, col]:
            why = f"token {int(arr[row, col])} at position {col} comes after EOS (id {eos_token_id}); allowed: -1 padding"
        else:
            why = f"padding -1 at position {col} with no EOS before it" + (
                " (nor a stop token, nor the max_tokens limit)" if stop_token_ids or max_tokens is not None else "")
        raise DecoderOutputError(f"{decoder_name} returned invalid output in row {row}: {why}; row {row} = {arr[row].tolist()}")
    return arr


def check_reported_logprobs(logprobs, tokens: np.ndarray, *, decoder_name: str = "decoder") -> np.ndarray:
    """Validate the logprobs a decoder reports with its emitted tokens (``generate(..., return_logprobs=True)``).

    Parameters
    ----------
    logprobs : array-like, shape (num_samples, max_new_tokens), float
        ``logprobs[i, t]`` = natural log of the *processed* target prob (:func:`verifier.sampling.processed_probs`:
        after temperature, top-k / top-p and the repetition penalty) of emitted token ``tokens[i, t]`` given the
        prompt and ``tokens[i, :t]``.  Values at padding positions are ignored.
    tokens : np.ndarray, shape (num_samples, max_new_tokens), int64
        The checked emitted tokens of the same call (:func:`check_emitted_tokens`), -1 padded.
    decoder_name : str
        Named in the error message.

    Returns
    -------
    np.ndarray, shape (num_samples, max_new_tokens), float64
        The logprobs, NaN at padding positions.

    Raises
    ------
    DecoderOutputError
        Not an array of real numbers, another shape than ``tokens``, or, at an emitted token, NaN, +inf or a value
        above :data:`MAX_LOGPROB` (a probability above 1); ``-inf`` (probability 0) is allowed.  The message names
        the first bad row and position.
    """
    arr = logprobs
    if hasattr(arr, "detach") and hasattr(arr, "cpu"):  # torch.Tensor without importing torch
        try:
            arr = arr.detach().cpu()
            if callable(getattr(arr, "is_floating_point", None)) and arr.is_floating_point():
                arr = arr.double()  # bfloat16 has no numpy dtype; every float dtype widens to float64 exactly
            arr = arr.numpy()
        except (RuntimeError, TypeError, ValueError, NotImplementedError) as exc:
            raise DecoderOutputError(f"{decoder_name} returned logprobs that cannot be copied to a numpy array "
                                     f"({type(exc).__name__}: {exc}); allowed: a float numpy.ndarray or torch.Tensor") from None
    if not isinstance(arr, np.ndarray) or not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        what = f"dtype={arr.dtype}" if isinstance(arr, np.ndarray) else type(logprobs).__name__
        raise DecoderOutputError(f"{decoder_name} returned logprobs of {what}; allowed: a float array (num_samples, "
                                 "max_new_tokens) of natural-log processed target probs")
    if arr.shape != tokens.shape:
        raise DecoderOutputError(f"{decoder_name} returned logprobs of shape={arr.shape}; allowed: the emitted tokens' "
                                 f"shape {tokens.shape} (num_samples, max_new_tokens)")
    out = arr.astype(np.float64)
    live = tokens != PADDING_TOKEN_ID
    bad = live & (np.isnan(out) | (out > MAX_LOGPROB))  # +inf is > MAX_LOGPROB
    if bad.any():
        row, col = (int(v) for v in np.argwhere(bad)[0])
        raise DecoderOutputError(
            f"{decoder_name} returned logprob {float(out[row, col])!r} for emitted token {int(tokens[row, col])} at row {row}, "
            f"position {col}; allowed: a finite value <= 0 (<= {MAX_LOGPROB:g} for rounding) or -inf, the natural log "
            "of a probability")
    out[~live] = np.nan
    return out


def check_decoder_stats(first_round_accepted, accepted_counts, *, num_draft_tokens: int,
                        decoder_name: str = "decoder", num_samples: int | None = None) -> tuple[np.ndarray | None, np.ndarray]:
    """Validate the accepted-draft figures a decoder reports (``last_stats``) and return them as int64.

    A round accepts between 0 and ``num_draft_tokens`` drafts; a value outside that range (or not an
    integer) is invalid output, never clipped into range and counted as a finding.

    Parameters
    ----------
    first_round_accepted : array-like, shape (num_samples,), or None
        Accepted drafts in each row's first round; None when the decoder does not report it;
        ``NO_ROUND`` (-1) for a row in which no speculative round ran (no draft was proposed).
    accepted_counts : array-like, shape (num_rounds_total,), or None
        Accepted drafts in each round; None or empty when not reported.
    num_draft_tokens : int
        k of the call.
    decoder_name : str
        Named in the error message.
    num_samples : int, optional
        Rows of the call: ``first_round_accepted`` must then have shape ``(num_samples,)``.

    Returns
    -------
    (np.ndarray or None, np.ndarray)
        ``first_round_accepted`` (int64 or None) and ``accepted_counts`` (int64, possibly empty).

    Raises
    ------
    DecoderOutputError
        A non-integer or out-of-range value (the message shows the first bad entry), an
        ``accepted_counts`` that is not 1-D, or a ``first_round_accepted`` whose shape is not
        ``(num_samples,)`` (expected and received shape named).

    Examples
    --------
    >>> check_decoder_stats([0, 2], [2, 1], num_draft_tokens=2)[0].tolist()
    [0, 2]
    """
    out = []
    for name, values in (("first_round_accepted", first_round_accepted), ("accepted_counts", accepted_counts)):
        if values is None:
            out.append(None)
            continue
        if hasattr(values, "detach") and hasattr(values, "cpu"):
            values = values.detach().cpu().numpy()
        arr = np.asarray(values)
        expected_shape = (num_samples,) if name == "first_round_accepted" and num_samples is not None else None
        if (expected_shape is not None and arr.shape != expected_shape) or arr.ndim != 1:
            want = f"shape {expected_shape}" if expected_shape is not None else "a 1-D array"
            raise DecoderOutputError(f"{decoder_name} reported last_stats.{name} of shape {arr.shape}; allowed: {want} "
                                     f"(one entry per {'row' if name == 'first_round_accepted' else 'round'}), integers in "
                                     f"0..{num_draft_tokens}")
        if arr.dtype.kind not in "iub":  # floats must hold whole numbers; anything else is invalid
            try:
                f = arr.astype(np.float64)
            except (TypeError, ValueError):
                raise DecoderOutputError(f"{decoder_name} reported last_stats.{name} of dtype {arr.dtype}; "
                                         f"allowed: integers in 0..{num_draft_tokens}") from None
            whole = np.isfinite(f) & (f == np.round(f))
            if not whole.all():
                i = int(np.flatnonzero(~whole)[0])
                raise DecoderOutputError(f"{decoder_name} reported last_stats.{name} in row {i}: {arr[i]!r}; "
                                         f"allowed: integers in 0..{num_draft_tokens}")
            arr = f
        arr = arr.astype(np.int64)
        low = NO_ROUND if name == "first_round_accepted" else 0  # -1: no speculative round ran in that row
        bad = np.flatnonzero((arr < low) | (arr > num_draft_tokens))
        if bad.size:
            i = int(bad[0])
            raise DecoderOutputError(
                f"{decoder_name} reported impossible last_stats.{name} in row {i}: {int(arr[i])} accepted drafts with "
                f"num_draft_tokens={num_draft_tokens}; allowed: integers in {low}..{num_draft_tokens} "
                f"(row {i} = {int(arr[i])}; {bad.size} of {arr.size} entries out of range)")
        out.append(arr)
    fra, counts = out
    return fra, (counts if counts is not None else np.zeros(0, dtype=np.int64))


def same_rows_nats(counts) -> float:
    """``-log`` of the largest probability, over every law, that ``n = sum(counts)`` i.i.d. rows have
    exactly these row counts: the multinomial at the maximum-likelihood law ``counts / n``,
    ``n! / prod(c_i!) * prod((c_i / n) ** c_i)``.  0 for a constant block (greedy: never evidence)."""
    from math import lgamma

    counts = np.asarray(counts, dtype=np.int64)
    counts = counts[counts > 0]
    n = int(counts.sum())
    if n == 0:
        return 0.0
    log_p = lgamma(n + 1) - sum(lgamma(int(c) + 1) for c in counts) + float((counts * np.log(counts / n)).sum())
    return max(0.0, -log_p)


def repeated_block(rows: np.ndarray) -> tuple[int, int, float] | None:
    """Whether the first rows recur as identical consecutive blocks (a sample file concatenated with
    itself, a replayed batch): ``(block_rows m, repeats r, nats)`` when rows ``0..m-1`` are followed by
    ``r - 1`` identical copies and an i.i.d. sampler of any law produces that with probability
    ``<= exp(-nats)``, ``nats >= REPLAY_NATS``; else None.

    Each later block equals block 0 with probability at most ``exp(-same_rows_nats(block 0 counts))``
    whatever the law, independently; a block length is chosen among at most ``n / 2`` candidates, so
    ``log n`` is paid for the search.  Constant rows (greedy) give 0 nats and are never flagged.
    At most :data:`_FULL_CHECKS` candidate lengths (those whose first :data:`_PREFIX_CHECK` rows recur)
    are compared in full, so the check stays O(n) on low-entropy rows.

    Parameters
    ----------
    rows : np.ndarray, shape (n, max_new_tokens), int64
        Rows in the order they were produced.
    """
    rows = np.asarray(rows)
    n = len(rows)
    if n < 4:
        return None
    _, codes = np.unique(rows.reshape(n, -1), axis=0, return_inverse=True)
    codes = codes.reshape(-1)
    cand = np.flatnonzero(codes[1:n // 2 + 1] == codes[0]) + 1  # block lengths m <= n / 2
    for t in range(1, min(_PREFIX_CHECK, n // 2)):  # cheap filter: the first rows of the next block
        cand = cand[(t >= cand) | (codes[cand + t] == codes[t])]
    for m in cand[:_FULL_CHECKS].tolist():
        differ = np.flatnonzero(codes[m:] != codes[:n - m])
        r = (int(differ[0]) if len(differ) else n - m) // m + 1  # block 0 and its identical successors
        if r < 2:
            continue
        nats = (r - 1) * same_rows_nats(np.bincount(codes[:m])) - float(np.log(n))
        if nats >= REPLAY_NATS:
            return m, r, nats
    return None
