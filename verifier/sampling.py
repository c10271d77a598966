"""Sampling configuration and the one definition of *processed probs*.

Every decoder (plain and speculative, target and draft) and every scorer turns logits into the
distribution it samples from with :func:`processed_probs`, in float64.  Using one function is what
makes "the draft sampled processed logits but the ratio used raw ones" a detectable bug rather
than an ambiguity.

Processor order follows Hugging Face ``generate``: repetition penalty, then temperature, then
top-k, then top-p.

Boundary and tie conventions
----------------------------
* ``temperature == 0`` means greedy: the processed probs are one-hot on the argmax, ties going to
  the lowest token id.  Greedy decoding is verified by exact match, not by distribution tests.
* top-k keeps every token whose (temperature-scaled) logit is >= the k-th largest logit, so tokens
  tied with the k-th are all kept (as Hugging Face's ``TopKLogitsWarper``); ``top_k >= vocab``
  keeps everything.
* top-p keeps the smallest set of most-probable tokens whose probability sums to >= ``top_p``
  (computed in float64 after top-k), plus every token tied in probability with the last one kept,
  so the result never depends on sort order.  ``top_p == 1`` keeps everything.
* Tokens whose logit is ``-inf`` get probability exactly 0 and are never kept by top-k/top-p.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from verifier.errors import invalid_argument

__all__ = ["SamplingConfig", "processed_probs", "GREEDY", "MIN_TEMPERATURE"]

# The smallest positive temperature: any float32 logit (|x| <= 3.4e38) over it stays finite in
# float64 (3.4e38 / 1.9e-270 = 1.8e308), so softmax never sees inf - inf; 5e-324 made every prob NaN.
MIN_TEMPERATURE = 1e-260


@dataclass(frozen=True)
class SamplingConfig:
    """How logits become the distribution a token is sampled from.

    Parameters
    ----------
    temperature : float, default 1.0
        Logits are divided by it.  ``0`` means greedy decoding.  Must be finite and >= 0.
    top_k : int or None, default None
        Keep the ``top_k`` most likely tokens (ties at the boundary kept).  ``None`` disables.
        Must be >= 1.
    top_p : float or None, default None
        Nucleus sampling mass, ``0 < top_p <= 1``.  ``None`` disables.
    repetition_penalty : float or None, default None
        Hugging Face's CTRL-style penalty (> 0) applied to every token already in the context:
        a positive logit is divided by it, a negative one multiplied.  ``None`` disables.

    Raises
    ------
    InvalidArgumentError
        If any field is outside the ranges above.
    """

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    repetition_penalty: float | None = None

    def __post_init__(self) -> None:
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0 or 0 < t < MIN_TEMPERATURE:
            raise invalid_argument("temperature", t, f"0 (greedy) or a finite number >= {MIN_TEMPERATURE:g} (below it logits / "
                                   "temperature overflow float64 and every processed prob is NaN)")
        k = self.top_k
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
            raise invalid_argument("top_k", k, "None or an integer >= 1")
        p = self.top_p
        if p is not None and (isinstance(p, bool) or not isinstance(p, (int, float)) or not (0 < p <= 1)):
            raise invalid_argument("top_p", p, "None or a number with 0 < top_p <= 1")
        r = self.repetition_penalty
        if r is not None and (isinstance(r, bool) or not isinstance(r, (int, float)) or not math.isfinite(r) or r <= 0):
            raise invalid_argument("repetition_penalty", r, "None or a finite number > 0")

    @property
    def greedy(self) -> bool:
        """True when ``temperature == 0``."""
        return self.temperature == 0

    def label(self) -> str:
        """Short human-readable form, e.g. ``T=0.7,top_k=5``."""
        parts = [f"T={self.temperature:g}"]
        if self.top_k is not None:
            parts.append(f"top_k={self.top_k}")
        if self.top_p is not None:
            parts.append(f"top_p={self.top_p:g}")
        if self.repetition_penalty is not None:
            parts.append(f"rep={self.repetition_penalty:g}")
        return ",".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "temperature": self.temperature,
            "top_k": self.top_k,
            "top_p": self.top_p,
            "repetition_penalty": self.repetition_penalty,
        }


GREEDY = SamplingConfig(temperature=0.0)


def check_logits(x: torch.Tensor) -> None:
    """Raise :class:`InvalidArgumentError` for logits with NaN or +inf, or a row that is all ``-inf``.

    Parameters
    ----------
    x : torch.Tensor, shape (..., vocab), float

    Raises
    ------
    InvalidArgumentError
        ``logits`` contains NaN or +inf, or a row has no finite logit.
    """
    if torch.isnan(x).any() or torch.isposinf(x).any():
        raise invalid_argument("logits", "<contains NaN or +inf>", "finite values or -inf")
    if (x == -math.inf).all(dim=-1).any():
        raise invalid_argument("logits", "<a row is all -inf>", "at least one finite logit per row")


def processed_probs(
    logits: torch.Tensor | np.ndarray,
    sampling: SamplingConfig,
    context_token_mask: torch.Tensor | np.ndarray | None = None,
) -> torch.Tensor:
    """Turn logits into the float64 distribution that is actually sampled from.

    Parameters
    ----------
    logits : tensor or array, shape (..., vocab)
        Raw model logits in any float dtype; cast to float64 first.
    sampling : SamplingConfig
        Temperature, top-k, top-p and repetition penalty to apply (in Hugging Face's order).
    context_token_mask : bool tensor or array, shape (..., vocab), optional
        True where a token occurs in the context (prompt + generated so far); required only when
        ``sampling.repetition_penalty`` is set.

    Returns
    -------
    torch.Tensor, shape (..., vocab), dtype float64
        Rows sum to 1 (up to float64 rounding); same device as ``logits``.

    Raises
    ------
    InvalidArgumentError
        If ``logits`` has no vocab dimension, contains NaN or +inf, a row is all ``-inf``, or the
        repetition penalty is set without ``context_token_mask``.

    Examples
    --------
    >>> cfg = SamplingConfig(temperature=1.0, top_k=2)
    >>> probs = processed_probs(torch.log(torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)), cfg)
    >>> [round(v, 6) for v in probs.tolist()]
    [0.625, 0.375, 0.0]
    """
    raw = torch.as_tensor(logits)
    if raw.ndim == 0 or raw.shape[-1] == 0:
        raise invalid_argument("logits.shape", tuple(raw.shape), "(..., vocab) with vocab >= 1")
    # a finite sum means every logit is finite: one pass over the input dtype (half the bytes of float64),
    # no checks needed; a sum that overflows (huge finite logits) only takes the exact checks below
    finite = math.isfinite(float(raw.sum()))
    x = raw.to(torch.float64)
    if not finite:
        check_logits(x)

    if sampling.repetition_penalty is not None and sampling.repetition_penalty != 1.0:
        if context_token_mask is None:
            raise invalid_argument(
                "context_token_mask", None, "a bool mask (..., vocab) when repetition_penalty is set"
            )
        mask = torch.as_tensor(context_token_mask, device=x.device).bool().expand_as(x)
        r = float(sampling.repetition_penalty)
        x = torch.where(mask, torch.where(x > 0, x / r, x * r), x)

    if sampling.greedy:
        out = torch.zeros_like(x)
        return out.scatter_(-1, x.argmax(dim=-1, keepdim=True), 1.0)  # argmax: first max = lowest id

    if sampling.temperature != 1:  # x / 1.0 == x exactly: skip the copy
        x = x / float(sampling.temperature)
    vocab = x.shape[-1]
    if sampling.top_k is not None and sampling.top_k < vocab:
        kth = torch.topk(x, sampling.top_k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, -math.inf)
    probs = torch.softmax(x, dim=-1)
    if sampling.top_p is not None and sampling.top_p < 1.0:
        sorted_p, _ = torch.sort(probs, dim=-1, descending=True)
        mass_before = torch.cumsum(sorted_p, dim=-1) - sorted_p
        # the last kept sorted position is the first whose cumulative mass reaches top_p
        keep_sorted = mass_before < sampling.top_p
        keep_sorted[..., 0] = True
        threshold = torch.where(keep_sorted, sorted_p, torch.full_like(sorted_p, math.inf)).amin(dim=-1, keepdim=True)
        probs = torch.where(probs >= threshold, probs, torch.zeros_like(probs))
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs
