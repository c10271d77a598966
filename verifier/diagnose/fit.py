"""Parametric fits of the emitted law: effective temperature and other sampling settings.

The emitted rows are scored as plain samples from the target at other sampling settings, each
token's law being :func:`verifier.sampling.processed_probs` of the target's logits along the observed
prefix (the logits are the log of the unprocessed teacher-forced probs, equal to the raw logits up to
a constant per row).  The maximum-likelihood temperature keeps the requested top-k / top-p; its 95%
interval is the profile-likelihood interval ``{T : 2 (l(T_hat) - l(T)) <= chi2_1(0.95)}``.  A setting
"explains the emitted law better" when its log-likelihood exceeds the requested one's by more than
``log(settings / DIAGNOSIS_ALPHA)`` (the threshold of :mod:`verifier.diagnose.rank`).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import torch
from scipy import optimize, stats

from verifier.diagnose.likelihood import SequenceProbs
from verifier.diagnose.rows import sequence_ends
from verifier.diagnose.rank import DIAGNOSIS_ALPHA
from verifier.sampling import GENERATED_STEP, SamplingConfig, processed_probs

__all__ = ["fit_temperature", "compare_settings", "T_MIN", "T_MAX"]

T_MIN, T_MAX = 0.05, 5.0  # search range of the effective temperature
CI_LEVEL = 0.95


def _context_mask(prompt: tuple[int, ...], tokens: np.ndarray, vocab: int) -> np.ndarray:
    """(rows, steps, vocab) int32 context codes (:func:`verifier.sampling.context_codes`) before emitted token t:
    1 if v is in the prompt, plus 2 x times v was emitted before t (every penalty reads them)."""
    n, steps = tokens.shape
    mask = np.zeros((n, steps, vocab), dtype=np.int32)
    if prompt:
        mask[:, :, list(prompt)] = 1
    for t in range(1, steps):
        mask[:, t] = mask[:, t - 1]
        prev = tokens[:, t - 1]
        ok = prev >= 0
        mask[np.flatnonzero(ok), t, prev[ok]] += GENERATED_STEP
    return mask


class _Scorer:
    """Log-likelihood of the rows as plain samples from the target at a sampling setting."""

    def __init__(self, seqs: SequenceProbs) -> None:
        if seqs.p_raw is None:
            raise ValueError("fits need the unprocessed target probs (SequenceProbs.p_raw)")
        with np.errstate(divide="ignore"):
            self.logits = torch.from_numpy(np.log(seqs.p_raw))
        self.tokens = np.where(seqs.tokens < 0, 0, seqs.tokens)
        ends = sequence_ends(seqs.tokens, seqs.eos_token_id)
        self.live = np.arange(seqs.tokens.shape[1])[None] < ends[:, None]
        self.prompt, self.raw_tokens, self.w = seqs.prompt, seqs.tokens, seqs.row_weights
        self._mask = None

    def _plain(self, temperature: float) -> float:
        """Temperature only: log softmax(logits / T) at the emitted tokens, in numpy."""
        if not hasattr(self, "_lx"):
            lg = self.logits.numpy()
            self._finite = np.isfinite(lg)
            self._lg = np.where(self._finite, lg, 0.0)
            self._lx = np.take_along_axis(lg, self.tokens[..., None], axis=2)[..., 0]
        z = self._lg / temperature
        zmax = np.where(self._finite, z, -np.inf).max(axis=2, keepdims=True)
        lse = np.log(np.where(self._finite, np.exp(z - zmax), 0.0).sum(axis=2)) + zmax[..., 0]
        ll = np.where(self.live, self._lx / temperature - lse, 0.0).sum(axis=1)
        return float((ll * self.w).sum()) if np.isfinite(ll).all() else -math.inf

    def mask(self):
        if self._mask is None:
            self._mask = torch.from_numpy(_context_mask(self.prompt, self.raw_tokens, self.logits.shape[-1]))
        return self._mask

    def __call__(self, sampling: SamplingConfig) -> float:
        if (sampling.top_k is None and sampling.top_p is None and not sampling.uses_context and not sampling.min_p
                and sampling.temperature > 0):
            return self._plain(sampling.temperature)
        ll = self.rows(sampling)
        return float((ll * self.w).sum()) if np.isfinite(ll).all() else -math.inf

    def probs(self, sampling: SamplingConfig) -> np.ndarray:
        """(rows, steps, vocab) float64: the processed target law at ``sampling`` before each emitted token."""
        mask = self.mask() if sampling.uses_context else None
        return processed_probs(self.logits, sampling, mask).numpy()

    def rows(self, sampling: SamplingConfig) -> np.ndarray:
        """(rows,) float64: each row's log-likelihood as a plain sample at ``sampling`` (-inf: impossible there)."""
        px = np.take_along_axis(self.probs(sampling), self.tokens[..., None], axis=2)[..., 0]
        with np.errstate(divide="ignore"):
            return np.where(self.live, np.log(px), 0.0).sum(axis=1)


def fit_temperature(seqs: SequenceProbs, sampling: SamplingConfig) -> dict:
    """Maximum-likelihood effective temperature of the emitted rows, with its profile-likelihood interval.

    Parameters
    ----------
    seqs : SequenceProbs
        With ``p_raw``.
    sampling : SamplingConfig
        The requested setting; its top-k / top-p / penalty are kept, the temperature is fitted.

    Returns
    -------
    dict
        ``temperature``, ``ci`` ([low, high], 95%), ``requested``, ``log_lr`` (fitted over requested,
        nats), ``sentence`` ("emitted tokens look like T = 1.09 [1.06, 1.12], requested T = 1.0").
    """
    score = _Scorer(seqs)
    base, note = sampling, ""
    if not math.isfinite(score(sampling)) and (sampling.top_k is not None or sampling.top_p is not None):
        base, note = replace(sampling, top_k=None, top_p=None), " (fitted without top-k/top-p: emitted tokens lie outside the requested filter)"

    def nll(log_t: float) -> float:
        v = -score(replace(base, temperature=float(math.exp(log_t))))
        return v if math.isfinite(v) else 1e300

    res = optimize.minimize_scalar(nll, bounds=(math.log(T_MIN), math.log(T_MAX)), method="bounded",
                                   options={"xatol": 5e-3})
    best, ll_best = float(math.exp(res.x)), -float(res.fun)
    cut = stats.chi2.ppf(CI_LEVEL, 1) / 2

    def gap(log_t: float) -> float:
        return (ll_best + nll(log_t)) - cut  # < 0 inside the interval

    lo, hi = math.log(T_MIN), math.log(T_MAX)
    low = T_MIN if gap(lo) < 0 else float(math.exp(optimize.brentq(gap, lo, res.x, xtol=3e-3)))
    high = T_MAX if gap(hi) < 0 else float(math.exp(optimize.brentq(gap, res.x, hi, xtol=3e-3)))
    ll_req = score(sampling)
    return {"temperature": best, "ci": [low, high], "ci_level": CI_LEVEL, "requested": sampling.temperature,
            "log_lr": ll_best - ll_req if math.isfinite(ll_req) else math.inf,
            "filters_dropped": bool(note),
            "sentence": (f"emitted tokens look like T = {best:.3g} [{low:.3g}, {high:.3g}]"
                         f"{' (at the search bound)' if min(best - T_MIN, T_MAX - best) < 1e-2 else ''}, "
                         f"requested T = {sampling.temperature:g}{note}")}


def compare_settings(seqs: SequenceProbs, sampling: SamplingConfig) -> dict:
    """Log-likelihood of the rows under the requested setting and under alternatives.

    Alternatives: unfiltered (no top-k / top-p, same T), unprocessed (``SamplingConfig()``), penalty off
    (when a repetition, presence or frequency penalty was requested: all three off), min-p off (when min-p was).  Returns ``{"requested": ll, "alternatives": [{name,
    sampling, log_lr, better}], "threshold", "sentence"}``.
    """
    score = _Scorer(seqs)
    ll_req = score(sampling)
    alts = {}
    if sampling.top_k is not None or sampling.top_p is not None:
        alts["unfiltered (no top-k/top-p)"] = replace(sampling, top_k=None, top_p=None)
    if sampling.uses_context:  # every penalty off (a verification that ignores them, vLLM #18902)
        alts["penalty off"] = replace(sampling, repetition_penalty=None, presence_penalty=None, frequency_penalty=None)
    if sampling.min_p:
        alts["min-p off"] = replace(sampling, min_p=None)
    if sampling != SamplingConfig():
        alts["unprocessed (T = 1, no filters)"] = SamplingConfig()
    thr = math.log(max(1, len(alts)) / DIAGNOSIS_ALPHA)
    rows = []
    for name, cfg in alts.items():
        ll = score(cfg)
        lr = ll - ll_req if math.isfinite(ll_req) else (math.inf if math.isfinite(ll) else 0.0)
        rows.append({"name": name, "sampling": cfg.describe() if hasattr(cfg, "describe") else repr(cfg),
                     "log_lr": lr, "better": bool(lr >= thr)})
    better = [r for r in rows if r["better"]]
    if better:
        b = max(better, key=lambda r: r["log_lr"])
        text = f"the emitted law is better explained by the target {b['name']} (log LR {b['log_lr']:.1f} over the requested setting)"
    else:
        text = "no other sampling setting explains the emitted law better than the requested one"
    return {"requested": ll_req, "alternatives": rows, "threshold": thr, "sentence": text}
