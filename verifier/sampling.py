"""Sampling configuration and the one definition of *processed probs*.

Every decoder (plain and speculative, target and draft) and every scorer turns logits into the
distribution it samples from with :func:`processed_probs`, in float64.  Using one function is what
makes "the draft sampled processed logits but the ratio used raw ones" a detectable bug rather
than an ambiguity.

Processor order: repetition penalty, then the presence and frequency penalties (vLLM's
``apply_penalties`` order), then temperature, top-k, top-p and min-p (Hugging Face ``generate``'s warper
order; vLLM applies min-p before top-k/top-p, which keeps the same set unless top-p is also set).

Context conventions (issue 29, bug kind 3)
------------------------------------------
* ``repetition_penalty`` (Hugging Face's CTRL rule) sees every token of the context: prompt + generated.
* ``presence_penalty`` / ``frequency_penalty`` (OpenAI / vLLM) count the *generated* tokens only (vLLM's
  ``output_token_ids``): ``logit -= presence * [count > 0] + frequency * count``.
* A decoder carries both in one integer *context code* per (row, token) (:func:`context_codes`):
  ``2 * (times generated) + (1 if in the prompt)``; a bool mask (prompt + generated) still serves a
  repetition penalty alone.

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

from typing import TYPE_CHECKING

import numpy as np

from verifier.errors import invalid_argument

if TYPE_CHECKING:  # torch is imported where a function needs it: SamplingConfig alone loads without torch
    import torch

__all__ = ["SamplingConfig", "processed_probs", "context_codes", "add_generated", "GREEDY", "MIN_TEMPERATURE"]

# The smallest positive temperature: any float32 logit (|x| <= 3.4e38) over it stays finite in
# float64 (3.4e38 / 1.9e-270 = 1.8e308), so softmax never sees inf - inf; 5e-324 made every prob NaN.
MIN_TEMPERATURE = 1e-260
MAX_ADDITIVE_PENALTY = 100.0  # |presence|, |frequency| beyond this push exp(-penalty) under float64's 1e-43 of a logit gap
GENERATED_STEP = 2  # a context code (context_codes) grows by 2 per generated occurrence; bit 0 = in the prompt


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
    presence_penalty : float or None, default None
        OpenAI / vLLM: subtracted once from the logit of every token generated at least once (generated
        tokens only, not the prompt: vLLM's convention).  ``|value| <= 100``; ``None`` disables.
    frequency_penalty : float or None, default None
        OpenAI / vLLM: ``frequency_penalty * count`` subtracted from each token's logit, ``count`` = times it
        was generated (prompt not counted).  ``|value| <= 100``; ``None`` disables.
    min_p : float or None, default None
        After temperature, top-k and top-p: drop every token whose prob is ``< min_p * (largest prob)``,
        then renormalise (Hugging Face's ``MinPLogitsWarper``, vLLM's min-p; the ratio to the largest prob
        does not depend on the renormalisations before it).  ``0 <= min_p <= 1``; ``None`` disables.

    Raises
    ------
    InvalidArgumentError
        If any field is outside the ranges above.
    """

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    repetition_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    min_p: float | None = None

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
        for name in ("presence_penalty", "frequency_penalty"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
                                  or abs(v) > MAX_ADDITIVE_PENALTY):
                raise invalid_argument(name, v, f"None or a number in [-{MAX_ADDITIVE_PENALTY:g}, {MAX_ADDITIVE_PENALTY:g}]")
        m = self.min_p
        if m is not None and (isinstance(m, bool) or not isinstance(m, (int, float)) or not (0 <= m <= 1)):
            raise invalid_argument("min_p", m, "None or a number with 0 <= min_p <= 1")

    @property
    def counts_generated(self) -> bool:
        """True when a presence or frequency penalty is on: processing needs each token's generated count."""
        return bool(self.presence_penalty) or bool(self.frequency_penalty)

    @property
    def uses_context(self) -> bool:
        """True when processed probs depend on the context's tokens (a repetition, presence or frequency penalty)."""
        return self.repetition_penalty is not None or self.counts_generated

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
        for key, short in (("presence_penalty", "presence"), ("frequency_penalty", "frequency"), ("min_p", "min_p")):
            if getattr(self, key) is not None:
                parts.append(f"{short}={getattr(self, key):g}")
        return ",".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "temperature": self.temperature,
            "top_k": self.top_k,
            "top_p": self.top_p,
            "repetition_penalty": self.repetition_penalty,
            # the issue-29 processors only when set: a config without them keeps its dict, so its set key and seeds
            **{k: getattr(self, k) for k in ("presence_penalty", "frequency_penalty", "min_p") if getattr(self, k) is not None},
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
    import torch

    if torch.isnan(x).any() or torch.isposinf(x).any():
        raise invalid_argument("logits", "<contains NaN or +inf>", "finite values or -inf")
    if (x == -math.inf).all(dim=-1).any():
        raise invalid_argument("logits", "<a row is all -inf>", "at least one finite logit per row")


