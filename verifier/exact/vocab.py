"""Drafts in another vocabulary (issue 29, bug kind 7): exact laws of a draft mapped into the target's ids.

A reduced-vocabulary draft (EAGLE-3's ``d2t``) or a draft with another tokenizer (transformers'
``assistant_tokenizer``) samples a *draft id* ``d`` from its own probs ``q_D`` over ``Vd`` ids, and proposes the
target id ``m(d)`` of a draft-to-target map ``m: [Vd] -> [V]`` (possibly many-to-one, possibly not onto).  The
lossless way verifies the proposed target id against the law it was proposed from, the pushforward

    q_T(t) = sum_{d : m(d) = t} q_D(d),

accept with ``min(1, p(t) / q_T(t))``, recovered token ~ ``residual(p, q_T)``: speculative sampling of the target
with the draft ``q_T`` (Leviathan et al. 2023, Alg. 1), so the emitted law is the target's.

Every mutant here is one statement: **the draft samples from q_s, the verifier uses q_v** (ratio and residual).
A :class:`DraftView` says how q_s and q_v are derived from the draft's own ``q_D``:

* ``mapped`` (exact): q_s = q_D, the ratio divides by ``q_T(m(d))``, residual with q_T;
* ``many_to_one_q_single``: the ratio divides by ``q_D(d)`` of the sampled draft id instead of the summed
  ``q_T(m(d))`` (a gather at the draft id); residual with q_T.  Biased only where ``m`` is many-to-one;
* ``q_permuted``: the verifier reads q in another vocabulary order, ``q_v(t) = q_T(pi(t))`` for a stated
  permutation ``pi`` (transformers 5.24.0's universal assisted generation: the pruned head's columns written in
  ``get_vocab()`` order, reports/audits/transformers-5.24.0/FINDINGS.md section 1);
* ``q_dtype_mismatch``: the draft samples from ``q_D`` rounded to bfloat16 (or float16) and renormalised, the
  ratio and residual use the unrounded q (float32 q is within 6e-8 relative of the exact one: taken as exact);
* ``draft_processors_differ``: the draft samples with top-k (the request's filter), the reported q is
  temperature-only (unfiltered).

With the identity map (``Vd = V``) every view is a rule on (p, q) of the shared vocabulary, so the same laws cover
same-vocabulary drafts.  The latent draft id matters only to ``many_to_one_q_single``; the enumeration sums over it.

Glossary: see :mod:`verifier.protocols` (target/draft, accepted, rejected position, residual, recovered token,
bonus token, emitted tokens, round, num_draft_tokens).

References
----------
Leviathan, Kalman, Matias (2023), Algorithm 1.  Li et al. (2025), "EAGLE-3", reduced draft vocabulary with a
``d2t`` map.  Timor et al. (2025), "Accelerating LLM Inference with Lossless Speculative Decoding Algorithms for
Heterogeneous Vocabularies" (transformers ``assistant_tokenizer``).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable, Iterator, Sequence

from verifier.errors import invalid_argument
from verifier.exact.laws import _cut, _models_iv, _positive_int_iv, _rounds_law
from verifier.exact.rules import get_rule, residual
from verifier.exact.tabular import TabularLM

__all__ = ["MappedDraft", "DraftView", "VOCAB_MODES", "DTYPE_BITS", "map_draft", "default_draft_to_target",
           "default_permutation", "default_map_for", "vocab_view", "round_to_dtype", "vocab_round_law", "vocab_n_token_law",
           "vocab_accepted_count_law"]

Probs = Sequence[Fraction]
VOCAB_MODES = ("mapped", "many_to_one_q_single", "q_permuted", "q_dtype_mismatch", "draft_processors_differ")
# significand bits (implicit bit included) and the smallest normal exponent of each float format
DTYPE_BITS = {"bfloat16": (8, -126), "float16": (11, -14), "float32": (24, -126)}
DEFAULT_DTYPE = "bfloat16"
DEFAULT_TOP_K = 2  # draft_processors_differ: the filter the draft samples with (tabular vocabularies of 3-4)


@dataclass(frozen=True)
class MappedDraft:
    """A draft with its own vocabulary of ``Vd`` ids and a draft-to-target id map.

    Attributes
    ----------
    rows : dict[tuple[int, ...], tuple[Fraction, ...]]
        ``q_D`` (length Vd) after each context of ``context_len`` *target* ids (the draft reads the target's
        tokens, as EAGLE drafts do).
    draft_to_target : tuple of int, length Vd
        ``m(d)``: the target id draft id ``d`` proposes.
    target_vocab_size : int
    context_len : int
    name : str
    """

    rows: dict
    draft_to_target: tuple[int, ...]
    target_vocab_size: int
    context_len: int
    name: str = ""

    @property
    def draft_vocab_size(self) -> int:
        return len(self.draft_to_target)

    def probs(self, prefix: Sequence[int]) -> tuple[Fraction, ...]:
        """``q_D`` over the draft ids after ``prefix`` (target ids; only the last ``context_len`` matter)."""
        ctx = tuple(int(t) for t in prefix[len(prefix) - self.context_len:]) if self.context_len else ()
        return self.rows[ctx]

    def target_probs(self, prefix: Sequence[int]) -> tuple[Fraction, ...]:
        """``q_T`` over the target ids: the pushforward of ``q_D`` by the map."""
        return pushforward(self.probs(prefix), self.draft_to_target, self.target_vocab_size)


def pushforward(q_draft: Probs, draft_to_target: Sequence[int], vocab_size: int) -> tuple[Fraction, ...]:
    out = [Fraction(0)] * vocab_size
    for d, qd in enumerate(q_draft):
        out[draft_to_target[d]] += qd
    return tuple(out)


def default_draft_to_target(vocab_size: int) -> tuple[int, ...]:
    """``(0, 0, 1, ..., V - 2)``: ``Vd = V`` draft ids, target id 0 reached by two of them (many-to-one) and
    target id ``V - 1`` by none (a reduced vocabulary).

    >>> default_draft_to_target(4)
    (0, 0, 1, 2)
    """
    return (0,) + tuple(range(vocab_size - 1))


MANY_TO_ONE_MODES = ("mapped", "many_to_one_q_single")  # the modes about the map itself


def default_map_for(mode: str, vocab_size: int) -> tuple[int, ...]:
    """The map a mode is measured with by default: :func:`default_draft_to_target` for the modes about the map
    (``mapped``, ``many_to_one_q_single``), the identity for the others (their defect is in what the draft samples or
    how q is read, whatever the map; with the identity they are the same-vocabulary family hypotheses).

    >>> default_map_for("q_permuted", 3)
    (0, 1, 2)
    """
    return default_draft_to_target(vocab_size) if mode in MANY_TO_ONE_MODES else tuple(range(vocab_size))


def default_permutation(vocab_size: int) -> tuple[int, ...]:
    """The reversed id order ``pi(t) = V - 1 - t`` (another tokenizer's order; any permutation can be passed)."""
    return tuple(range(vocab_size - 1, -1, -1))


def map_draft(draft: TabularLM, draft_to_target: Sequence[int] | None = None, weights: Sequence | None = None) -> MappedDraft:
    """A draft in its own vocabulary built from a same-vocabulary draft: draft id ``d`` gets ``q(m(d)) w_d / Z``.

    This is what a draft head over the ``Vd`` columns ``logits[m(d)] + log w_d`` gives at T = 1
    (:class:`verifier.decoders.vocab_mutants.VocabMappedDecoder` builds its draft logits so): the mass of a
    target id is split among its draft ids by ``w`` (default: equally), ids no draft id reaches lose their mass,
    ``Z = sum of q over the ids reached``.

    Parameters
    ----------
    draft : TabularLM
        The same-vocabulary draft.
    draft_to_target : sequence of int, default :func:`default_draft_to_target`
        Target ids in ``0..V-1``; at least one id with draft mass in every context.
    weights : sequence of numbers, optional
        ``w_d > 0`` per draft id; default ``1 / |m^-1(m(d))|``.

    Returns
    -------
    MappedDraft

    Raises
    ------
    InvalidArgumentError
        A map entry outside the target vocabulary, an empty map, a non-positive weight or a length mismatch, or a
        context where no reached target id has draft mass.
    """
    if not isinstance(draft, TabularLM):
        raise invalid_argument("draft", type(draft).__name__, "a verifier.exact.TabularLM", where="map_draft")
    m = _map_iv(draft_to_target, draft.vocab_size)
    w = _weights_iv(weights, m)
    rows = {}
    for ctx in draft.contexts:
        q = draft.probs(ctx)
        mass = [q[t] * wd for t, wd in zip(m, w)]
        total = sum(mass, Fraction(0))
        if total == 0:
            raise invalid_argument("draft_to_target", m, f"a map reaching a token with draft mass after context {ctx}",
                                   where="map_draft")
        rows[ctx] = tuple(x / total for x in mass)
    return MappedDraft(rows, m, draft.vocab_size, draft.context_len, f"{draft.name}|d2t={list(m)}")


def _int_ids(seq) -> tuple[int, ...] | None:
    """``seq`` as a tuple of ints when every entry is an integer (``operator.index``: int, numpy or 0-d integer
    tensor; no bool, float or str -- ``int()`` would truncate 1.5 to 1 or read "012" digit by digit), else None."""
    import operator

    if isinstance(seq, (str, bytes)):
        return None
    try:
        items = list(seq)
        if any(isinstance(t, bool) for t in items):
            return None
        return tuple(operator.index(t) for t in items)
    except (TypeError, ValueError):
        return None


def _map_iv(draft_to_target, vocab_size: int) -> tuple[int, ...]:
    m = default_draft_to_target(vocab_size) if draft_to_target is None else draft_to_target
    allowed = f"a non-empty sequence of integer target ids in 0..{vocab_size - 1}"
    out = _int_ids(m)
    if not out or any(not 0 <= t < vocab_size for t in out):
        raise invalid_argument("draft_to_target", m, allowed)
    return out


def _weights_iv(weights, m: tuple[int, ...]) -> tuple[Fraction, ...]:
    if weights is None:
        count = defaultdict(int)
        for t in m:
            count[t] += 1
        return tuple(Fraction(1, count[t]) for t in m)
    try:
        w = tuple(Fraction(repr(x)) if isinstance(x, float) else Fraction(x) for x in weights)
    except (TypeError, ValueError):
        raise invalid_argument("weights", weights, "positive numbers, one per draft id") from None
    if len(w) != len(m) or any(x <= 0 for x in w):
        raise invalid_argument("weights", weights, f"{len(m)} positive numbers, one per draft id")
    return w


def round_to_dtype(x: Fraction, dtype: str = DEFAULT_DTYPE) -> Fraction:
    """``x >= 0`` rounded to the nearest ``dtype`` value (ties to even), exactly, as ``torch.Tensor.to(dtype)``.

    >>> round_to_dtype(Fraction(1, 3), "bfloat16")
    Fraction(171, 512)
    """
    bits, emin = _dtype_iv(dtype)
    if x <= 0:
        return Fraction(0)
    e = x.numerator.bit_length() - x.denominator.bit_length()
    if Fraction(2) ** e > x:
        e -= 1
    ulp = Fraction(2) ** (max(e, emin) - bits + 1)
    n = x / ulp
    whole = n.numerator // n.denominator
    rest = n - whole
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and whole % 2):
        whole += 1
    return whole * ulp


