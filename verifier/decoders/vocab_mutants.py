"""Drafts in another vocabulary (issue 29, bug kind 7): a draft head over its own ids, mapped into the target's.

:class:`VocabMappedDecoder` is the reference speculative decoder whose draft proposes through a draft vocabulary:
the draft model reads target ids (as EAGLE drafts do) and its head has ``Vd`` columns, column ``d`` =
``logits[m(d)] + log w_d`` for a draft-to-target map ``m`` (option ``draft_to_target``, default
:func:`verifier.exact.vocab.default_draft_to_target`: target id 0 reached by two draft ids, id V - 1 by none) and
split weights ``w`` (default equal).  The draft id ``d ~ q_D`` is drawn from the draft's processed probs over its
own ids and the target id ``m(d)`` proposed.  The default map is the many-to-one one for the modes about the map
(``vocab_mapped``, ``many_to_one_q_single``) and the identity for the others, whose defect is in what the draft
samples or how q is read, whatever the map (so their law is the family hypothesis of the same name,
:mod:`verifier.diagnose.mechanisms`, on a same-vocabulary draft).  One ``mode`` per defect, each "the draft samples from q_s, the
verifier uses q_v" (:mod:`verifier.exact.vocab`, whose exact laws the rows follow):

* ``vocab_mapped`` (exact): ratio and residual against the pushforward ``q_T = scatter_add(q_D, m)``;
* ``many_to_one_q_single``: the ratio divides by ``q_D(d)`` gathered at the draft id (residual with q_T);
* ``q_permuted``: ratio and residual read ``q_T`` in another id order, ``q_v[:, t] = q_T[:, pi[t]]`` (option
  ``permutation``, default the reversed order; transformers 5.24.0's universal assisted generation);
* ``q_dtype_mismatch``: the draft samples from ``q_D`` cast to ``dtype`` (default bfloat16; the inverse-CDF draw
  renormalises), ratio and residual use the float64 q;
* ``draft_processors_differ``: the draft samples with the request's processors (top-k / top-p), the q handed to
  the kernel is temperature-only -- visible only when the request sets top-k or top-p.

:data:`VOCAB_DECODER_REGISTRY` maps the names to :class:`~verifier.decoders.spec.DecoderSpec`;
:func:`verifier.decoders.make_decoder` finds them.

Glossary: see :mod:`verifier.protocols`.
"""

from __future__ import annotations

import math

import torch

from verifier.decoders import kernels as K
from verifier.decoders.kernels import sample_from_probs
from verifier.decoders.spec import DecoderSpec
from verifier.decoders.speculative import SpeculativeDecoder
from verifier.errors import invalid_argument
from verifier.exact import vocab as V
from verifier.sampling import SamplingConfig, processed_probs

__all__ = ["VocabMappedDecoder", "VOCAB_DECODER_REGISTRY", "VOCAB_DECODER_MODES", "MANY_TO_ONE_MODES"]

MANY_TO_ONE_MODES = ("vocab_mapped", "many_to_one_q_single")  # default map (0, 0, 1, ..., V - 2); the others: identity
# (verifier.exact.vocab.default_map_for)
# decoder name -> exact mode of verifier.exact.vocab
VOCAB_DECODER_MODES = {"vocab_mapped": "mapped", "many_to_one_q_single": "many_to_one_q_single",
                       "q_permuted": "q_permuted", "q_dtype_mismatch": "q_dtype_mismatch",
                       "draft_processors_differ": "draft_processors_differ"}
_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


