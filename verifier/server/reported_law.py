"""The processed law at one emitted position, rebuilt from the top logprobs a server reported.

The self-reported design of a URL audit (:mod:`verifier.server.self_reported`) has no local model:
the law a token was drawn from is rebuilt from the ``top_logprobs`` row the server returned with
it.  Two conventions exist (:attr:`verifier.server.dialects.Dialect.reported_law`, docs/servers.md):

``"raw"``
    The model's log-softmax at temperature 1 before any sampler (vLLM's default
    ``--logprobs-mode raw_logprobs``; llama-server without ``post_sampling_probs``).  Logprobs and
    logits differ by one constant per row, which softmax cancels, so the processed law is
    :func:`verifier.sampling.processed_probs` of the reported values with the audit's temperature,
    top-k and top-p -- exact as soon as the row holds the ``top_k`` largest entries (top-k keeps
    nothing else) or the whole mass (every token the server left out has prob ~0).
``"processed"``
    The law after the sampler chain (llama-server with ``post_sampling_probs``): already processed;
    :func:`~verifier.sampling.processed_probs` at temperature 1 only renormalises the float32 rounding.
    Exact when the row holds the whole kept set (its probabilities sum to 1).

A row that cannot define the law is an :class:`Undefined` with its reason: no row (llama-server
reports ``prob 1.0`` and no top entries for tokens of a verification step), fewer entries than
``top_k`` and less than the whole mass, or a mass above 1 (not the logprobs of one law).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from verifier.errors import invalid_argument

__all__ = ["ReportedLaw", "Undefined", "rebuild_law", "law_tv", "check_design", "CONVENTIONS", "MASS_TOL"]

CONVENTIONS = ("raw", "processed")
# reported values are float32 (llama.cpp) or float32 logprobs (vLLM): K of them sum to 1 within ~1e-6; a
# mass beyond 1 + MASS_TOL is not one law, and a row whose mass is within MASS_TOL of 1 leaves < 1e-4 unreported
MASS_TOL = 1e-4


@dataclass(frozen=True)
class ReportedLaw:
    """The processed law of one position over the token ids the server reported.

    Attributes
    ----------
    ids : np.ndarray, shape (m,), int64
        Reported token ids (every other id has processed prob 0).
    probs : np.ndarray, shape (m,), float64
        Their processed probs; sums to 1.
    """

    ids: np.ndarray
    probs: np.ndarray

    def prob(self, token: int) -> float:
        """Processed prob of ``token`` (0 for an id the row does not hold)."""
        hit = np.flatnonzero(self.ids == int(token))
        return float(self.probs[hit[0]]) if hit.size else 0.0

    def cdf_below(self, token: int) -> float:
        """Mass ranked before ``token``: larger prob, or equal prob and smaller id (:mod:`verifier.stats.pit`)."""
        p = self.prob(token)
        before = (self.probs > p) | ((self.probs == p) & (self.ids < int(token)))
        return float(self.probs[before].sum())

    def dense(self, vocab_size: int) -> np.ndarray:
        """The law over ``0..vocab_size - 1``, shape (vocab_size,), float64."""
        out = np.zeros(int(vocab_size), dtype=np.float64)
        out[self.ids] = self.probs
        return out


@dataclass(frozen=True)
class Undefined:
    """A position whose reported row cannot define the processed law; ``reason`` says why."""

    reason: str
    not_a_law: bool = False  # the row is not the log probs of any law (the server misreports), not merely incomplete


def check_design(sampling, logprobs: int | None, vocab_size: int | None) -> None:
    """Refuse sampling settings whose processed law the top-``logprobs`` rows cannot define.

    Raises
    ------
    InvalidArgumentError
        No ``--logprobs``; ``--top-k`` above ``--logprobs`` (or unset while the vocabulary is
        larger); greedy; a repetition penalty (it needs the logits' sign, which logprobs lose); a presence or
        frequency penalty (context-dependent: the rebuilt law has no context).
    """
    if logprobs is None:
        raise invalid_argument("--logprobs", None, "K >= 1 with the self-reported design (no --target): the law "
                               "of every emitted token is rebuilt from its top-K logprobs")
    if sampling.greedy:
        raise invalid_argument("--temperature", 0.0, "> 0 with the self-reported design (greedy output is checked "
                               "by exact match against a local --target)")
    if sampling.repetition_penalty is not None:
        raise invalid_argument("--repetition-penalty", sampling.repetition_penalty, "unset with the self-reported "
                               "design (the penalty needs the logits' sign, which reported logprobs do not carry)")
    for flag, value in (("--presence-penalty", sampling.presence_penalty),
                        ("--frequency-penalty", sampling.frequency_penalty)):
        if value:  # context-dependent, like the repetition penalty: a raw row is before it, and a rebuilt law has no context
            raise invalid_argument(flag, value, "unset with the self-reported design (the penalty depends on the tokens "
                                   "generated so far, which a row rebuilt from reported logprobs does not carry; give "
                                   "--target for the known-target design)")
    covered = vocab_size is not None and vocab_size <= logprobs
    if sampling.top_k is None and not covered:
        raise invalid_argument("--top-k", None, f"an integer <= --logprobs {logprobs} with the self-reported design: "
                               "only then do the top-K logprobs hold every token the sampler can keep (or give a "
                               f"--vocab-size <= {logprobs})")
    if sampling.top_k is not None and sampling.top_k > logprobs and not covered:
        raise invalid_argument("--top-k", sampling.top_k, f"<= --logprobs {logprobs} with the self-reported design "
                               "(the server reports K logprobs per position; a larger top-k keeps tokens it does not "
                               "report, so their law is unknown)")


def rebuild_law(row: Mapping[int, float] | None, sampling, convention: str, *,
                vocab_size: int | None = None) -> ReportedLaw | Undefined:
    """The processed law of one position from its reported top logprobs.

    Parameters
    ----------
    row : mapping token id -> natural-log prob, or None
        The position's ``top_logprobs`` (:class:`verifier.server.dialects.Completion`); None or empty:
        the server reported no row.
    sampling : SamplingConfig
        The audit's sampling (temperature > 0, no repetition penalty: :func:`check_design`).
    convention : {"raw", "processed"}
        What the row holds (module docstring).
    vocab_size : int, optional
        A row holding at least this many ids covers the vocabulary.

    Returns
    -------
    ReportedLaw or Undefined

    Examples
    --------
    >>> from verifier.sampling import SamplingConfig
    >>> law = rebuild_law({0: math.log(0.5), 1: math.log(0.3), 2: math.log(0.2)}, SamplingConfig(top_k=2), "raw")
    >>> [round(float(p), 6) for p in law.probs]
    [0.625, 0.375]
    >>> rebuild_law({0: math.log(0.5)}, SamplingConfig(top_k=2), "raw").reason
    'the row holds 1 of the top_k=2 largest logprobs and mass 0.5 < 1'
    """
    if convention not in CONVENTIONS:
        raise invalid_argument("convention", convention, " or ".join(CONVENTIONS))
    if not row:
        return Undefined("no reported logprobs at this position")
    ids = np.fromiter(row.keys(), dtype=np.int64, count=len(row))
    values = np.fromiter(row.values(), dtype=np.float64, count=len(row))
    if np.isnan(values).any() or values.max() > math.log1p(MASS_TOL):
        return Undefined(f"a reported logprob above 0 ({values.max():.3g})", True)
    mass = float(np.exp(values).sum())
    if mass > 1 + MASS_TOL:
        return Undefined(f"the reported probs sum to {mass:.6g} > 1 (not one law)", True)
    if vocab_size is not None and len(ids) >= vocab_size and mass < 1 - MASS_TOL:
        # every id of the vocabulary is in the row: log probs of one law sum to 1 (raw log-softmax and post-sampling
        # probs alike); renormalising would certify a law the server never reported
        return Undefined(f"the reported probs of all {len(ids)} token ids (--vocab-size {vocab_size}) sum to "
                         f"{mass:.6g} < 1 (not one law)", True)
    whole = mass >= 1 - MASS_TOL or (vocab_size is not None and len(ids) >= vocab_size)
    if convention == "processed":
        if not whole:
            return Undefined(f"the reported post-sampling probs sum to {mass:.4g} < 1: the kept set is larger than "
                             f"the {len(ids)} reported")
        use = _plain()
    else:
        k = sampling.top_k
        if not whole and (k is None or len(ids) < k):
            held = f"{len(ids)} of the top_k={k} largest logprobs" if k else f"{len(ids)} logprobs, no top_k"
            return Undefined(f"the row holds {held} and mass {mass:.4g} < 1")
        use = sampling
    finite = np.isfinite(values)
    if not finite.any():
        return Undefined("every reported logprob is -inf", True)
    ids, values = ids[finite], values[finite]
    from verifier.sampling import processed_probs

    probs = processed_probs(values, use).numpy()
    keep = probs > 0
    return ReportedLaw(ids[keep], probs[keep])


def _plain():
    """Temperature 1, no truncation: processed_probs then only renormalises (built lazily: verifier.sampling imports torch)."""
    from verifier.sampling import SamplingConfig

    return SamplingConfig()


def law_tv(a: ReportedLaw, b: ReportedLaw) -> float:
    """Total variation between two rebuilt laws (ids missing from one have prob 0 there).

    >>> x = ReportedLaw(np.array([0, 1]), np.array([0.5, 0.5]))
    >>> law_tv(x, ReportedLaw(np.array([1, 2]), np.array([0.5, 0.5])))
    0.5
    """
    ids = np.union1d(a.ids, b.ids)
    pa = np.zeros(ids.size)
    pb = np.zeros(ids.size)
    pa[np.searchsorted(ids, a.ids)] = a.probs
    pb[np.searchsorted(ids, b.ids)] = b.probs
    return float(0.5 * np.abs(pa - pb).sum())