def _dtype_iv(dtype: str) -> tuple[int, int]:
    if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
        raise invalid_argument("dtype", dtype, "one of " + ", ".join(DTYPE_BITS))
    return DTYPE_BITS[dtype]


def _renormalised(w: Sequence[Fraction]) -> tuple[Fraction, ...]:
    total = sum(w, Fraction(0))
    return tuple(x / total for x in w)


def _top_k(q: Probs, k: int) -> tuple[Fraction, ...]:
    """Keep the ``k`` largest entries, ties with the k-th kept (:func:`verifier.sampling.processed_probs`), renormalised."""
    if k >= len(q):
        return tuple(q)
    kth = sorted(q, reverse=True)[k - 1]
    return _renormalised([x if x >= kth else Fraction(0) for x in q])


@dataclass(frozen=True)
class DraftView:
    """"The draft samples from q_s, the verifier uses q_v": one mode of a mapped draft.

    Attributes
    ----------
    name : str
        One of :data:`VOCAB_MODES`.
    declared : {"exact", "biased"}
    description : str
    sampled : callable (q_D) -> probs over the draft ids
        The law the draft id is drawn from.
    ratio_q : callable (q_D, q_T, q_v, d) -> Fraction
        What the acceptance test divides ``p(m(d))`` by when draft id ``d`` was sampled.
    verified : callable (q_T) -> probs over the target ids
        ``q_v``: the q the residual is taken against (and, except for ``many_to_one_q_single``, the ratio).
    settings : dict
        The mode's parameters (permutation, dtype, top_k).
    """

    name: str
    declared: str
    description: str
    sampled: Callable[[Probs], Probs]
    ratio_q: Callable[[Probs, Probs, Probs, int, int], Fraction]
    verified: Callable[[Probs], Probs]
    settings: dict