class VocabMappedDecoder(SpeculativeDecoder):
    """Speculative decoding with a draft head over its own ``Vd`` ids and a draft-to-target map.

    Parameters
    ----------
    target, draft : causal LM
        Same logits width V (the draft reads target ids; its head is cut to the draft vocabulary here).
    num_draft_tokens : int, default 4
    mode : str, default "vocab_mapped"
        A key of :data:`VOCAB_DECODER_MODES`.
    draft_to_target : sequence of int, optional
        ``m``, Vd target ids; default ``(0, 0, 1, ..., V - 2)`` for ``vocab_mapped`` and ``many_to_one_q_single``,
        the identity for the other modes.
    weights : sequence of float, optional
        ``w_d > 0`` per draft id (``log w_d`` added to column d); default ``1 / |m^-1(m(d))|``.
    permutation : sequence of int, optional
        ``q_permuted``: ``pi``, a permutation of ``0..V-1``; default reversed.
    dtype : {"bfloat16", "float16", "float32"}, default "bfloat16"
        ``q_dtype_mismatch``: the draft's sampling probs' format.
    **options
        As :class:`~verifier.decoders.SpeculativeDecoder` (``eos_token_id``, ``name``, ``precision``).

    Raises
    ------
    InvalidArgumentError
        An unknown mode, a map entry outside ``0..V-1``, bad weights, a permutation of another size, an unknown dtype,
        or the base class's errors.

    Notes
    -----
    At T = 1 without filters the draft's law over its ids is :func:`verifier.exact.vocab.map_draft`'s, so
    :func:`verifier.exact.vocab.vocab_n_token_law` gives each mode's exact emitted law (tests/decoders).
    """

    def __init__(self, target, draft, num_draft_tokens: int = 4, *, mode: str = "vocab_mapped", draft_to_target=None,
                 weights=None, permutation=None, dtype: str = "bfloat16", **options) -> None:
        if not isinstance(mode, str) or mode not in VOCAB_DECODER_MODES:
            raise invalid_argument("mode", mode, "one of " + ", ".join(VOCAB_DECODER_MODES))
        super().__init__(target, draft, num_draft_tokens, kernel=self._verify, **options)
        self.mode = mode
        if draft_to_target is None:
            draft_to_target = V.default_map_for(VOCAB_DECODER_MODES[mode], self.vocab_size)
        m = V._map_iv(draft_to_target, self.vocab_size)
        w = V._weights_iv(weights, m)
        self._map = torch.tensor(m, dtype=torch.int64, device=self.device)
        self._log_w = torch.tensor([math.log(float(x)) for x in w], dtype=torch.float64, device=self.device)
        self.settings = {**self.settings, "mode": mode, "draft_to_target": list(m)}
        self._perm = None
        if mode == "q_permuted":
            pi = V._permutation_iv(permutation, self.vocab_size)
            self._perm = torch.tensor(pi, dtype=torch.int64, device=self.device)
            self.settings["permutation"] = list(pi)
        self._dtype = None
        if mode == "q_dtype_mismatch":
            V._dtype_iv(dtype)
            self._dtype = _DTYPES[dtype]
            self.settings["dtype"] = dtype
        self._ratio_q: list[torch.Tensor] = []  # per draft position of the round: what the ratio divides by

    def _propose(self, logits, sampling: SamplingConfig, seen, gen):
        """Draft id ``d ~ q_s`` over the draft vocabulary; returns (target id ``m(d)`` (B,), q_v (B, V))."""
        head = logits.to(torch.float64)[:, self._map] + self._log_w  # the draft's head over its Vd ids
        seen_d = None if seen is None else seen[:, self._map]
        q_d = processed_probs(head, sampling, seen_d)
        reported = q_d
        if self.mode == "draft_processors_differ":  # BUG on purpose: q reported temperature-only
            reported = processed_probs(head, SamplingConfig(temperature=sampling.temperature,
                                                            repetition_penalty=sampling.repetition_penalty), seen_d)
        sampled = q_d if self._dtype is None else q_d.to(self._dtype).to(torch.float64)  # BUG on purpose (dtype)
        d = sample_from_probs(sampled, torch.rand(q_d.shape[0], dtype=torch.float64, device=q_d.device, generator=gen))
        t = self._map[d]
        q_t = torch.zeros(q_d.shape[0], self.vocab_size, dtype=torch.float64, device=q_d.device).index_add_(1, self._map, reported)
        q_v = q_t if self._perm is None else q_t[:, self._perm]  # BUG on purpose (q_permuted): another id order
        if self.mode == "many_to_one_q_single":  # BUG on purpose: the sampled draft id's own q, not the sum
            self._ratio_q.append(reported.gather(1, d[:, None])[:, 0])
        else:
            self._ratio_q.append(q_v.gather(1, t[:, None])[:, 0])
        return t, q_v

    def _verify(self, target_probs, draft_probs, draft_token_ids, generator):
        """The reference chain verification, the ratio dividing by this round's ``_ratio_q``."""
        k = draft_token_ids.shape[1]  # this round's k proposals (entries left by an interrupted call are dropped)
        ratio_q, self._ratio_q = torch.stack(self._ratio_q[-k:], dim=1), []
        args = K._verify_chain_iv(target_probs, draft_probs, draft_token_ids, generator)

        def accept(p, q, ids, u):
            return u * ratio_q < p[:, :ids.shape[1]].gather(-1, ids[..., None])[..., 0]

        return K._chain(*args, generator, accept_rule=accept)


def _factory(decoder_name: str):
    def make(target, draft, k, **options):
        return VocabMappedDecoder(target, draft, k, mode=decoder_name, **options)
    return make


_ENTRIES = [
    DecoderSpec("vocab_mapped", "A draft over its own ids (Vd, draft_to_target map, many-to-one) verified against the "
                "summed pushforward q_T (lossless).", "exact", "never (its law is the target's)", _factory("vocab_mapped")),
    DecoderSpec("many_to_one_q_single", "The acceptance ratio divides by q_D(d) of the sampled draft id instead of the "
                "summed q_T(m(d)) (residual with q_T).", "biased",
                "only where the draft-to-target map is many-to-one and p(t) < q_T(t) at a target id with two draft ids "
                "(any T, k, first position)", _factory("many_to_one_q_single")),
    DecoderSpec("q_permuted", "The verifier reads q in another vocabulary order (q_v[t] = q_T[pi[t]]): a "
                "different-tokenizer draft whose columns are written in another id order.", "biased",
                "any config wherever q_T is not invariant under pi (first position already)", _factory("q_permuted")),
    DecoderSpec("q_dtype_mismatch", "The draft samples from its probs cast to bfloat16 (option dtype), the ratio and "
                "residual use the float64 q.", "biased",
                "wherever rounding moves q: at most 2^-9 relative per entry in bfloat16 (TV ~1e-3 or less on the "
                "tabular pairs): out of reach of any affordable n", _factory("q_dtype_mismatch")),
    DecoderSpec("draft_processors_differ", "The draft samples with the request's top-k/top-p, but q is reported "
                "temperature-only to the ratio and residual.", "biased",
                "only when the request sets top_k < Vd or top_p < 1 and the filter cuts draft mass (first position)",
                _factory("draft_processors_differ")),
]

VOCAB_DECODER_REGISTRY: dict[str, DecoderSpec] = {spec.name: spec for spec in _ENTRIES}