def context_codes(prompt_ids, batch: int, vocab: int, device=None, *, sampling: SamplingConfig | None = None) -> torch.Tensor | None:
    """The context of ``batch`` rows after ``prompt_ids``, as :func:`processed_probs` reads it.

    Parameters
    ----------
    prompt_ids : sequence of int
    batch, vocab : int
    device : torch device, optional
    sampling : SamplingConfig, optional
        ``None`` or a config with a presence/frequency penalty: integer codes; a config with only a
        repetition penalty: the bool mask; a config without context-dependent processing: ``None``.

    Returns
    -------
    torch.Tensor, shape (batch, vocab), int32 or bool; or None
        Codes ``2 * (times generated) + (1 if in the prompt)`` (0 generated so far), or the bool mask.
    """
    import torch

    if sampling is not None and not sampling.uses_context:
        return None
    codes = sampling is None or sampling.counts_generated
    out = torch.zeros(batch, vocab, dtype=torch.int32 if codes else torch.bool, device=device)
    if len(prompt_ids):
        out[:, torch.as_tensor(list(prompt_ids), device=device)] = 1 if codes else True
    return out


def add_generated(context: torch.Tensor, rows: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Record ``tokens[i]`` generated in row ``rows[i]`` of ``context`` (in place; a row may repeat a token).

    Parameters
    ----------
    context : torch.Tensor, shape (batch, vocab), int32 codes or bool mask (:func:`context_codes`)
    rows, tokens : torch.Tensor, shape (n,), int64

    Returns
    -------
    torch.Tensor
        ``context``, updated: a code grows by 2 per occurrence, a mask entry becomes True.
    """
    import torch

    if context.dtype == torch.bool:
        context[rows, tokens] = True
        return context
    return context.index_put_((rows, tokens), torch.full_like(rows, GENERATED_STEP, dtype=context.dtype), accumulate=True)


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
        Penalties, temperature, top-k, top-p and min-p, in the module's order.
    context_token_mask : bool or integer tensor or array, shape (..., vocab), optional
        The context before the position (prompt + generated so far).  Bool: True where a token occurs
        (enough for ``repetition_penalty``).  Integer: context codes ``2 * (times generated) + (1 if in
        the prompt)`` (:func:`context_codes`, :func:`add_generated`), required with a presence or
        frequency penalty.  Needed only when one of the three penalties is set.

    Returns
    -------
    torch.Tensor, shape (..., vocab), dtype float64
        Rows sum to 1 (up to float64 rounding); same device as ``logits``.

    Raises
    ------
    InvalidArgumentError
        If ``logits`` has no vocab dimension, contains NaN or +inf, a row is all ``-inf``, or the
        repetition penalty is set without ``context_token_mask``, or a presence / frequency penalty without
        integer context codes.

    Examples
    --------
    >>> cfg = SamplingConfig(temperature=1.0, top_k=2)
    >>> probs = processed_probs(torch.log(torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)), cfg)
    >>> [round(v, 6) for v in probs.tolist()]
    [0.625, 0.375, 0.0]
    """
    import torch

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
    if sampling.counts_generated:
        codes = None if context_token_mask is None else torch.as_tensor(context_token_mask, device=x.device)
        if codes is None or codes.dtype == torch.bool or codes.is_floating_point():
            raise invalid_argument("context_token_mask", None if codes is None else f"<{codes.dtype} tensor>",
                                   "integer context codes (verifier.sampling.context_codes) when a presence or "
                                   "frequency penalty is set")
        counts = (codes.expand_as(x) // GENERATED_STEP).to(torch.float64)  # times generated; the prompt bit dropped
        x = x - float(sampling.frequency_penalty or 0.0) * counts - float(sampling.presence_penalty or 0.0) * (counts > 0).to(x.dtype)

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
    if sampling.min_p:  # keep p >= min_p * max p (Hugging Face: `probs < min_p * top_prob` removed)
        probs = torch.where(probs >= sampling.min_p * probs.amax(dim=-1, keepdim=True), probs, torch.zeros_like(probs))
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs
