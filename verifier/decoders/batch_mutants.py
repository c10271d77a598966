"""The batch-shape zoo: speculative decoders that are wrong only in calls of more than two rows.

Issue 29, bug kind 1 ("batch shape and concurrency"): corruption that appears only when more than two requests share
a step, or only at some padded or captured batch sizes.  Engines capture kernels (CUDA graphs) and size scratch
buffers for a few batch sizes and pad a step's batch up to the next one; an index that is right for the smallest
capture and wrong beyond it corrupts only the requests in the later slots of a larger batch.  A suite that always
calls ``generate`` with the same number of rows never sees it, or sees it only diluted; the suite axis
``batch_composition`` (:mod:`verifier.suite.batch`, :mod:`verifier.runner.batch`) tests each rows-per-call level
apart.

* ``corrupt_batch_gt2`` (:class:`CorruptBatchGt2Decoder`): in a call of more than two rows, the rows in slots
  ``>= 2`` (a row's slot is its index in the call, kept for the request's lifetime however rows finish) draw the
  recovered token from the target row ``p`` instead of the residual ``max(0, p - q)``: the residual was written into
  a scratch buffer of two rows (the smallest captured batch) and the later slots read the fallback.  The accept test
  ``u < p(d) / q(d)`` is the reference's in every slot and uses the same uniforms, so the first round's accepted
  counts are the reference's row for row: acceptance looks normal.  Exact law per slot and per level:
  :mod:`verifier.exact.batch` (the corrupted slots follow the ``full_p_fallback`` rule).

* ``mixed_temperature_leak`` (:class:`MixedTemperatureLeakDecoder`): in a call whose rows ask for different
  temperatures (``generate(..., row_temperatures=)``), every row is sampled at row 0's -- one sampling parameter read
  for the whole batch.  Calls at one temperature are the reference.

* ``prompt_length_leak`` (:class:`PromptLengthLeakDecoder`): in a call whose rows have prompts of different lengths
  (``generate(..., row_prompts=)``), every row's generation starts at slot 0's prompt length -- one sequence length
  read for the whole padded batch, as the offset of the first generated token's position and KV slot.  A row with a
  shorter prompt reads the padding after it (the pad id, :data:`verifier.exact.batch.PAD_TOKEN_ID`) as
  prompt; a row with a longer one has its last prompt tokens overwritten by generation.  Calls whose rows share one
  prompt length are the reference.

:data:`BATCH_DECODER_REGISTRY` maps a name to a :class:`~verifier.decoders.spec.DecoderSpec`;
:func:`verifier.decoders.make_decoder` finds these names too (``decoder = "corrupt_batch_gt2"`` in a suite).
"""

from __future__ import annotations

import torch

from verifier.decoders.kernels import _chain, residual_or_target
from verifier.decoders.spec import DecoderSpec
from verifier.decoders.speculative import SpeculativeDecoder
from verifier.exact.batch import leaked_prompt

__all__ = ["BATCH_DECODER_REGISTRY", "CLEAN_SLOTS", "CorruptBatchGt2Decoder", "MixedTemperatureLeakDecoder",
           "PromptLengthLeakDecoder", "batch_decoder_names"]

CLEAN_SLOTS = 2  # slots with their own residual buffer: the smallest captured batch (verifier.exact.batch.CLEAN_ROWS)


class CorruptBatchGt2Decoder(SpeculativeDecoder):
    """Reference speculative decoding whose rows in slots >= 2 of a call of > 2 rows recover from ``p``.

    Parameters as for :class:`~verifier.decoders.SpeculativeDecoder` (the kernel is this class's own).

    Notes
    -----
    Per row: a call of ``b <= 2`` rows, or slot 0 or 1 of any call, is the reference (Leviathan et al. 2023,
    Alg. 1; same uniforms, same tokens for the same seed); a slot ``>= 2`` of a call of ``b > 2`` rows follows the
    ``full_p_fallback`` rule (:func:`verifier.exact.batch.slot_law`), whose recovered token is drawn from ``p``.
    Rows of a call are independent, so the rows of calls of ``b`` rows have the exact mixture
    :func:`verifier.exact.batch.batch_level_law`.
    """

    def __init__(self, target, draft, num_draft_tokens: int = 4, **options) -> None:
        options.pop("kernel", None)  # the kernel is the defect
        super().__init__(target, draft, num_draft_tokens, kernel=self._kernel, **options)
        self._call_rows = 0
        self._slots: torch.Tensor | None = None

    def generate(self, prompt_ids, num_samples, *args, **kwargs):
        self._call_rows = int(num_samples) if isinstance(num_samples, int) else 0  # bad values: refused by super()
        return super().generate(prompt_ids, num_samples, *args, **kwargs)

    def _round(self, st: dict, sampling, gen: torch.Generator) -> torch.Tensor:
        self._slots = st["rows"]  # slot of each batch row this round (rows that finished have left the batch)
        return super()._round(st, sampling, gen)

    def _kernel(self, target_probs, draft_probs, draft_token_ids, generator):
        """:func:`verifier.decoders.verify_chain` (same uniforms) with the recovered token from ``p`` in late slots."""
        corrupt = (self._slots >= CLEAN_SLOTS) & (self._call_rows > CLEAN_SLOTS)

        def recover(p_rej, q_rej):
            return torch.where(corrupt[:, None], p_rej, residual_or_target(p_rej, q_rej))  # BUG on purpose

        return _chain(target_probs.to(torch.float64), draft_probs.to(torch.float64), draft_token_ids.long(), generator,
                      recover_rule=recover)