def _same(q):
    return tuple(q)


def _summed_q(q_d, q_t, q_v, d, t):
    return q_v[t]


def vocab_view(mode: str = "mapped", *, permutation: Sequence[int] | None = None, dtype: str = DEFAULT_DTYPE,
               top_k: int = DEFAULT_TOP_K, vocab_size: int | None = None) -> DraftView:
    """The :class:`DraftView` of a mode of :data:`VOCAB_MODES`.

    Parameters
    ----------
    mode : str, default "mapped"
    permutation : sequence of int, optional
        ``q_permuted``: ``pi`` as a list (``q_v[t] = q_T[pi[t]]``); default :func:`default_permutation`
        (needs ``vocab_size``).
    dtype : {"bfloat16", "float16", "float32"}, default "bfloat16"
        ``q_dtype_mismatch``: the format the draft's sampling probs are rounded to.
    top_k : int, default 2
        ``draft_processors_differ``: the draft samples with this top-k, q is reported unfiltered.
    vocab_size : int, optional
        The target vocabulary (for the default permutation and its check).

    Raises
    ------
    InvalidArgumentError
        Unknown mode, a permutation that is not one of ``0..V-1``, an unknown dtype, ``top_k < 1``.
    """
    if mode not in VOCAB_MODES:
        raise invalid_argument("mode", mode, "one of " + ", ".join(VOCAB_MODES))
    if mode == "mapped":
        return DraftView(mode, "exact", "the draft proposes m(d); ratio and residual use the summed q_T (lossless)",
                         _same, _summed_q, _same, {})
    if mode == "many_to_one_q_single":
        return DraftView(mode, "biased", "the acceptance ratio divides by q_D(d) of the sampled draft id instead of the "
                         "summed q_T(m(d)); residual with q_T", _same, lambda q_d, q_t, q_v, d, t: q_d[d], _same, {})
    if mode == "q_permuted":
        pi = _permutation_iv(permutation, vocab_size)
        return DraftView(mode, "biased", f"the verifier reads q in another vocabulary order: q_v[t] = q_T[pi[t]], "
                         f"pi = {list(pi)}", _same, _summed_q, lambda q_t: tuple(q_t[pi[t]] for t in range(len(q_t))),
                         {"permutation": list(pi)})
    if mode == "q_dtype_mismatch":
        _dtype_iv(dtype)
        return DraftView(mode, "biased", f"the draft samples from q rounded to {dtype} and renormalised; ratio and "
                         "residual use the unrounded q", lambda q_d: _renormalised([round_to_dtype(x, dtype) for x in q_d]),
                         _summed_q, _same, {"dtype": dtype})
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise invalid_argument("top_k", top_k, "an integer >= 1")
    return DraftView(mode, "biased", f"the draft samples with top-k {top_k}; q is reported temperature-only "
                     "(unfiltered) to the ratio and residual", lambda q_d: _top_k(q_d, top_k), _summed_q, _same,
                     {"top_k": top_k})


