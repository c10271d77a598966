"""Row helpers shared by the likelihoods (:mod:`~verifier.diagnose.likelihood`, :mod:`~verifier.diagnose.latent`,
:mod:`~verifier.diagnose.latent_mc`): where each emitted row ends, its distinct rows, probs picked at its tokens."""

from __future__ import annotations

import numpy as np

from verifier.protocols import PADDING_TOKEN_ID

__all__ = ["sequence_ends", "unique_rows"]


def sequence_ends(tokens: np.ndarray, eos_token_id: int | None) -> np.ndarray:
    """Number of emitted tokens of each row (up to and including EOS; -1 padding excluded), shape (rows,)."""
    n, steps = tokens.shape
    stop = tokens == PADDING_TOKEN_ID
    if eos_token_id is not None:
        stop = stop | np.concatenate([np.zeros((n, 1), dtype=bool), tokens[:, :-1] == eos_token_id], axis=1)
    first = np.where(stop.any(axis=1), stop.argmax(axis=1), steps)
    return first.astype(np.int64)


def unique_rows(tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct emitted rows and how often each occurs: ((distinct, max_new_tokens), (distinct,)).

    Identical rows have identical teacher-forced probs, so likelihoods are computed once per distinct row.
    """
    uniq, counts = np.unique(np.asarray(tokens, dtype=np.int64), axis=0, return_counts=True)
    return uniq, counts.astype(np.float64)


def _log(x: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.log(np.clip(x, 0.0, None))


def _pick(rows: np.ndarray, x: np.ndarray) -> np.ndarray:
    return np.take_along_axis(rows, x[:, None], axis=1)[:, 0]


def _pick_all(rows: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """``rows[i, t, tokens[i, t]]`` (padding read as token 0), shape (rows, steps)."""
    x = np.where(tokens < 0, 0, tokens)
    return np.take_along_axis(rows, x[..., None], axis=2)[..., 0]


def check_rows(tokens, vocab_size: int, name: str = "tokens"):
    """``tokens`` as int64 (rows, max_new_tokens) with ids in 0..V-1 and -1 padding, else InvalidArgumentError."""
    from verifier.errors import invalid_argument

    arr = np.asarray(tokens)
    if arr.ndim != 2 or not np.issubdtype(arr.dtype, np.integer):
        raise invalid_argument(f"{name}.shape", getattr(arr, "shape", None), "an integer array (num_samples, max_new_tokens)")
    bad = (arr < -1) | (arr >= vocab_size)
    if bad.any():
        raise invalid_argument(name, int(arr[bad][0]), f"token ids in 0..{vocab_size - 1}, or -1 after the end of a row")
    return arr.astype(np.int64)