class MixedTemperatureLeakDecoder(SpeculativeDecoder):
    """Reference speculative decoding that applies row 0's temperature to every row of a mixed-temperature call.

    ``generate(..., row_temperatures=)`` asks for rows at different temperatures in one call; this decoder takes the
    first row's (slot 0's) as the batch's, as a step that reads one sampling parameter for the whole batch.  A call
    whose rows share one temperature, or without ``row_temperatures``, is the reference.  Parameters as for
    :class:`~verifier.decoders.SpeculativeDecoder`.

    Notes
    -----
    Per row: slot 0 and every row at slot 0's temperature are exact; a row asked at ``t_r != t_0`` is exact
    speculative sampling of the target at ``t_0`` (``verifier.exact.target_law`` of the target processed at ``t_0``).
    The batch-composition axis puts its filler rows (``mixed_temperature``) in the even slots, slot 0 included, so
    every audited row is drawn at the filler's temperature.
    """

    def _row_scale(self, scale):
        return None if scale is None else scale[:1].expand_as(scale).clone()  # BUG on purpose: row 0's for all rows


class PromptLengthLeakDecoder(SpeculativeDecoder):
    """Reference speculative decoding that runs every row of a mixed-length call at slot 0's prompt length.

    ``generate(..., row_prompts=)`` asks for rows with their own prompts in one padded call; this decoder reads one
    sequence length for the batch (slot 0's) and starts every row's generation there: a shorter row continues its
    prompt plus visible pad tokens, a longer row its prompt's first ``len(row_prompts[0])`` tokens
    (:func:`verifier.exact.leaked_prompt`).  A call whose rows share one prompt length, or without ``row_prompts``,
    is the reference.  Parameters as for :class:`~verifier.decoders.SpeculativeDecoder`.

    Notes
    -----
    Per row: exact speculative sampling of the target after ``leaked_prompt(row_prompts[r], len(row_prompts[0]))``
    (``verifier.exact.target_law`` of that prompt; at a mixed-prompts level
    :func:`verifier.exact.mixed_prompts_level_law`).  The batch-composition axis puts its filler rows
    (``mixed_prompt_lengths``) in the even slots, slot 0 included, so every audited row runs at a filler's length.
    A tabular n-gram model sees it only where the leaked prompt's last ``context_len`` tokens differ from the
    row's own (a pad id equal to the prompt's last token hides it).
    """

    def _row_prompts(self, prompts):
        length = len(prompts[0])
        return [leaked_prompt(p, length) for p in prompts]  # BUG on purpose: slot 0's length for every row


def _factory(cls):
    return lambda target, draft, k, **options: cls(target, draft, k, **options)


_ENTRIES = [
    DecoderSpec("corrupt_batch_gt2", "In a generate call of more than 2 rows, rows in slots >= 2 draw the recovered token "
                "from the target row p instead of the residual (a residual scratch buffer sized for the captured batch "
                "of 2); acceptance is the reference's.", "biased",
                "only in calls of more than 2 rows (chunk_size / batch_composition levels > 2), T > 0, p != q where "
                "both have mass, at the first emitted position already; a share (b - 2) / b of the rows of calls of b "
                "rows; calls of 1 or 2 rows are the reference", _factory(CorruptBatchGt2Decoder)),
    DecoderSpec("mixed_temperature_leak", "In a generate call whose rows ask for different temperatures "
                "(row_temperatures), every row is sampled at row 0's temperature (one sampling parameter read for "
                "the whole batch).", "biased",
                "only in mixed-temperature calls (batch_composition mixed_temperature, filler rows in the even slots "
                "from slot 0), T > 0, where the filler's temperature differs: every audited row is drawn at it; "
                "calls at one temperature are the reference", _factory(MixedTemperatureLeakDecoder)),
    DecoderSpec("prompt_length_leak", "In a generate call whose rows have prompts of different lengths (row_prompts), "
                "every row's generation starts at slot 0's prompt length (one sequence length read for the padded "
                "batch): a shorter row reads pad tokens as prompt, a longer row's prompt tail is overwritten.", "biased",
                "only in mixed-prompt-length calls (batch_composition mixed_prompt_lengths, filler rows in the even "
                "slots from slot 0) where the cut or padded prompt changes the model's context (for an n-gram model: "
                "its last context_len tokens); calls whose rows share one prompt length are the reference",
                _factory(PromptLengthLeakDecoder)),
]

BATCH_DECODER_REGISTRY: dict[str, DecoderSpec] = {spec.name: spec for spec in _ENTRIES}


def batch_decoder_names() -> list[str]:
    """Names of the batch-shape zoo's decoders."""
    return list(BATCH_DECODER_REGISTRY)
