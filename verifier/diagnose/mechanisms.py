"""Known mechanisms of bias as vectorised float64 verification rules (for per-sequence likelihoods).

A :class:`Mechanism` is the float64, batched twin of a :class:`verifier.exact.rules.Rule` (every rule
of the exact zoo, lossless ones included) or of a decoder-level mutant of
:mod:`verifier.decoders.mutants` whose law has a per-sequence likelihood (draft q from raw logits,
target verified with unprocessed sampling params).  Hooks take a :class:`Views` of one position for a
batch of samples -- the processed target and draft probs ``p``, ``q`` and, for the decoder-level
mutants, the unprocessed ones ``p_raw``, ``q_raw`` (``SamplingConfig()``, no repetition mask) -- and
return arrays of shape (batch, vocab).

Glossary: see :mod:`verifier.protocols` (accepted, rejected position, residual, recovered token,
bonus token, round).

Two decoder-level mechanisms carry latent state that teacher-forced probs along the row do not see:
the stale KV cache (``kv_not_rolled_back``) and batch cross-talk (``batch_cross_talk``).  They are
``latent`` mechanisms: their law is enumerated exactly over the decoder's choices
(:mod:`verifier.diagnose.latent`), on pairs small enough for it.  The degenerate residual is the
canonical rule with float64 probs.

Three mechanisms the field reports (issue 26; exact laws in :mod:`verifier.exact.field_rules`, mutants in
:mod:`verifier.decoders.field_mutants`): ``recovered_one_late`` (the recovered token's law reads the rows after the
latent rejected draft token: ``late_recover``, teacher-forced through ``SequenceProbs.target_after`` /
``draft_after`` at the emitted token (:mod:`verifier.diagnose.late`), within
:data:`verifier.diagnose.rank.MAX_LATE_POSITIONS`),
``draft_accept_same_uniform`` (an acceptance hook) and ``target_processed_first_only`` (``later_raw``: the raw target
after a round's first position; at T = 1 without filters it is the canonical law, which the ranking scores as such).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from verifier.exact.rules import BY_INDEX_TOLERANCE as _BY_INDEX_TOLERANCE
from verifier.exact.rules import RULES, TYPICAL_DELTA, TYPICAL_EPSILON

__all__ = ["Views", "Mechanism", "MECHANISMS", "UNMODELLED", "mechanism_for_decoder"]


@dataclass
class Views:
    """Probability rows of one position for a batch: each (batch, vocab) float64 (raw and temperature-only ones may be None)."""

    p: np.ndarray
    q: np.ndarray
    p_raw: np.ndarray | None = None
    q_raw: np.ndarray | None = None
    q_temp: np.ndarray | None = None  # the draft's temperature-only probs (no top-k / top-p): draft_processors_differ


# -- vectorised building blocks -----------------------------------------------------------------


def _ratio(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``min(1, p/q)`` where q > 0, else 0 (a token with q = 0 is never proposed)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(q > 0, np.minimum(1.0, p / np.where(q > 0, q, 1.0)), 0.0)


def _normalise(w: np.ndarray, fallback: np.ndarray) -> np.ndarray:
    """Rows of ``w`` divided by their sum; ``fallback`` rows where the sum is 0 (as ``residual_or_target``)."""
    s = w.sum(axis=-1, keepdims=True)
    return np.where(s > 0, w / np.where(s > 0, s, 1.0), fallback)


def _residual(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    return _normalise(np.clip(p - q, 0.0, None), p)


def _one_hot_argmax(x: np.ndarray) -> np.ndarray:
    out = np.zeros_like(x)
    np.put_along_axis(out, x.argmax(axis=-1)[:, None], 1.0, axis=-1)  # first maximum, as torch.argmax and rules._argmax
    return out


def _softmax_residual(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    w = np.exp(np.clip(p - q, 0.0, None))  # every token, zeros included (exp(0) = 1), as rules._softmax_residual
    return w / w.sum(axis=-1, keepdims=True)


BY_INDEX_TOLERANCE = float(_BY_INDEX_TOLERANCE)  # by-index deficits at or below this are 0 (the exact rule's and the
# kernel's too): p and q of different tokens can be equal in exact arithmetic and differ in the last bits here


def _residual_by_index(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``max(0, p(t_i) - q(d_i))`` over the i-th non-zero tokens of p and q in id order (llama.cpp), p if all 0."""
    keep_p, keep_q = p > 0, q > 0
    order = np.argsort(~keep_q, axis=-1, kind="stable")  # draft candidates first, in id order
    compact_q = np.take_along_axis(np.where(keep_q, q, 0.0), order, axis=-1)
    index = np.clip(np.cumsum(keep_p, axis=-1) - 1, 0, None)
    deficit = np.where(keep_p, np.clip(p - np.take_along_axis(compact_q, index, axis=-1), 0.0, None), 0.0)
    deficit = np.where(deficit > BY_INDEX_TOLERANCE, deficit, 0.0)  # equal probs of two models: 0, not rounding noise
    return _normalise(deficit, p)


