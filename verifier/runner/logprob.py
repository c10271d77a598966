"""The ``logprob`` test: are the logprobs a decoder reports with speculation on the target's? (issue 29, kind 4)

Engines that return logprobs with speculation on have returned ``0.0`` for every token, the right value for the first
token of a step only, or the draft's row for accepted drafts (the zoo: :mod:`verifier.decoders.logprob_mutants`).
The tokens are right, so every distribution cell passes; the reported numbers are not.

One cell per sample set, opted into with ``tests = [..., "logprob"]``: the decoder is called with
``generate(..., return_logprobs=True)`` (:func:`takes_return_logprobs` checks it takes the keyword) and its
``(tokens, logprobs)`` are stored beside the chunk; ``logprobs[i, t]`` must be the natural log of the *processed*
target prob of ``tokens[i, t]`` given the prompt and ``tokens[i, :t]`` (after temperature, top-k / top-p and the
repetition penalty; an engine in a raw logprobs mode -- vLLM's default ``raw_logprobs`` -- reports another number).

``logprob``
    Deterministic, no alpha: every emitted token's reported value is compared with the runner's reference scorer at
    the same prefix (:meth:`~verifier.runner.models.ReferenceModel.teacher_forced`, float64 processed probs -- the
    "speculation off" value).  A token with ``|reported - reference| > tol`` (or one infinite and the other not) is
    wrong; one wrong token is BIAS (p = 0, the row, position, token and both values in the reason).  Its effect is
    the share of wrong tokens, its MDE the smallest share that the set's ``n`` tokens show at least once with the
    suite's power, ``1 - (1 - power) ** (1 / n)`` (tokens of one row are not independent: the row figures are
    beside it).  ``extra["positions"]`` gives per position the emitted tokens, wrong tokens, max and 50/99 %
    quantiles of ``|reported - reference|``; ``extra["defect"]`` which reporting defect fits
    (:func:`classify_defect`).
Tolerance
    The numeric floor of the reference's arithmetic, by the target's dtype (:data:`LOGPROB_TOL`): the decoder and
    the scorer run the same weights on different batch shapes (an incremental KV cache vs one teacher-forced pass),
    which moved the shipped float32 models' values by at most 1.1e-5 (the tolerance is 1e-4); a bfloat16 log-softmax
    moves by ~1e-2 (5e-2 allowed, not measured here).  The tolerance is recorded in the cell.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from verifier.protocols import PADDING_TOKEN_ID
from verifier.runner.analysis import CellResult

__all__ = ["LOGPROB_TOL", "DEFECTS", "logprob_tolerance", "takes_return_logprobs", "reference_logprobs", "wrong_tokens",
           "classify_defect", "logprob_cell"]

# absolute tolerance in nats on |reported - reference| by the target's dtype: the floor of recomputing one processed
# log-prob with another batch shape (float64 tables: rounding only; float32: at most 1.1e-5 measured on the shipped
# models -- reference decoder vs the teacher-forced reference, 2 x 2,775 tokens at T = 1 and T = 0.7 top-k 8 -- so
# about 10x margin; half precision: logits rounded to 8 (bf16) or 11 (fp16) bits, not measured here)
LOGPROB_TOL = {"float64": 1e-9, "float32": 1e-4, "float16": 5e-2, "bfloat16": 5e-2}
# the reporting defects the classifier names (the zoo's, verifier.decoders.logprob_mutants) and what each says
DEFECTS = {"zero": "logprob 0.0 (probability 1) reported for every token",
           "first_only": "right only at the first token of each round; the round's later tokens repeat its value",
           "draft_row": "the draft's log q reported at accepted draft tokens (recovered and bonus tokens right)"}
ACCEPTED, RECOVERED, BONUS = 0, 1, 2  # verifier.protocols.ORIGIN_CODES


def logprob_tolerance(model: Any) -> float:
    """:data:`LOGPROB_TOL` for a target: a TabularLM (float64) or a torch module (its first parameter's dtype)."""
    params = getattr(model, "parameters", None)
    dtype = "float64"
    if callable(params):
        first = next(iter(params()), None)
        dtype = str(getattr(first, "dtype", "torch.float64")).replace("torch.", "")
    return LOGPROB_TOL.get(dtype, LOGPROB_TOL["float16"])


def takes_return_logprobs(decoder: Any) -> bool:
    """Whether ``decoder.generate`` takes the ``return_logprobs`` keyword (or ``**kwargs``); a decoder that states its optional
    keywords (an engine adapter's ``generate_keywords``, :class:`verifier.engines.decoder.EngineDecoder`) is taken at
    its word."""
    from verifier.validation import takes_generate_keyword

    return takes_generate_keyword(decoder, "return_logprobs")


def reference_logprobs(reference: Any, prompt_ids, tokens: np.ndarray, sampling) -> np.ndarray:
    """log of the processed prob of every emitted token under ``reference`` (a ReferenceModel), NaN at padding.

    Returns
    -------
    np.ndarray, shape (rows, max_new_tokens), float64 (-inf where the reference gives the token probability 0)
    """
    out = np.full(tokens.shape, np.nan)
    for rows, probs in reference.teacher_forced(tuple(prompt_ids), tokens, sampling):
        tk = tokens[rows]
        p = np.take_along_axis(probs, np.clip(tk, 0, None)[..., None], -1)[..., 0]
        with np.errstate(divide="ignore"):
            out[rows] = np.where(tk != PADDING_TOKEN_ID, np.log(p), np.nan)
    return out


def _close(a: np.ndarray, b: np.ndarray, tol: float) -> np.ndarray:
    """|a - b| <= tol, with equal infinities close (both -inf: both say probability 0)."""
    with np.errstate(invalid="ignore"):
        return (np.abs(a - b) <= tol) | ((a == b) & np.isinf(a))


def wrong_tokens(tokens: np.ndarray, reported: np.ndarray, reference: np.ndarray, tol: float) -> np.ndarray:
    """bool (rows, max_new_tokens): an emitted token whose reported logprob is off the reference by more than ``tol``."""
    return (tokens != PADDING_TOKEN_ID) & ~_close(reported, reference, tol)


def _round_starts(tokens: np.ndarray, origins: np.ndarray) -> np.ndarray:
    """bool: the token opens a round (column 0, or after a recovered or bonus token)."""
    starts = np.zeros(tokens.shape, dtype=bool)
    starts[:, 0] = True
    starts[:, 1:] = np.isin(origins[:, :-1], (RECOVERED, BONUS))
    return starts & (tokens != PADDING_TOKEN_ID)


def classify_defect(tokens: np.ndarray, reported: np.ndarray, reference: np.ndarray, tol: float, *,
                    origins: np.ndarray | None = None, draft: np.ndarray | None = None) -> dict[str, Any]:
    """Which reporting defect (:data:`DEFECTS`) explains every wrong token, checked exactly token by token.

    Parameters
    ----------
    tokens : np.ndarray, shape (rows, max_new_tokens), int64, -1 padded
    reported, reference : np.ndarray, same shape, float64
        The decoder's logprobs and the reference scorer's.
    tol : float
        :func:`logprob_tolerance`.
    origins : np.ndarray of int8 or None, same shape
        :attr:`verifier.protocols.DecoderStats.origins` (0 accepted draft, 1 recovered, 2 bonus); without them the
        round structure is unknown and only ``zero`` can be named.
    draft : np.ndarray or None, same shape
        The draft's log q of every emitted token at its prefix (teacher-forced); without it ``draft_row`` cannot be
        named.

    Returns
    -------
    dict
        ``wrong`` (tokens), ``fits`` (defects whose rule explains every wrong token -- and, for ``first_only``, the
        right value at every round start), ``defect`` (the one fitting defect, else None), ``explained`` (defect ->
        wrong tokens its rule explains), ``checked`` (defects the data could test), ``sentence``.

    Notes
    -----
    ``zero``: every wrong token reports ``0.0``.  ``first_only``: every round start is right and every wrong token
    reports its round's first value.  ``draft_row``: every wrong token is an accepted draft reporting the draft's
    log q.  More than one can fit (a token with p = q reported as 0.0 ...); the classifier then names none.
    """
    wrong = wrong_tokens(tokens, reported, reference, tol)
    n_wrong = int(wrong.sum())
    explained: dict[str, int] = {"zero": int((wrong & _close(reported, np.zeros_like(reported), tol)).sum())}
    checked = ["zero"]
    if origins is not None and np.shape(origins) == tokens.shape:
        origins = np.asarray(origins)
        starts = _round_starts(tokens, origins)
        first_value = np.where(starts, reported, np.nan)
        idx = np.where(starts, np.arange(tokens.shape[1])[None], 0)
        np.maximum.accumulate(idx, axis=1, out=idx)  # column of each token's round start
        first_value = np.take_along_axis(first_value, idx, 1)
        explained["first_only"] = int((wrong & _close(reported, first_value, tol)).sum()) if not (wrong & starts).any() else 0
        checked.append("first_only")
        if draft is not None:
            explained["draft_row"] = int((wrong & (origins == ACCEPTED) & _close(reported, draft, tol)).sum())
            checked.append("draft_row")
    fits = [d for d in checked if n_wrong and explained[d] == n_wrong]
    defect = fits[0] if len(fits) == 1 else None
    if not n_wrong:
        sentence = "every reported logprob is the reference's"
    elif defect:
        sentence = f"reported logprobs: {DEFECTS[defect]} ({n_wrong} wrong tokens, all of this pattern)"
    else:
        best = max(checked, key=lambda d: explained[d])
        sentence = (f"reported logprobs: {n_wrong} wrong tokens fit {' and '.join(fits) if fits else 'no known defect'}"
                    f" (closest: {best}, {explained[best]} of {n_wrong}; checked {', '.join(checked)})")
    return {"wrong": n_wrong, "fits": fits, "defect": defect, "explained": explained, "checked": checked,
            "sentence": sentence}


def _position_rows(tokens, reported, reference, wrong) -> list[dict[str, Any]]:
    out = []
    with np.errstate(invalid="ignore"):
        diff = np.where(_close(reported, reference, 0.0), 0.0, np.abs(reported - reference))
    for t in range(tokens.shape[1]):
        live = tokens[:, t] != PADDING_TOKEN_ID
        d = diff[live, t]
        d = np.where(np.isnan(d), np.inf, d)
        row = {"position": t + 1, "tokens": int(live.sum()), "wrong": int(wrong[:, t].sum())}
        if len(d):
            q50, q99 = np.quantile(d, [0.5, 0.99], method="higher")  # no interpolation: inf stays inf
            row.update({"max_abs": float(d.max()), "q50_abs": float(q50), "q99_abs": float(q99),
                        "share": row["wrong"] / row["tokens"]})
        out.append(row)
    return out


def logprob_cell(cell_id: str, tokens: np.ndarray, reported: np.ndarray, reference: np.ndarray, tol: float, *,
                 power: float, cell_alpha: float, origins: np.ndarray | None = None, draft: np.ndarray | None = None,
                 **meta: Any) -> CellResult:
    """The deterministic ``logprob`` cell (module docstring).

    Parameters
    ----------
    tokens : np.ndarray, shape (rows, max_new_tokens), int64
        A sample set's rows, -1 padded.
    reported : np.ndarray, same shape, float64
        The logprobs the decoder reported (:func:`verifier.validation.check_reported_logprobs`).
    reference : np.ndarray, same shape, float64
        :func:`reference_logprobs` of the same rows.
    tol : float
        Allowed ``|reported - reference|`` in nats (:func:`logprob_tolerance`).
    power, cell_alpha : float
        The MDE is the share of wrong tokens seen at least once with probability ``power``.
    origins, draft : np.ndarray or None
        For :func:`classify_defect`.

    Returns
    -------
    CellResult
        ``statistic`` = wrong tokens, ``pvalue`` 0 with ``support_violation`` naming the first one, else 1;
        ``effect`` = share of wrong tokens, ``effect_unit = "tokens"``.
    """
    test = meta.pop("test", "logprob")
    wrong = wrong_tokens(tokens, reported, reference, tol)
    n = int((tokens != PADDING_TOKEN_ID).sum())
    k = int(wrong.sum())
    rows_wrong = int(wrong.any(axis=1).sum())
    reason = None
    if k:
        r, t = (int(v) for v in np.argwhere(wrong)[0])
        reason = (f"reported logprob wrong at {k} of {n} tokens ({rows_wrong} of {len(tokens)} rows); first: row {r}, "
                  f"position {t + 1}, token {int(tokens[r, t])}: reported {reported[r, t]:.6g}, reference "
                  f"{reference[r, t]:.6g} (tolerance {tol:g})")
    defect = classify_defect(tokens, reported, reference, tol, origins=origins, draft=draft)
    return CellResult(cell_id, test=test, method=(
        f"deterministic: each emitted token's reported logprob against the reference's log p at the same prefix "
        f"(processed probs, float64, tolerance {tol:g} nats); one wrong token is BIAS"), n=n, statistic=float(k),
        pvalue=0.0 if k else 1.0, effect=k / n if n else None, effect_unit="tokens",
        mde=1.0 - (1.0 - power) ** (1.0 / n) if n else None, cell_alpha=cell_alpha, support_violation=reason,
        extra={"wrong_tokens": k, "wrong_rows": rows_wrong, "rows": int(len(tokens)), "tolerance": tol,
               "positions": _position_rows(tokens, reported, reference, wrong), "defect": defect}, **meta)