def _permutation_iv(permutation, vocab_size):
    if permutation is None:
        if vocab_size is None:
            raise invalid_argument("permutation", None, "a permutation of 0..V-1 (or vocab_size for the default)")
        return default_permutation(vocab_size)
    pi = _int_ids(permutation)
    if pi is None:
        raise invalid_argument("permutation", permutation, "a permutation of 0..V-1 (integers)")
    if sorted(pi) != list(range(len(pi))) or (vocab_size is not None and len(pi) != vocab_size):
        raise invalid_argument("permutation", permutation, f"a permutation of 0..{(vocab_size or len(pi)) - 1}")
    return pi


def _acceptance(p_t: Fraction, q_a: Fraction) -> Fraction:
    """P(accept): ``u * q_a < p_t`` for u ~ U[0, 1) (the kernels' test): ``min(1, p/q)``, 1 when q_a = 0 < p_t."""
    if q_a == 0:
        return Fraction(int(p_t > 0))
    return min(Fraction(1), p_t / q_a)


def _vocab_round_outcomes(target: TabularLM, draft: MappedDraft, prefix: tuple[int, ...], k: int,
                          view: DraftView) -> Iterator[tuple[tuple[int, ...], int, Fraction]]:
    """``(emitted tokens, accepted drafts, probability)`` of one round, summed over the latent draft ids."""
    eos, m = target.eos_token_id, draft.draft_to_target

    def verify(accepted: tuple[int, ...], prob: Fraction):
        if accepted and accepted[-1] == eos:  # an accepted EOS ends the sequence
            yield accepted, len(accepted), prob
            return
        context = prefix + accepted
        p = target.probs(context)
        if len(accepted) == k:  # bonus token from the target at k + 1
            for y, py in enumerate(p):
                if py:
                    yield accepted + (y,), k, prob * py
            return
        q_d = draft.probs(context)
        q_t = pushforward(q_d, m, len(p))
        q_v = view.verified(q_t)
        accept: dict[int, Fraction] = defaultdict(Fraction)
        reject = Fraction(0)
        for d, qs in enumerate(view.sampled(q_d)):  # draft id d drawn with qs, target id m(d) proposed
            if qs:
                a = _acceptance(p[m[d]], view.ratio_q(q_d, q_t, q_v, d, m[d]))
                accept[m[d]] += qs * a
                reject += qs * (1 - a)
        if reject:  # recovered token ~ residual(p, q_v), p where it is empty (kernels.residual_or_target)
            recovered = residual(p, q_v) or tuple(p)
            for y, ry in enumerate(recovered):
                if ry:
                    yield accepted + (y,), len(accepted), prob * reject * ry
        for t, mass in accept.items():
            if mass:
                yield from verify(accepted + (t,), prob * mass)

    yield from verify((), Fraction(1))