BFLOAT16_BITS = 8  # significand bits of bfloat16 (implicit bit included): q_dtype_mismatch's rounding


def _bfloat16_renormalised(q: np.ndarray) -> np.ndarray:
    """``q`` rounded to bfloat16 (nearest, ties to even, as ``torch.Tensor.to``) and renormalised: what a draft that
    samples from bfloat16 probs draws from (:func:`verifier.exact.vocab.round_to_dtype`)."""
    mant, exp = np.frexp(q)
    r = np.ldexp(np.round(np.ldexp(mant, BFLOAT16_BITS)), exp - BFLOAT16_BITS)
    return r / r.sum(axis=-1, keepdims=True)


def _q_temp(v: "Views") -> np.ndarray:
    if v.q_temp is None:
        raise ValueError("draft_processors_differ needs the temperature-only draft view (SequenceProbs.q_temp)")
    return v.q_temp


def _typical(p: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        entropy = -np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0).sum(axis=-1, keepdims=True)
    threshold = np.minimum(float(TYPICAL_EPSILON), float(TYPICAL_DELTA) * np.exp(-entropy))
    return (p > threshold).astype(np.float64)


def _same_uniform_acceptance(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``draft_accept_same_uniform``: P(x accepted | proposed) when the inverse-CDF uniform that drew x (token-id order)
    is reused by the test ``u < p(x)/q(x)``: ``max(0, min(F(x), p(x)/q(x)) - F(x - 1)) / q(x)``
    (:func:`verifier.exact.field_rules.same_uniform_acceptance`)."""
    cdf = np.cumsum(q, axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(q > 0, p / np.where(q > 0, q, 1.0), 0.0)
        mass = np.clip(np.minimum(cdf, ratio) - (cdf - q), 0.0, None)
        return np.where(q > 0, np.minimum(1.0, mass / np.where(q > 0, q, 1.0)), 0.0)


def _fresh_match_reject_emit(v: Views, proposal: np.ndarray, acceptance: np.ndarray) -> np.ndarray:
    # rejected iff a fresh y ~ p differs from the draft d; y is emitted: sum_d prop(d) p(y) [y != d]
    return v.p * (1.0 - proposal)


@dataclass(frozen=True)
class Mechanism:
    """One known mechanism as a float64 chain rule.

    Attributes
    ----------
    name : str
        The exact-zoo rule name, or the decoder-mutant name for a decoder-level mechanism.
    declared : {"exact", "biased", "lossy"}
    description : str
    aliases : tuple of str
        Decoder names (``DECODER_REGISTRY``) whose law is this mechanism's.
    propose, acceptance, recover : callable (Views) -> (batch, vocab)
        Law of the draft token, acceptance threshold of each token, recovered-token law (independent
        of the rejected draft token).
    reject_emit : callable (Views, proposal, acceptance) -> (batch, vocab) or None
        Replaces ``recover`` when the recovered law depends on the rejected draft token: the mass of
        "rejected, then y emitted", summed over the latent rejected token.
    target : {"p", "p_raw"}
        The target view the bonus token is drawn from.
    bonus_offset, keep_suffix, shared_uniform
        Round-level switches as in :class:`verifier.exact.rules.Rule`.
    same_as_target : bool
        A lossless round-level rule (block verification) whose sequence law is the target's.
    needs_raw : bool
        Uses ``p_raw`` / ``q_raw``.
    latent : bool
        The law is enumerated by :mod:`verifier.diagnose.latent` (the chain-rule hooks are unused).
    lead : int, default 0
        Plain target samples emitted before the first round (1: the first token comes from the target's prefill
        step, as in vLLM and llama.cpp; :mod:`verifier.diagnose.family`).
    position_acceptance : tuple of float or None, default None
        A fixed acceptance probability per round position (``synthetic_acceptance``: the exact rule's
        ``position_acceptance``; positions beyond it take the last entry), replacing ``acceptance`` in the round.
    composable : bool, default True
        Enters pairs of defects (:func:`verifier.diagnose.family.composite_names`).  False for a mechanism within a
        small TV of the canonical rule (``q_dtype_mismatch``): each of its pairs would be a near-copy of its other part.
        The field mechanisms (issue 26) compose (``late_recover`` / ``later_raw`` carried through
        :func:`verifier.diagnose.family.compose`), except with the parts listed in
        :data:`verifier.diagnose.family.NOT_WELL_DEFINED`.
    late_recover : bool, default False
        ``recovered_one_late``: the recovered token at round position j is drawn from the rows *after* the latent
        rejected draft token d (``residual(p[j + 1], q[j + 1])``, ``p[k]`` at j = k - 1), summed over d; the likelihood
        needs ``SequenceProbs.target_after`` / ``draft_after`` at every ``x_<t + d`` (``recover`` is the rule at k = 1
        on a context-free pair, where the next row is p).
    later_raw : bool, default False
        ``target_processed_first_only``: round positions after the first verify against the unprocessed target
        (``p_raw``: acceptance and residual); with ``target = "p_raw"`` the bonus token too.
    """

    name: str
    declared: str
    description: str
    propose: Callable[[Views], np.ndarray] = lambda v: v.q
    acceptance: Callable[[Views], np.ndarray] = lambda v: _ratio(v.p, v.q)
    recover: Callable[[Views], np.ndarray] = lambda v: _residual(v.p, v.q)
    reject_emit: Callable | None = None
    target: str = "p"
    bonus_offset: int = 0
    keep_suffix: bool = False
    shared_uniform: bool = False
    same_as_target: bool = False
    needs_raw: bool = False
    latent: bool = False
    lead: int = 0
    position_acceptance: tuple[float, ...] | None = None
    aliases: tuple[str, ...] = field(default=())
    composable: bool = True
    late_recover: bool = False
    later_raw: bool = False

    def acceptance_at(self, accepted: int, v: Views, acceptance: np.ndarray) -> np.ndarray:
        """Acceptance thresholds of the next draft after ``accepted`` drafts of the round (``acceptance`` = the hook's)."""
        rates = self.position_acceptance
        return acceptance if rates is None else np.full_like(v.p, rates[min(accepted, len(rates) - 1)])

    @property
    def kind(self) -> str:
        return "rule" if self.name in RULES else "decoder"


def _rule(name: str, **kw) -> Mechanism:
    r = RULES[name]
    rates = None if r.position_acceptance is None else tuple(float(c) for c in r.position_acceptance)
    return Mechanism(name, r.declared, r.description, bonus_offset=r.bonus_offset, keep_suffix=r.keep_suffix,
                     shared_uniform=r.shared_uniform, position_acceptance=rates, aliases=kw.pop("aliases", (name,)), **kw)


_SYNTHETIC_RATE_1 = float(RULES["synthetic_acceptance"].position_acceptance[0])


MECHANISMS: dict[str, Mechanism] = {m.name: m for m in [
    _rule("canonical", aliases=("reference", "ancestral", "degenerate_residual_div0")),
    _rule("fresh_target_match", acceptance=lambda v: v.p, reject_emit=_fresh_match_reject_emit),
    _rule("block_verification", same_as_target=True),
    _rule("full_p_fallback", recover=lambda v: v.p),
    _rule("greedy_draft", propose=lambda v: _one_hot_argmax(v.q), aliases=("greedy_draft", "greedy_draft_softmax_q")),
    _rule("softmax_residual", recover=lambda v: _softmax_residual(v.p, v.q)),
    _rule("deterministic_acceptance", acceptance=lambda v: (v.p >= v.q).astype(np.float64)),
    _rule("greedy_acceptance", acceptance=lambda v: _one_hot_argmax(v.p), recover=lambda v: v.p),
    _rule("bonus_wrong_position"),
    _rule("draft_suffix_kept"),
    _rule("shared_uniform"),
    _rule("typical_acceptance", acceptance=lambda v: _typical(v.p), recover=lambda v: v.p),
    _rule("accept_all", acceptance=lambda v: np.ones_like(v.p), recover=lambda v: v.p),
    _rule("residual_by_index", recover=lambda v: _residual_by_index(v.p, v.q)),
    _rule("synthetic_acceptance", acceptance=lambda v: np.full_like(v.p, _SYNTHETIC_RATE_1)),  # at the rule's default rates
    Mechanism("draft_raw_q", "biased", "the draft samples processed q, the ratio and residual use softmax(raw draft logits)",
              acceptance=lambda v: _ratio(v.p, v.q_raw), recover=lambda v: _residual(v.p, v.q_raw), needs_raw=True,
              aliases=("draft_raw_q",)),
    Mechanism("target_unprocessed", "biased", "the target is verified and the bonus drawn with default sampling params "
              "(T = 1, no top-k/top-p/penalty): the emitted law is the unprocessed target",
              acceptance=lambda v: _ratio(v.p_raw, v.q), recover=lambda v: _residual(v.p_raw, v.q), target="p_raw",
              needs_raw=True, aliases=("target_unprocessed",)),
    Mechanism("draft_processors_differ", "biased", "the draft samples with top-k/top-p (processed q), the ratio and "
              "residual use its temperature-only probs (issue 26; the same law as draft_raw_q at T = 1)",
              acceptance=lambda v: _ratio(v.p, _q_temp(v)), recover=lambda v: _residual(v.p, _q_temp(v)),
              needs_raw=True, aliases=("draft_processors_differ",)),
    Mechanism("q_dtype_mismatch", "biased", "the draft samples from its probs rounded to bfloat16 and renormalised; the "
              "ratio and residual use the unrounded q (issue 29 kind 7)", propose=lambda v: _bfloat16_renormalised(v.q),
              composable=False, aliases=("q_dtype_mismatch",)),
    _rule("recovered_one_late", recover=lambda v: v.p, late_recover=True),
    _rule("draft_accept_same_uniform", acceptance=lambda v: _same_uniform_acceptance(v.p, v.q)),
    Mechanism("target_processed_first_only", "biased", "the request's temperature / top-k / top-p applied at the first "
              "position of each round only; later acceptance tests, residuals and the bonus token use the unprocessed "
              "target (the same law as the target at T = 1 without filters)", target="p_raw", needs_raw=True,
              later_raw=True, aliases=("target_processed_first_only",)),
    Mechanism("kv_not_rolled_back", "biased", "rejected draft tokens stay in the target and draft KV caches: later "
              "probs condition on them", latent=True, aliases=("kv_not_rolled_back",)),
    Mechanism("batch_cross_talk", "biased", "row 0's accepted length is applied to every row of the batch (the law of "
              "a row other than row 0)", latent=True, aliases=("batch_cross_talk",)),
]}

UNMODELLED: dict[str, str] = {}  # decoder mutants without a mechanism (every registered one has one now)


def mechanism_for_decoder(decoder_name: str) -> str | None:
    """The mechanism whose law a registered decoder has (None when it is not modelled)."""
    for m in MECHANISMS.values():
        if decoder_name in m.aliases:
            return m.name
    return None
