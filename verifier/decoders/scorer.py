"""Teacher-forced processed target probs for every emitted prefix (known-p mode of the runner).

:class:`TargetScorer` reruns the target over ``prompt + sample[:t]`` for every position t of a
sample array and returns the processed float64 target probs there -- the reference law each
emitted token should follow, used by randomized-PIT cells.  It yields batches, so 100k samples x
vocab never sit in memory at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import torch

from verifier.decoders._runner import CacheRunner, check_prompt, model_device, model_vocab_size
from verifier.errors import invalid_argument
from verifier.protocols import PADDING_TOKEN_ID
from verifier.sampling import GENERATED_STEP, SamplingConfig, context_codes, processed_probs

__all__ = ["TargetScorer", "ScoredBatch"]

DEFAULT_BATCH_SIZE = 256  # rows per forward pass; memory ~ batch * max_new_tokens * vocab * 8 bytes


@dataclass
class ScoredBatch:
    """Target probs for rows ``start .. start + len(probs) - 1`` of the sample array.

    Attributes
    ----------
    start : int
        Index of the first row in the full sample array.
    probs : np.ndarray, shape (batch, max_new_tokens, vocab), float64
        ``probs[i, t]`` = processed target probs of token t given prompt + sample[i, :t]; rows of
        padding positions (``valid`` False) are all 0.
    valid : np.ndarray, shape (batch, max_new_tokens), bool
        True where the sample holds an emitted token (not -1).
    """

    start: int
    probs: np.ndarray
    valid: np.ndarray


class TargetScorer:
    """Teacher-forced processed target probs for sample arrays.

    Parameters
    ----------
    model : causal LM
        The target (Hugging Face causal LM or :class:`verifier.models.TabularCausalLM`), any device/dtype.
    batch_size : int, default 256
        Sample rows per forward pass.

    Examples
    --------
    >>> from verifier.exact.tabular import TabularLM
    >>> from verifier.models import TabularCausalLM
    >>> lm = TabularLM({(0,): ["1/2", "1/2"], (1,): ["1/4", "3/4"]}, vocab_size=2, context_len=1)
    >>> batch = next(TargetScorer(TabularCausalLM(lm)).score([0], np.array([[1, 0]]), SamplingConfig()))
    >>> np.round(batch.probs[0], 4).tolist()
    [[0.5, 0.5], [0.25, 0.75]]
    """

    def __init__(self, model, batch_size: int = DEFAULT_BATCH_SIZE) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise invalid_argument("batch_size", batch_size, "an integer >= 1")
        self.model = model
        self.batch_size = batch_size
        self.device = model_device(model)
        self.vocab_size = model_vocab_size(model)
        self.min_prompt_len = int(getattr(model, "min_prompt_len", 1))

    @torch.no_grad()
    def score(self, prompt_ids: Sequence[int], samples: np.ndarray, sampling: SamplingConfig) -> Iterator[ScoredBatch]:
        """Yield :class:`ScoredBatch` objects covering every row of ``samples`` in order.

        Parameters
        ----------
        prompt_ids : sequence of int
        samples : np.ndarray, shape (num_samples, max_new_tokens), int64
            Emitted tokens, ``-1`` after EOS (as returned by a decoder).
        sampling : SamplingConfig
            The config the samples were drawn under (processed probs use it, with the
            context-token mask when a repetition penalty is set).

        Raises
        ------
        InvalidArgumentError
            If ``samples`` is not a 2-D integer array with ids in the vocabulary or -1, or the
            prompt is invalid.
        """
        prompt = check_prompt(prompt_ids, self.vocab_size, self.min_prompt_len)
        arr = np.asarray(samples)
        if arr.ndim != 2 or arr.shape[1] < 1 or not np.issubdtype(arr.dtype, np.integer):
            raise invalid_argument("samples", f"<array shape={arr.shape} dtype={arr.dtype}>", "int64 (num_samples, max_new_tokens >= 1)")
        if arr.size and ((arr < PADDING_TOKEN_ID).any() or (arr >= self.vocab_size).any()):
            raise invalid_argument("samples", "<ids out of range>", f"token ids in 0..{self.vocab_size - 1} or -1")
        if not isinstance(sampling, SamplingConfig):
            raise invalid_argument("sampling", sampling, "a verifier.SamplingConfig")
        for start in range(0, arr.shape[0], self.batch_size):
            chunk = torch.as_tensor(arr[start:start + self.batch_size], dtype=torch.int64, device=self.device)
            yield self._score_chunk(start, prompt, chunk, sampling)

    def _score_chunk(self, start: int, prompt: list[int], chunk: torch.Tensor, sampling: SamplingConfig) -> ScoredBatch:
        batch, length = chunk.shape
        valid = chunk != PADDING_TOKEN_ID
        runner = CacheRunner(self.model, self.device)
        runner.prefill(prompt[:-1], batch)
        # inputs: last prompt token, then the sample without its last token; padding -> a dummy id
        inputs = torch.cat([torch.full((batch, 1), prompt[-1], dtype=torch.int64, device=self.device),
                            chunk[:, :-1].clamp(min=0)], dim=1)
        logits = runner.append(inputs)
        seen = None
        if sampling.counts_generated:  # context codes: prompt bit + 2 x times generated before the position
            vocab = logits.shape[-1]
            seen = context_codes(prompt, batch, vocab, self.device)[:, None].repeat(1, length, 1)
            if length > 1:
                one_hot = torch.nn.functional.one_hot(chunk[:, :-1].clamp(min=0), vocab).to(torch.int32) * valid[:, :-1, None]
                seen[:, 1:] += GENERATED_STEP * torch.cumsum(one_hot, dim=1, dtype=torch.int32)
        elif sampling.repetition_penalty is not None:
            vocab = logits.shape[-1]
            seen = torch.zeros(batch, length, vocab, dtype=torch.bool, device=self.device)
            seen[:, :, torch.as_tensor(prompt, device=self.device)] = True
            if length > 1:
                one_hot = torch.nn.functional.one_hot(chunk[:, :-1].clamp(min=0), vocab).bool() & valid[:, :-1, None]
                seen[:, 1:] |= torch.cummax(one_hot.to(torch.int8), dim=1).values.bool()
        probs = processed_probs(logits, sampling, seen)
        probs = torch.where(valid[..., None], probs, torch.zeros_like(probs))
        return ScoredBatch(start=start, probs=probs.cpu().numpy(), valid=valid.cpu().numpy())