def _iv(target, draft, prefix, k, view, fn) -> tuple[tuple[int, ...], DraftView]:
    if not isinstance(draft, MappedDraft):
        raise invalid_argument("draft", type(draft).__name__, "a verifier.exact.vocab.MappedDraft (map_draft)", where=fn)
    if not isinstance(view, DraftView):
        view = vocab_view(view, vocab_size=getattr(target, "vocab_size", None))
    if draft.target_vocab_size != getattr(target, "vocab_size", None):
        raise invalid_argument("draft.target_vocab_size", draft.target_vocab_size,
                               f"target.vocab_size={getattr(target, 'vocab_size', None)}", where=fn)
    stand_in = TabularLM({ctx: [1] + [0] * (target.vocab_size - 1) for ctx in draft.rows}, target.vocab_size,
                         draft.context_len, target.eos_token_id)
    return _models_iv(target, stand_in, prefix, k, fn, get_rule("canonical")), view


def vocab_round_law(target: TabularLM, draft: MappedDraft, prefix: Sequence[int], num_draft_tokens: int,
                    view: str | DraftView = "mapped", max_new_tokens: int | None = None) -> dict:
    """Exact law of the emitted tokens of one round with a mapped draft.

    Parameters
    ----------
    target : TabularLM
    draft : MappedDraft
        From :func:`map_draft`; its ``target_vocab_size`` is the target's.
    prefix : sequence of int
        Target ids, at least both models' ``context_len``.
    num_draft_tokens : int
        k >= 1.
    view : str or DraftView, default "mapped"
        A mode name (default parameters) or :func:`vocab_view`'s result.
    max_new_tokens : int, optional
        Emitted tokens beyond this many are dropped.

    Returns
    -------
    dict[tuple[int, ...], Fraction]
        Emitted tokens (1 .. k + 1, cut after EOS) -> probability.  ``view="mapped"`` gives one round of plain
        target sampling's law (lossless).

    Raises
    ------
    InvalidArgumentError
        As :func:`verifier.exact.round_law`, a draft that is not a :class:`MappedDraft` of the target's vocabulary,
        or a bad view.
    """
    prefix_t, view_obj = _iv(target, draft, prefix, num_draft_tokens, view, "vocab_round_law")
    if max_new_tokens is not None:
        _positive_int_iv(max_new_tokens, "max_new_tokens", "vocab_round_law")
    return _round_law(target, draft, prefix_t, num_draft_tokens, view_obj, max_new_tokens)


def _round_law(target, draft, prefix, k, view, limit) -> dict:
    law: dict = defaultdict(Fraction)
    for emitted, _, prob in _vocab_round_outcomes(target, draft, prefix, k, view):
        law[_cut(emitted, target.eos_token_id, limit)] += prob
    return dict(law)


def vocab_n_token_law(target: TabularLM, draft: MappedDraft, prefix: Sequence[int], num_draft_tokens: int,
                      num_tokens: int, view: str | DraftView = "mapped") -> dict:
    """Exact law of the first ``num_tokens`` emitted tokens (tuples of length N, -1 after EOS) with a mapped draft.

    Same format as :func:`verifier.exact.n_token_law`; equals :func:`verifier.exact.target_law` for
    ``view="mapped"`` and differs for the biased modes where their q_s and q_v differ on the pair.

    Raises
    ------
    InvalidArgumentError
        As :func:`vocab_round_law`, and ``num_tokens < 1``.

    Examples
    --------
    >>> from verifier.exact import standard_tabular_pairs, target_law
    >>> pair = standard_tabular_pairs()["trigram3"]
    >>> d = map_draft(pair.draft)
    >>> vocab_n_token_law(pair.target, d, pair.prefix, 1, 1) == target_law(pair.target, pair.prefix, 1)
    True
    >>> vocab_n_token_law(pair.target, d, pair.prefix, 1, 1, "many_to_one_q_single") == target_law(pair.target, pair.prefix, 1)
    False
    """
    prefix_t, view_obj = _iv(target, draft, prefix, num_draft_tokens, view, "vocab_n_token_law")
    _positive_int_iv(num_tokens, "num_tokens", "vocab_n_token_law")
    return _rounds_law(lambda ctx, limit: _round_law(target, draft, ctx, num_draft_tokens, view_obj, limit),
                       prefix_t, num_tokens, target.eos_token_id)


def vocab_accepted_count_law(target: TabularLM, draft: MappedDraft, prefix: Sequence[int], num_draft_tokens: int,
                             view: str | DraftView = "mapped") -> tuple[Fraction, ...]:
    """Exact law of the accepted draft count of the first round (length k + 1), as
    :func:`verifier.exact.accepted_count_law`.

    Raises
    ------
    InvalidArgumentError
        As :func:`vocab_round_law`.
    """
    prefix_t, view_obj = _iv(target, draft, prefix, num_draft_tokens, view, "vocab_accepted_count_law")
    counts = [Fraction(0)] * (num_draft_tokens + 1)
    for _, accepted, prob in _vocab_round_outcomes(target, draft, prefix_t, num_draft_tokens, view_obj):
        counts[accepted] += prob
    return tuple(counts)
